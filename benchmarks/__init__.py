"""The benchmark harness of pikku_workflows: B1-B7 against DBOS and plain RQ (issue 6)."""
