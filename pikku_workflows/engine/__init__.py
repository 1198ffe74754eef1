"""The engine: the store (every ORM write), the dispatch port and one step's execution;
the runtime above drives passes with it (internal)."""
