"""Exit 0 if the PostgreSQL server of the given URL accepts a connection, else 1."""

from __future__ import annotations

import sys
from urllib.parse import urlparse

import psycopg

url = urlparse(sys.argv[1] if len(sys.argv) > 1 else "postgres://root@127.0.0.1:5432/")
try:
    psycopg.connect(
        host=url.hostname or "127.0.0.1", port=url.port or 5432, user=url.username or "root",
        password=url.password or "", dbname="postgres", connect_timeout=2,
    ).close()
except psycopg.Error:
    sys.exit(1)
