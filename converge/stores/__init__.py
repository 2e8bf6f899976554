"""Run store backends, one module each, like httpx's transports.

- `converge.stores.sqlite`: `SqliteRunStore`, the embedded default (standard `sqlite3`,
  imported on first connection).
- `converge.stores.postgres`: `PostgresRunStore`, for many writers (extra `postgres`:
  psycopg 3, imported lazily).

Both are re-exported from `converge`; the `RunStore` protocol, `RunRecord` and `RunSummary`
they share are there too. Importing this package loads no database driver.
"""

from .postgres import PostgresRunStore
from .sqlite import SqliteRunStore

__all__ = ["PostgresRunStore", "SqliteRunStore"]
