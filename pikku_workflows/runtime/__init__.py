"""The runtime: orchestrator passes, step workers and recovery, above the DSL context and
the graph runner they drive."""
