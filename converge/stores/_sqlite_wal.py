"""WAL checkpoints from a thread of their own, off the path of every save.

In WAL mode a commit appends pages to the `-wal` file; a checkpoint copies them back into
the database file. SQLite checkpoints inside the commit that takes the log past
`wal_autocheckpoint` pages, so that save waits for it: with the 500 KB entries of a run of
1,000 facts a cycle, about two thirds of what a save costs (W8). Here, a writable store
counts what its writes add to the log (`Logged`) and nudges `CHECKPOINTS` once that passes
`NUDGE_PAGES`; the keeper's daemon thread checkpoints the file (`PASSIVE`: it never waits
for, nor blocks, a reader or a writer), at most once per `_GAP` seconds, through a
short-lived connection of its own. The store's writer keeps SQLite's own checkpoints for a
log past `BACKSTOP_PAGES`, should the thread fall behind.

What a commit made durable does not change: a committed save is in the log, whichever
connection copies it back, and a checkpoint cut short (a killed process) is one SQLite
finishes when the file is next opened.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final, final

from .._core._exceptions import StoreError
from .._kernel._log import warn
from ._sqlite_file import identity

if TYPE_CHECKING:
    import sqlite3

__all__ = ["BACKSTOP_PAGES", "CHECKPOINTS", "NUDGE_PAGES", "Checkpoints", "Logged", "truncate"]

BACKSTOP_PAGES: Final = 4000
"""A writer's `wal_autocheckpoint`: SQLite's own checkpoint, at four times its default."""

NUDGE_PAGES: Final = 256
"""The log a store's writes add, in pages, before it has the thread checkpoint it: a
checkpoint of a few pages would cost its two syncs for little (W5's small saves)."""

_PAGE: Final = 4096
"""SQLite's page size (its default, which a store keeps)."""

_PAGES_A_WRITE: Final = 3
"""The pages a write adds to the log besides its texts: the head's, a table's and an index's."""

_GAP: Final = 0.05
"""Seconds between two checkpoints of a file: the writes in between are copied together."""


@final
class Logged:
    """Roughly how much of a store's log its writes added since it last nudged the thread."""

    __slots__ = ("_pages",)

    def __init__(self) -> None:
        self._pages = 0

    def add(self, written: int) -> bool:
        """Count a committed write given `written` bytes of texts; whether to nudge now."""
        self._pages += _PAGES_A_WRITE + written // _PAGE
        if self._pages < NUDGE_PAGES:
            return False
        self._pages = 0
        return True


@final
class Checkpoints:
    """Checkpoints the files it is nudged about, one at a time, from one daemon thread.

    The thread starts with the first nudge and sleeps while nothing is pending. A file is
    checkpointed only while its path still names the file that was written (its device and
    inode); a checkpoint the file's locks refuse is left to the next write. Any other failure
    is logged once per file: its log is then checkpointed by its writer (`BACKSTOP_PAGES`).
    A store that closes `forget`s its file first, so that no checkpoint opens it afterwards.
    """

    __slots__ = ("_current", "_pending", "_thread", "_wake", "_warned")

    def __init__(self) -> None:
        self._wake = threading.Condition()
        self._pending: dict[Path, tuple[int, int]] = {}
        self._current: Path | None = None
        self._thread: threading.Thread | None = None
        self._warned: set[Path] = set()

    def nudge(self, path: Path, file: tuple[int, int]) -> None:
        """Checkpoint `path`, the file `file` (its device and inode), soon."""
        with self._wake:
            self._pending[path] = file
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._main, name="converge-checkpoints", daemon=True
                )
                self._thread.start()
            self._wake.notify_all()

    def forget(self, path: Path) -> None:
        """Drop `path`'s pending checkpoint, and wait for the one running on it, if any."""
        with self._wake:
            self._pending.pop(path, None)
            while self._current == path:
                self._wake.wait()

    def _forked(self) -> None:
        """In a forked child: the parent's thread is not this process's."""
        self._wake = threading.Condition()
        self._pending = {}
        self._current = None
        self._thread = None

    def _main(self) -> None:
        while True:
            with self._wake:
                while not self._pending:
                    self._wake.wait()
                path = next(iter(self._pending))
                file = self._pending.pop(path)
                self._current = path
            try:
                self._checkpoint(path, file)
            finally:
                with self._wake:
                    self._current = None
                    self._wake.notify_all()
            time.sleep(_GAP)  # the writes meanwhile are copied together, by the next one

    def _checkpoint(self, path: Path, file: tuple[int, int]) -> None:
        import sqlite3

        if identity(path) != file:  # deleted or replaced since: not the file written
            return
        try:
            # `mode=rw`: never create a file that went away meanwhile
            connection = sqlite3.connect(
                f"{path.absolute().as_uri()}?mode=rw", uri=True, isolation_level=None
            )
            try:
                connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            finally:
                connection.close()
        except sqlite3.OperationalError as error:
            if error.sqlite_errorname not in _LEFT_TO_LATER:
                self._warn(path, error)
        except sqlite3.Error as error:
            self._warn(path, error)

    def _warn(self, path: Path, error: BaseException) -> None:
        if path not in self._warned:
            self._warned.add(path)
            warn(
                "converge.store",
                "write-ahead log not checkpointed; its writer will",
                path=str(path),
                error=f"{type(error).__name__}: {error}",
            )


_LEFT_TO_LATER: Final = frozenset({"SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_CANTOPEN"})
"""Why a checkpoint is skipped without a word: another connection holds the file's locks, or
the file went away since it was written."""


def truncate(connection: sqlite3.Connection, *, within: float = 30.0) -> None:
    """Copy the whole log into the file and empty it (`wal_checkpoint(TRUNCATE)`).

    SQLite answers "busy" at once, without waiting, while another connection checkpoints
    the file (`CHECKPOINTS`' thread, for one): this tries again for up to `within` seconds.

    Raises:
        StoreError: The log could not be emptied in time.
    """
    deadline = time.monotonic() + within
    while True:
        (busy, _, _) = connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if not busy:
            return
        if time.monotonic() > deadline:
            raise StoreError(f"the write-ahead log was still busy after {within:g} s")
        time.sleep(_GAP / 5)


CHECKPOINTS: Final = Checkpoints()
"""The process's checkpoint keeper."""

os.register_at_fork(after_in_child=CHECKPOINTS._forked)  # pyright: ignore[reportPrivateUsage]
