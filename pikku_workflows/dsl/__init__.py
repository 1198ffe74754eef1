"""DSL workflows: the context given to workflow bodies (their static analysis is
``pikku_workflows.analysis``, a definition)."""
