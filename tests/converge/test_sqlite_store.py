"""The SQLite store's file: deleted or replaced under a running run, or only readable.

A connection keeps writing to the file it opened after that file is deleted or replaced at
its path: every save must then fail as a store error (from the engine, and as one line and
status 1 from `converge run`), never report a run saved that no one can read. A store in a
folder the user may only read (a real unprivileged user, `nobody`) is read by the read
commands, without an error.
"""

from __future__ import annotations

import os
import pwd
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from converge import Engine, RunRecord, SqliteRunStore, StoreError
from converge.stores import sqlite as sqlite_store
from tests.cli_runs import cli, run_id_of
from tests.converge.store_vanish_formation import formation as vanishing
from tests.converge.store_vanish_formation import vanish
from tests.doubles import seed

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
FORMATION = str(HERE / "cli_formation.py")
VANISH = str(HERE / "store_vanish_formation.py")
NOBODY = str(HERE / "as_nobody.py")
GATE = "gate:2:strategies/costly"
MODES = ("delete", "replace")


@pytest.mark.parametrize("mode", MODES)
async def test_sqlite_store_refuses_to_save_when_its_file_was_deleted_or_replaced(
    tmp_path: Path, mode: str
) -> None:
    path = tmp_path / "runs.db"
    store = SqliteRunStore(path)
    first = RunRecord.of(await Engine().run(inputs=[seed("a")]))
    await store.save(first)
    vanish(path, mode)
    second = RunRecord.of(await Engine().run(inputs=[seed("b")]))
    said = "deleted" if mode == "delete" else "replaced"
    with pytest.raises(
        StoreError, match=f"{said} while this process had it open; run .* not saved"
    ):
        await store.save(second)
    with pytest.raises(StoreError, match=said):  # nor does it read what no one else can see
        await store.load(first.run_id)
    store.close()
    reopened = SqliteRunStore(path, read_only=True)
    runs = [run.run_id for run in await reopened.list_runs()]
    assert runs == ([] if mode == "delete" else [first.run_id])
    reopened.close()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("durability", ["cycle", "exit"])
async def test_engine_run_fails_with_store_error_when_its_store_file_vanishes(
    tmp_path: Path, mode: str, durability: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "runs.db"
    store = SqliteRunStore(path)
    await store.save(RunRecord.of(await Engine().run(inputs=[seed("a")])))  # the file exists
    monkeypatch.setenv("VANISH_STORE", str(path))
    monkeypatch.setenv("VANISH_MODE", mode)
    engine = vanishing.engine(store=store, durability="exit" if durability == "exit" else "cycle")
    with pytest.raises(StoreError, match="while this process had it open") as raised:
        await engine.run()
    if durability == "exit":  # the final save failed: the error keeps the finished run
        result = raised.value.result
        assert result is not None
        assert {fact.id for fact in result.context.facts()} == {"start", "after"}
    store.close()


def vanishing_run(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    store = tmp_path / "runs.db"
    code, _ = cli("--store", str(store), "run", FORMATION)  # the store file exists
    assert code == 6
    return subprocess.run(
        [sys.executable, "-m", "converge.cli", "--store", str(store), "run", VANISH],
        capture_output=True,
        text=True,
        check=False,
        env=os.environ | {"VANISH_STORE": str(store), "VANISH_MODE": mode},
    )


@pytest.mark.parametrize("mode", MODES)
def test_converge_run_exits_1_with_one_line_when_its_store_file_vanishes(
    tmp_path: Path, mode: str
) -> None:
    """Before: exit 0 and "saved run ... to runs.db", and the store held no run."""
    process = vanishing_run(tmp_path, mode)
    assert process.returncode == 1, process.stdout
    assert "saved run" not in process.stdout
    said = "deleted" if mode == "delete" else "replaced"
    [line] = [line for line in process.stderr.splitlines() if line.startswith("error:")]
    assert line.startswith("error: StoreError: ")
    assert f"{tmp_path / 'runs.db'} was {said} while this process had it open" in line
    assert "Traceback" not in process.stderr


def test_a_save_checks_the_file_identity_at_most_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The identity check is one `os.stat`; a save pays for at most two, whatever it writes."""
    path = tmp_path / "runs.db"
    record = RunRecord.of(anyio.run(lambda: Engine().run(inputs=[seed("a")])))
    store = SqliteRunStore(path)
    anyio.run(store.save, record)  # the first save opens the connection
    checked: list[Path] = []
    real = sqlite_store.identity

    def counted(where: Path) -> tuple[int, int] | None:
        checked.append(where)
        return real(where)

    monkeypatch.setattr(sqlite_store, "identity", counted)

    async def saves(count: int) -> None:
        for _ in range(count):
            await store.save(record)

    anyio.run(saves, 10)
    store.close()
    assert 10 <= len(checked) <= 20
    assert set(checked) == {path}


# --- a store the user may only read -------------------------------------------------------------


def nobody_or_skip() -> pwd.struct_passwd:
    if os.geteuid() != 0:
        pytest.skip("dropping to the user nobody needs root")
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody here")


@pytest.fixture
def shared_folder() -> Iterator[Path]:
    """A folder outside pytest's (which only root may enter), readable by everyone."""
    folder = Path(tempfile.mkdtemp(prefix="converge-read-only-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, NOBODY, *args],
        capture_output=True,
        text=True,
        check=False,
        env=os.environ | {"PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)])},
    )


def test_read_commands_work_for_a_user_who_may_not_write_the_store_or_its_folder(
    shared_folder: Path,
) -> None:
    """Before: `OperationalError: attempt to write a readonly database` (no -shm file yet)."""
    user = nobody_or_skip()
    folder = shared_folder / "store"
    store = str(folder / "runs.db")
    paused = run_id_of(cli("--store", store, "run", FORMATION)[1])
    done = run_id_of(cli("--store", store, "run", FORMATION)[1])
    assert cli("--store", store, "resume", done, "--approve", GATE, "--by", "jane")[0] == 0
    assert sorted(path.name for path in folder.iterdir()) == ["reports", "runs.db"]
    out = shared_folder / "out"
    out.mkdir()
    os.chown(out, user.pw_uid, user.pw_gid)
    before = Path(store).read_bytes()
    for args, status in (
        (("runs",), 0),
        (("show", done), 0),
        (("verify", done), 0),
        (("review", paused), 6),
        (("replay", done), 0),
        (("report", done, "-o", str(out / "report.html")), 0),
    ):
        process = as_nobody("--store", store, *args)
        assert process.returncode == status, (args, process.stderr)
        assert "error" not in process.stderr, args
    assert (out / "report.html").is_file()
    assert sorted(path.name for path in folder.iterdir()) == ["reports", "runs.db"]
    assert Path(store).read_bytes() == before


def test_a_read_only_store_whose_log_needs_a_missing_shm_file_is_one_clear_error(
    shared_folder: Path,
) -> None:
    """Reading the file without its log would show older saves as the store: refuse, clearly."""
    nobody_or_skip()
    store = shared_folder / "runs.db"
    run_id = run_id_of(cli("--store", str(store), "run", FORMATION)[1])
    writer = sqlite3.connect(store, isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("UPDATE converge_runs SET detail = detail || ' (later)'")
    # The log holds that save; copy the store and its log as they are, without the -shm file.
    copy = shared_folder / "copy"
    copy.mkdir()
    shutil.copyfile(store, copy / "runs.db")
    shutil.copyfile(f"{store}-wal", copy / "runs.db-wal")
    writer.close()
    copy.chmod(0o755)
    process = as_nobody("--store", str(copy / "runs.db"), "show", run_id)
    assert process.returncode == 1
    assert process.stderr.splitlines()[0] == (
        f"error: StoreError: cannot read {copy / 'runs.db'} read-only: its write-ahead log "
        "(runs.db-wal) holds saves that need the missing runs.db-shm file, which this folder "
        "does not let it create"
    )
