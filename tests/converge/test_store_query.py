"""Stores read by query: filters and pages, the inbox, delete and prune, schema 5.

SQLite always; PostgreSQL against a real server when DATABASE_URL is set. The PostgreSQL
database is shared with other tests, so each test names its runs with a name of its own
and selects them by it.
"""

import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hitl_formation import SIGNING_KEY, build_engine
from test_store import postgres_or_skip, scoped_postgres

from converge import (
    Engine,
    GateDecision,
    PostgresRunStore,
    RunNotFoundError,
    RunProgress,
    RunRecord,
    RunStatus,
    SqliteRunStore,
    StopReason,
    StoreError,
    verify,
)
from converge._core._store import SCHEMA_VERSION
from tests.doubles import seed

HERE = Path(__file__).resolve().parent
V4_FIXTURE = HERE / "fixtures" / "runs-v4.db"
"""A schema 4 store written with the signing key `test-signing-key`: a converged run, a
paused one, and a fork of the converged one at cycle 4."""
V4_CONVERGED = "c85051e6527145788fe7215b6989958e"
V4_PAUSED = "9b5cee0c630d46b7a88cbd8a7dd9dc46"
V4_FORK = "c2a533a7460b4f3e9946729a71e9fa44"

Store = SqliteRunStore | PostgresRunStore


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture(params=["sqlite", "postgres"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(kind: str, tmp_path: Path, clock: Clock) -> Iterator[Store]:
    opened: Store = (
        SqliteRunStore(tmp_path / "runs.db", clock=clock)
        if kind == "sqlite"
        else PostgresRunStore(postgres_or_skip(), clock=clock)
    )
    yield opened
    opened.close()


def unique() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


async def finished(store: Store, name: str, *, content: str = "a") -> RunRecord:
    result = await Engine().run(inputs=[seed(content)])
    record = RunRecord.of(result, name=name, formation=f"{name}.py")
    await store.save(record)
    return record


async def paused(store: Store, name: str) -> RunRecord:
    result = await build_engine(signing_key=None).run()
    assert result.stop_reason is StopReason.AWAITING_HUMAN
    record = RunRecord.of(result, name=name)
    await store.save(record)
    return record


async def test_list_runs_pages_through_every_run_by_query(store: Store, clock: Clock) -> None:
    name = unique()
    saved: list[str] = []
    for index in range(7):
        clock.now += timedelta(minutes=1)
        saved.append((await finished(store, name, content=f"c{index}")).run_id)
    pages = [await store.list_runs(formation=name, limit=3, offset=k) for k in (0, 3, 6, 9)]
    assert [len(page) for page in pages] == [3, 3, 1, 0]
    listed = [run.run_id for page in pages for run in page]
    assert listed == list(reversed(saved))  # the most recently saved first, none twice


async def test_list_runs_filters_by_status_stop_reason_and_pending(
    store: Store, clock: Clock
) -> None:
    name = unique()
    done = await finished(store, name)
    waiting = await paused(store, name)
    by_status = await store.list_runs(formation=name, status=RunStatus.PAUSED)
    assert [run.run_id for run in by_status] == [waiting.run_id]
    assert by_status[0].pending == 1
    by_reason = await store.list_runs(formation=name, status=StopReason.CONVERGED)
    assert [run.run_id for run in by_reason] == [done.run_id]
    assert [r.run_id for r in await store.list_runs(formation=name, pending=True)] == [
        waiting.run_id
    ]
    assert [r.run_id for r in await store.list_runs(formation=name, pending=False)] == [done.run_id]


async def test_list_runs_judges_a_running_run_by_its_lease_in_the_query(
    store: Store, clock: Clock
) -> None:
    name = unique()
    running = await _running(store, name)
    assert [r.run_id for r in await store.list_runs(formation=name, status=RunStatus.RUNNING)] == [
        running
    ]
    clock.now += timedelta(seconds=120)  # the lease ran out: interrupted, in the query too
    assert await store.list_runs(formation=name, status=RunStatus.RUNNING) == ()
    [lost] = await store.list_runs(formation=name, status=RunStatus.INTERRUPTED)
    assert (lost.run_id, lost.status) == (running, RunStatus.INTERRUPTED)


async def _running(store: Store, name: str) -> str:
    """A run stopped by its caller after its first per-cycle save, left `RUNNING`."""
    from converge._core._progress import ProgressHead

    run_id = uuid.uuid4().hex
    head = ProgressHead(
        run_id=run_id,
        name=name,
        registrations=(),
        invariants=(),
        initial_root="0" * 64,
        cycle=0,
        clock=0,
        version=0,
        fact_count=0,
        dirty=(),
        tokens=0,
        elapsed_seconds=0.0,
        journal_length=0,
        journal_digest="",
    )
    await store.save_progress(RunProgress(head, None, RunStatus.RUNNING, 60.0), expected_version=0)
    return run_id


async def test_list_runs_searches_text_literally_in_any_case(store: Store) -> None:
    name = unique()
    odd = f"{name}-50%_Ünï"
    record = await finished(store, odd)
    await finished(store, f"{name}-500xx")
    # the last 14 characters: 6 of the unique name, so no other test's run matches
    assert [r.run_id for r in await store.list_runs(search=odd.upper()[-14:].lower())] == [
        record.run_id
    ]
    found = await store.list_runs(search=f"{name}-50%_")
    assert [r.run_id for r in found] == [record.run_id]  # % and _ match only themselves
    assert [r.run_id for r in await store.list_runs(search=record.run_id[4:20])] == [record.run_id]


async def test_list_runs_since_takes_runs_saved_from_then(store: Store, clock: Clock) -> None:
    name = unique()
    await finished(store, name)
    clock.now += timedelta(days=2)
    later = await finished(store, name, content="b")
    since = clock.now - timedelta(days=1)
    assert [r.run_id for r in await store.list_runs(formation=name, since=since)] == [later.run_id]


async def test_inbox_lists_pending_gates_oldest_first_and_drops_a_decided_one(
    store: Store, clock: Clock
) -> None:
    name = unique()
    first = await paused(store, name)
    clock.now += timedelta(minutes=5)
    second = await paused(store, name)
    mine = [g for g in await store.pending_gates(limit=10_000) if g.name == name]
    assert [g.run_id for g in mine] == [first.run_id, second.run_id]
    [gate] = first.pending
    assert (mine[0].gate_id, mine[0].ref, mine[0].summary) == (
        gate.gate_id,
        gate.proposal.ref,
        gate.summary,
    )
    engine = build_engine(signing_key=None, store=store)
    result = await engine.resume_run(first.run_id, [GateDecision.approve(gate.gate_id, by="j")])
    assert result.stop_reason is StopReason.CONVERGED
    left = [g.run_id for g in await store.pending_gates(limit=10_000) if g.name == name]
    assert left == [second.run_id]


async def test_delete_removes_a_run_and_refuses_a_paused_one_unless_forced(
    store: Store,
) -> None:
    name = unique()
    done = await finished(store, name)
    waiting = await paused(store, name)
    await store.delete(done.run_id)
    with pytest.raises(RunNotFoundError):
        await store.load(done.run_id)
    with pytest.raises(StoreError, match="is paused: not deleted"):
        await store.delete(waiting.run_id)
    assert (await store.load(waiting.run_id)).status is RunStatus.PAUSED
    await store.delete(waiting.run_id, force=True)
    assert await store.list_runs(formation=name) == ()
    assert [g for g in await store.pending_gates(limit=10_000) if g.run_id == waiting.run_id] == []
    with pytest.raises(RunNotFoundError):
        await store.delete(waiting.run_id)


async def test_a_stale_writer_cannot_bring_a_deleted_run_back(store: Store) -> None:
    name = unique()
    done = await finished(store, name)
    await store.delete(done.run_id)
    with pytest.raises(StoreError):  # StaleRecordError: the run is gone, not re-created
        await store.save(done, expected_version=1)
    with pytest.raises(RunNotFoundError):
        await store.load(done.run_id)


async def test_prune_deletes_old_stopped_runs_and_keeps_paused_and_new_ones(
    store: Store, clock: Clock
) -> None:
    name = unique()
    old = await finished(store, name)
    old_paused = await paused(store, name)
    clock.now += timedelta(days=40)
    new = await finished(store, name, content="n")
    cutoff = clock.now - timedelta(days=30)
    assert await store.prune(formation=name, older_than=cutoff, dry_run=True) == (old.run_id,)
    assert {r.run_id for r in await store.list_runs(formation=name)} == {
        old.run_id,
        old_paused.run_id,
        new.run_id,
    }
    assert (
        await store.prune(
            formation=name, older_than=cutoff, status=StopReason.CYCLE_BUDGET_EXHAUSTED
        )
        == ()
    )
    assert await store.prune(formation=name, older_than=cutoff) == (old.run_id,)
    assert {r.run_id for r in await store.list_runs(formation=name)} == {
        old_paused.run_id,
        new.run_id,
    }
    assert await store.prune(formation=name, older_than=cutoff, paused=True) == (old_paused.run_id,)
    assert [r.run_id for r in await store.list_runs(formation=name)] == [new.run_id]


async def test_prune_never_takes_a_running_run_whose_lease_holds(
    store: Store, clock: Clock
) -> None:
    name = unique()
    running = await _running(store, name)
    later = clock.now + timedelta(seconds=30)
    assert await store.prune(formation=name, older_than=later) == ()
    clock.now += timedelta(seconds=120)  # lease ran out: interrupted, prunable
    assert await store.prune(formation=name, older_than=clock.now) == (running,)


async def test_a_read_only_store_neither_deletes_nor_prunes(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    writer = SqliteRunStore(path)
    done = await finished(writer, unique())
    writer.close()
    reader = SqliteRunStore(path, read_only=True)
    with pytest.raises(StoreError, match="read-only"):
        await reader.delete(done.run_id)
    with pytest.raises(StoreError, match="read-only"):
        await reader.prune(older_than=datetime.now(UTC))
    assert (await reader.load(done.run_id)).run_id == done.run_id


async def test_prune_interrupted_half_way_deletes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The prune is one transaction: failing after its first run, it leaves every run."""
    import converge.stores._db as db_module

    store = SqliteRunStore(tmp_path / "runs.db")
    name = unique()
    ids = {(await finished(store, name, content=str(k))).run_id for k in range(3)}
    real = db_module._drop  # pyright: ignore[reportPrivateUsage]
    calls: list[str] = []

    def failing(db: db_module.Db, run_id: str) -> None:
        real(db, run_id)
        calls.append(run_id)
        if len(calls) == 2:
            raise OSError("disk gone")

    monkeypatch.setattr(db_module, "_drop", failing)
    with pytest.raises(OSError, match="disk gone"):
        await store.prune(formation=name, older_than=datetime.now(UTC) + timedelta(days=1))
    assert {r.run_id for r in await store.list_runs(formation=name)} == ids
    for run_id in ids:
        assert (await store.load(run_id)).run_id == run_id


async def test_vacuum_gives_the_space_of_pruned_runs_back(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = SqliteRunStore(path)
    name = unique()
    for k in range(40):
        result = await Engine().run(inputs=[seed(f"{k}-" + "x" * 3000)])
        await store.save(RunRecord.of(result, name=name))
    store.close()
    grown = path.stat().st_size
    assert (
        len(await store.prune(formation=name, older_than=datetime.now(UTC) + timedelta(days=1)))
        == 40
    )
    await store.vacuum()
    store.close()
    assert path.stat().st_size < grown / 4
    assert await store.list_runs() == ()


def v4_copy(tmp_path: Path) -> Path:
    path = tmp_path / "runs-v4.db"
    path.write_bytes(V4_FIXTURE.read_bytes())
    return path


async def test_a_schema_4_store_is_upgraded_and_indexed_from_its_records(tmp_path: Path) -> None:
    path = v4_copy(tmp_path)
    with closing(sqlite3.connect(path)) as fixture:
        written = dict(fixture.execute("SELECT run_id, record FROM converge_runs").fetchall())
    store = SqliteRunStore(path)
    runs = {run.run_id: run for run in await store.list_runs()}
    assert set(runs) == {V4_CONVERGED, V4_PAUSED, V4_FORK}
    assert (runs[V4_FORK].parent_run_id, runs[V4_FORK].fork_cycle) == (V4_CONVERGED, 4)
    assert runs[V4_CONVERGED].parent_run_id is None
    assert (runs[V4_PAUSED].pending, runs[V4_CONVERGED].pending) == (1, 0)
    [gate] = await store.pending_gates()
    assert (gate.run_id, gate.gate_id) == (V4_PAUSED, "gate:4:hypotheses/step-3")
    key = SIGNING_KEY.encode()
    for run_id, text in written.items():  # every record comes back as schema 4 held it
        loaded = await store.load(str(run_id))
        assert (
            loaded.model_dump_json() == RunRecord.model_validate_json(str(text)).model_dump_json()
        )
        loaded.verify_signature(key)
        assert verify(loaded.restore_context(), loaded.integrity)
    with closing(sqlite3.connect(path)) as upgraded:
        (schema,) = upgraded.execute(
            "SELECT value FROM converge_meta WHERE key = 'schema_version'"
        ).fetchone()
    assert schema == str(SCHEMA_VERSION) == "8"


async def test_a_schema_4_store_read_only_is_refused_until_opened_for_writing(
    tmp_path: Path,
) -> None:
    path = v4_copy(tmp_path)
    with pytest.raises(StoreError, match="opening it for writing upgrades it"):
        await SqliteRunStore(path, read_only=True).list_runs()


async def test_a_store_of_a_newer_schema_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = SqliteRunStore(path)
    await finished(store, unique())
    store.close()
    with closing(sqlite3.connect(path)) as connection:
        connection.execute(
            "UPDATE converge_meta SET value = ? WHERE key = 'schema_version'",
            (str(SCHEMA_VERSION + 1),),
        )
        connection.execute("DROP TABLE converge_gates")
        connection.commit()
    for read_only in (False, True):
        with pytest.raises(StoreError, match="written by a newer converge"):
            await SqliteRunStore(path, read_only=read_only).list_runs()
    with closing(sqlite3.connect(path)) as connection:
        tables = {name for (name,) in connection.execute("SELECT name FROM sqlite_master")}
        (schema,) = connection.execute("SELECT value FROM converge_meta").fetchone()
    assert "converge_gates" not in tables  # the refused upgrade was rolled back
    assert schema == str(SCHEMA_VERSION + 1)


async def test_a_postgres_store_of_schema_4_is_upgraded_in_place(tmp_path: Path) -> None:
    """The v4 fixture's rows, written into a fresh PostgreSQL schema 4, come back indexed."""
    import psycopg

    with scoped_postgres("v4") as scoped:
        with closing(sqlite3.connect(V4_FIXTURE)) as fixture:
            rows = fixture.execute(
                "SELECT run_id, stop_reason, detail, cycles, fact_count, merkle_root, saved_at, "
                "name, record, checkpoint, version, status, lease_until, failures "
                "FROM converge_runs"
            ).fetchall()
        with psycopg.connect(scoped, autocommit=True) as connection:
            connection.execute(
                "CREATE TABLE converge_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            connection.execute("INSERT INTO converge_meta VALUES ('schema_version', '4')")
            connection.execute(
                "CREATE TABLE converge_runs (run_id TEXT PRIMARY KEY, stop_reason TEXT NOT NULL, "
                "detail TEXT NOT NULL, cycles INTEGER NOT NULL, fact_count INTEGER NOT NULL, "
                "merkle_root TEXT NOT NULL, saved_at TIMESTAMPTZ NOT NULL, name TEXT, "
                "record TEXT NOT NULL, checkpoint TEXT, version INTEGER NOT NULL DEFAULT 1, "
                "status TEXT NOT NULL DEFAULT 'finished', lease_until TEXT, "
                "failures INTEGER NOT NULL DEFAULT 0)"
            )
            with connection.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO converge_runs VALUES "
                    "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    rows,
                )
        store = PostgresRunStore(scoped)
        runs = {run.run_id: run for run in await store.list_runs()}
        assert (runs[V4_FORK].parent_run_id, runs[V4_FORK].fork_cycle) == (V4_CONVERGED, 4)
        assert [g.run_id for g in await store.pending_gates()] == [V4_PAUSED]
        fork = await store.load(V4_FORK)
        fork.verify_signature(SIGNING_KEY.encode())
        store.close()
