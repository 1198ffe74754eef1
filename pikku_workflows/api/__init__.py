"""The REST API: run status and control over HTTP (Django REST framework)."""
