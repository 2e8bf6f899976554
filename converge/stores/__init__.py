"""Run store backends, one module each, like httpx's transports.

- `converge.stores.sqlite`: `SqliteRunStore`, the embedded default (standard `sqlite3`,
  imported on first connection).
- `converge.stores.postgres`: `PostgresRunStore`, for many writers (extra `postgres`:
  psycopg 3, imported lazily).

Both are re-exported from `converge`; the `RunStore` protocol, `RunRecord`, `RunSummary`
and `RunProgress` they share are there too. `CycleDelta` (one journal entry), `assemble`
(a running run's head and journal back into its `RunRecord`) and `assemble_final` (the
same for a finished or paused run stored as rows) are here for a store of your own. Importing this
package loads no database driver.
"""

from .._core._public import publish as _publish
from ._assembly import assemble, assemble_final
from ._journal import CycleDelta
from .postgres import PostgresRunStore
from .sqlite import SqliteRunStore

__all__ = ["CycleDelta", "PostgresRunStore", "SqliteRunStore", "assemble", "assemble_final"]

_publish(__name__, globals(), __all__)
