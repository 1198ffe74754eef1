"""The Django app holding the benchmark workflows."""
