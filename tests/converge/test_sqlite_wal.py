"""The SQLite store's write-ahead log is checkpointed by a thread of its own, off the saves.

A save must not wait for SQLite to copy its log back into the file: the thread does, soon
after. What that must never do: open (and so recreate the log files of) a store that was
closed, deleted or replaced; fail silently or loudly more than once; or make `vacuum`'s
"empty the log" fail because a checkpoint held the file at that moment.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from structlog.testing import capture_logs

from converge import Engine, RunRecord, SqliteRunStore, StoreError
from converge.stores._sqlite_file import identity
from converge.stores._sqlite_wal import BACKSTOP_PAGES, CHECKPOINTS, NUDGE_PAGES, Logged, truncate
from tests.doubles import seed

MEGABYTE = 1 << 20


def until(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    """Whether `condition` came true within `seconds`."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


async def large_record(megabytes: int) -> RunRecord:
    inputs = [seed(f"s{i}", "x" * MEGABYTE) for i in range(megabytes)]
    return RunRecord.of(await Engine().run(inputs=inputs))


def names(folder: Path) -> list[str]:
    return sorted(file.name for file in folder.iterdir())


def wal_file(path: Path, *, copies: bool = False) -> sqlite3.Connection:
    """A new WAL file at `path` with a table `t`; with `copies=False`, it never checkpoints."""
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("PRAGMA journal_mode = WAL")
    if not copies:
        writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("CREATE TABLE t (x TEXT)")
    return writer


def log_of(path: Path) -> Path:
    return path.with_name(f"{path.name}-wal")


async def test_the_log_is_copied_into_the_file_while_the_store_stays_open(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    store = SqliteRunStore(path)
    record = await large_record(6)
    # below the writer's own threshold, so only the thread can have copied it
    assert 6 * MEGABYTE // 4096 < BACKSTOP_PAGES
    await store.save(record)
    assert until(lambda: path.stat().st_size > 6 * MEGABYTE)
    assert (await store.load(record.run_id)).model_copy(update={"version": 0}) == record
    store.close()
    assert not log_of(path).exists()


async def test_no_checkpoint_opens_a_store_once_it_is_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "runs.db"
    store = SqliteRunStore(path)
    for megabytes in (1, 2):  # the second save's checkpoint is still pending at the close
        await store.save(await large_record(megabytes))
    store.close()
    opened: list[str] = []
    connect = sqlite3.connect

    def recording(
        database: str, uri: bool = False, isolation_level: None = None
    ) -> sqlite3.Connection:
        opened.append(database)  # the thread opens a file as `Checkpoints._checkpoint` does
        return connect(database, uri=uri, isolation_level=isolation_level)

    monkeypatch.setattr(sqlite3, "connect", recording)
    await anyio.sleep(0.3)  # longer than the thread's gap between two checkpoints
    assert opened == []
    assert names(tmp_path) == ["runs.db"]


async def test_a_file_deleted_or_replaced_since_its_write_is_never_opened(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    store = SqliteRunStore(path)
    await store.save(await large_record(1))
    written = identity(path)
    assert written is not None
    store.close()
    other = tmp_path / "other.db"
    sqlite3.connect(other).close()  # made first: it cannot get the written file's inode
    path.unlink()
    CHECKPOINTS.nudge(path, written)
    other.rename(path)  # another file at the path now
    CHECKPOINTS.nudge(path, written)
    await anyio.sleep(0.2)
    assert names(tmp_path) == ["runs.db"]
    assert identity(path) != written


def test_a_checkpoint_that_fails_is_logged_once_and_the_thread_goes_on(tmp_path: Path) -> None:
    broken = tmp_path / "broken.db"
    broken.write_bytes(b"not a database, but long enough to be read as one" * 100)
    file = identity(broken)
    assert file is not None
    with capture_logs() as logs:
        CHECKPOINTS.nudge(broken, file)
        assert until(lambda: len(logs) == 1)
        CHECKPOINTS.nudge(broken, file)
        time.sleep(0.2)
        healthy = tmp_path / "runs.db"
        writer = wal_file(healthy)
        writer.execute("INSERT INTO t VALUES (?)", ("y" * MEGABYTE,))
        healthy_file = identity(healthy)
        assert healthy_file is not None
        CHECKPOINTS.nudge(healthy, healthy_file)
        assert until(lambda: healthy.stat().st_size > MEGABYTE)
        writer.close()
    assert [(log["event"], log["log_level"], log["path"]) for log in logs] == [
        ("write-ahead log not checkpointed; its writer will", "warning", str(broken))
    ]
    assert "file is not a database" in str(logs[0]["error"])


def test_emptying_the_log_waits_for_a_checkpoint_that_holds_the_file(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    writer = wal_file(path)
    for _ in range(40):
        writer.execute("INSERT INTO t VALUES (?)", ("z" * MEGABYTE,))
    started = threading.Event()

    def checkpoint() -> None:
        other = sqlite3.connect(path, isolation_level=None)
        started.set()
        other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        other.close()

    thread = threading.Thread(target=checkpoint)
    thread.start()
    started.wait()
    truncate(writer)  # while the other copies 40 MB, SQLite answers "busy" at once
    thread.join()
    assert log_of(path).stat().st_size == 0
    writer.close()


def test_a_log_that_stays_busy_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    writer = wal_file(path, copies=True)
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM t").fetchall()  # holds a snapshot: TRUNCATE can't
    writer.execute("INSERT INTO t VALUES ('later')")
    writer.execute("PRAGMA busy_timeout = 0")
    with pytest.raises(StoreError, match=r"^the write-ahead log was still busy after 0 s$"):
        truncate(writer, within=0.0)
    reader.execute("COMMIT")
    truncate(writer)
    assert log_of(path).stat().st_size == 0
    reader.close()
    writer.close()


def test_small_writes_are_checkpointed_together_and_a_large_one_at_once() -> None:
    logged = Logged()
    assert NUDGE_PAGES == 256  # at 3 pages a small write: a nudge every 86th write
    nudged = [index for index in range(3 * 86) if logged.add(100)]
    assert nudged == [85, 171, 257]
    assert Logged().add(NUDGE_PAGES * 4096)
    assert not Logged().add(0)
