"""Graph workflows: declared nodes and edges, driven by one planner inline and on workers."""
