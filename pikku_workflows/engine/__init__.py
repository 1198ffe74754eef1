"""The engine: replay passes, step execution and every ORM write (internal)."""
