"""DSL workflows: the context given to workflow bodies, and their static analysis."""
