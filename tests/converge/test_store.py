"""Run stores: SQLite always; PostgreSQL against a real server when DATABASE_URL is set."""

import hashlib
import hmac
import json
import os
import sqlite3
import sys
import uuid
from collections.abc import Generator, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import anyio
import pytest
from hitl_formation import build_engine

import converge
from converge import (
    ContextKey,
    Engine,
    GateDecision,
    PostgresRunStore,
    RunNotFoundError,
    RunProgress,
    RunRecord,
    RunStatus,
    RunStore,
    SqliteRunStore,
    StaleRecordError,
    StopReason,
    StoreError,
    verify,
)
from converge._core._canonical import canonical_json
from converge._core._store import SCHEMA_VERSION
from tests.doubles import seed

HERE = Path(__file__).resolve().parent
GATE = "gate:2:strategies/costly"
DATABASE_URL = os.environ.get("DATABASE_URL")
REQUIRE = os.environ.get("CONVERGE_REQUIRE_SERVICES") == "1"


def postgres_or_skip() -> str:
    if DATABASE_URL:
        return DATABASE_URL
    if REQUIRE:
        pytest.fail("CONVERGE_REQUIRE_SERVICES=1 but DATABASE_URL is not set")
    pytest.skip(
        "PostgreSQL store tests need a server: set DATABASE_URL=postgresql://... "
        "(`bash .ci/run` starts one on 127.0.0.1)"
    )


@contextmanager
def scoped_postgres(prefix: str) -> Generator[str]:
    """A fresh PostgreSQL schema of its own, as a URL whose connections use it; dropped at
    the end (skips without a server)."""
    import psycopg
    from psycopg import sql

    dsn = postgres_or_skip()
    schema = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        yield f"{dsn}{'&' if '?' in dsn else '?'}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture(params=["sqlite", "postgres"])
def store_target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    kind: str = request.param
    if kind == "sqlite":
        yield kind, str(tmp_path / "runs.db")
    else:
        yield kind, postgres_or_skip()


def copy_rows(fixture: Path, url: str) -> None:
    """Insert each row of a fixture store's tables, as they are, into the PostgreSQL store at
    `url` (its columns first, in the same order)."""
    import psycopg

    with (
        closing(sqlite3.connect(fixture)) as source,
        psycopg.connect(url, autocommit=True) as connection,
    ):
        for table in ("converge_runs", "converge_journal", "converge_gates"):
            for row in source.execute(f"SELECT * FROM {table}").fetchall():
                marks = ", ".join("%s" for _ in row)
                connection.execute(f"INSERT INTO {table} VALUES ({marks})", row)


def open_store(kind: str, target: str) -> RunStore:
    return SqliteRunStore(target) if kind == "sqlite" else PostgresRunStore(target)


@pytest.fixture
def store(store_target: tuple[str, str]) -> RunStore:
    return open_store(*store_target)


async def test_store_saves_and_loads_a_run(store: RunStore) -> None:
    result = await Engine().run(inputs=[seed("a"), seed("b")])
    assert await store.save(RunRecord.of(result)) == 1
    loaded = await store.load(result.run_id)
    assert loaded.version == 1
    assert loaded == RunRecord.of(result).model_copy(update={"version": 1})
    context = loaded.restore_context()
    assert context.merkle_root() == result.integrity.merkle_root
    assert verify(context, loaded.integrity)


async def test_every_save_bumps_the_version_and_a_stale_save_changes_nothing(
    store: RunStore,
) -> None:
    result = await Engine().run(inputs=[seed("a")])
    record = RunRecord.of(result)
    assert await store.save(record, expected_version=0) == 1
    with pytest.raises(StaleRecordError, match="since version 0 \\(now at version 1\\)"):
        await store.save(record, expected_version=0)
    assert await store.save(record, expected_version=1) == 2
    assert await store.save(record) == 3
    other = RunRecord.of(await Engine().run(inputs=[seed("b")]))
    other = other.model_copy(update={"run_id": result.run_id})
    with pytest.raises(StaleRecordError) as caught:
        await store.save(other, expected_version=2)
    assert caught.value.current == 3
    loaded = await store.load(result.run_id)
    assert (loaded.version, loaded.integrity) == (3, record.integrity)


async def test_a_record_pasted_into_another_runs_row_is_refused(store: RunStore) -> None:
    first = RunRecord.of(await Engine().run(inputs=[seed("a")]))
    second = RunRecord.of(await Engine().run(inputs=[seed("b")]))
    await store.save(first)
    await store.save(second)
    await _paste_record(store, first, into=second.run_id)
    with pytest.raises(StoreError, match=f"row of run {second.run_id} holds the record of run"):
        await store.load(second.run_id)


async def _paste_record(store: RunStore, record: RunRecord, *, into: str) -> None:
    """What an attacker with write access to the table does."""
    body = record.model_dump_json()
    if isinstance(store, SqliteRunStore):
        with closing(sqlite3.connect(store.path)) as connection, connection:
            connection.execute("UPDATE converge_runs SET record = ? WHERE run_id = ?", (body, into))
        return
    import psycopg

    with psycopg.connect(os.environ["DATABASE_URL"]) as connection:
        connection.execute("UPDATE converge_runs SET record = %s WHERE run_id = %s", (body, into))


async def test_store_load_of_an_unknown_run_raises(store: RunStore) -> None:
    with pytest.raises(RunNotFoundError, match="no run 'missing-"):
        await store.load(f"missing-{uuid.uuid4().hex}")


async def test_store_lists_the_latest_runs_first(store: RunStore) -> None:
    ids: list[str] = []
    for name in ("a", "b", "c"):
        result = await Engine().run(inputs=[seed(name)])
        await store.save(RunRecord.of(result))
        ids.append(result.run_id)
    listed = [summary.run_id for summary in await store.list_runs(limit=3)]
    assert listed == ids[::-1]
    [latest] = await store.list_runs(limit=1)
    assert (latest.stop_reason, latest.fact_count) == (StopReason.CONVERGED, 1)


async def test_engine_saves_a_paused_run_before_returning(store: RunStore) -> None:
    paused = await build_engine(store=store).run()
    assert paused.stop_reason is StopReason.AWAITING_HUMAN
    checkpoint = await store.load_checkpoint(paused.run_id)
    assert checkpoint == paused.checkpoint
    record = await store.load(paused.run_id)
    assert record.pending == paused.pending


async def test_resuming_from_the_store_replaces_the_record(store: RunStore) -> None:
    paused = await build_engine(store=store).run()
    checkpoint = await store.load_checkpoint(paused.run_id)
    assert checkpoint is not None
    resumed = await build_engine(store=store).resume(
        checkpoint, [GateDecision.approve(GATE, by="jane")]
    )
    assert resumed.converged
    assert await store.load_checkpoint(paused.run_id) is None
    record = await store.load(paused.run_id)
    assert record.stop_reason is StopReason.CONVERGED
    assert record.integrity == resumed.integrity


async def test_store_refuses_a_tampered_fact_on_restore(store: RunStore) -> None:
    result = await Engine().run(inputs=[seed("a")])
    data = json.loads(RunRecord.of(result).model_dump_json())
    data["facts"][0]["content"] = "forged"
    await store.save(RunRecord.model_validate_json(json.dumps(data)))
    loaded = await store.load(result.run_id)
    with pytest.raises(StoreError, match=r"facts\[0\]: fact seeds/a: digest"):
        loaded.restore_context()


@pytest.mark.slow
async def test_store_under_eight_concurrent_writer_processes(
    store_target: tuple[str, str],
) -> None:
    kind, target = store_target
    before = {s.run_id for s in await open_store(kind, target).list_runs(limit=100_000)}

    async def writer(worker: int) -> None:
        await anyio.run_process(
            [sys.executable, str(HERE / "store_worker.py"), "write", kind, target, str(worker), "5"]
        )

    async with anyio.create_task_group() as group:
        for worker in range(8):
            group.start_soon(writer, worker)
    after = await open_store(kind, target).list_runs(limit=100_000)
    new = [s for s in after if s.run_id not in before]
    assert len(new) == 40
    assert all(s.stop_reason is StopReason.CONVERGED for s in new)


async def test_a_run_killed_right_after_pausing_resumes_from_the_store_with_nothing_lost(
    store_target: tuple[str, str],
) -> None:
    kind, target = store_target
    process = await anyio.open_process(
        [sys.executable, str(HERE / "store_worker.py"), "crash", kind, target]
    )
    assert process.stdout is not None
    output = b""
    async for chunk in process.stdout:
        output += chunk
    code = await process.wait()
    assert code == -9
    run_id = output.decode().strip()
    store = open_store(kind, target)
    checkpoint = await store.load_checkpoint(run_id)
    assert checkpoint is not None
    decision = [GateDecision.approve(GATE, by="jane")]
    resumed = await build_engine(store=store).resume(checkpoint, decision)

    uninterrupted = build_engine()
    paused = await uninterrupted.run()
    assert paused.checkpoint is not None
    reference = await uninterrupted.resume(paused.checkpoint, decision)
    assert resumed.converged
    assert resumed.integrity == reference.integrity
    assert [f.model_dump() for f in resumed.context.facts()] == [
        f.model_dump() for f in reference.context.facts()
    ]


async def test_sqlite_store_refuses_another_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    await SqliteRunStore(path).list_runs()
    with closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("UPDATE converge_meta SET value = '99'")
    with pytest.raises(StoreError, match="schema version 99"):
        await SqliteRunStore(path).list_runs()


async def test_sqlite_store_uses_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    await SqliteRunStore(path).list_runs()
    with closing(sqlite3.connect(path)) as connection, connection:
        (mode,) = connection.execute("PRAGMA journal_mode").fetchone()
    assert mode == "wal"


async def test_a_failing_store_raises_store_error_keeping_the_result() -> None:
    class Broken:
        async def save(self, record: RunRecord, /, *, expected_version: int | None = None) -> int:
            raise OSError("disk full")

        async def save_progress(self, progress: RunProgress, /, *, expected_version: int) -> int:
            raise NotImplementedError

        async def renew_lease(self, run_id: str, /, *, version: int, lease_seconds: float) -> None:
            raise NotImplementedError

        async def load(self, run_id: str, /) -> RunRecord:
            raise NotImplementedError

        async def list_runs(self, *, limit: int = 50) -> tuple[()]:
            return ()

        async def load_checkpoint(self, run_id: str, /) -> None:
            return None

    with pytest.raises(StoreError, match="could not be saved: OSError: disk full") as caught:
        await Engine(store=Broken(), durability="exit").run(inputs=[seed("a")])
    assert caught.value.result is not None
    assert caught.value.result.context.find(ContextKey.SEEDS, "a") is not None


def test_postgres_store_without_psycopg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(ImportError, match=r"install the 'postgres' extra"):
        PostgresRunStore("postgresql://127.0.0.1:1/x")


V1_FIXTURE = HERE / "fixtures" / "runs-v1.db"
"""A store written by the first release (schema 1): a paused run and a converged one."""
V1_PAUSED = "6c6dafdf267c4f59a40b17511c0b96a1"
V1_CONVERGED = "12464ae26cc848e99c4f57b63ad90781"


async def test_a_schema_1_store_is_upgraded_in_place_with_nothing_lost(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    path.write_bytes(V1_FIXTURE.read_bytes())
    store = SqliteRunStore(path)
    runs = {summary.run_id: summary for summary in await store.list_runs()}
    assert set(runs) == {V1_PAUSED, V1_CONVERGED}
    with closing(sqlite3.connect(path)) as connection, connection:
        (schema,) = connection.execute(
            "SELECT value FROM converge_meta WHERE key = 'schema_version'"
        ).fetchone()
    assert schema == str(SCHEMA_VERSION)
    assert runs[V1_PAUSED].status is RunStatus.PAUSED
    assert runs[V1_CONVERGED].status is RunStatus.FINISHED
    converged = await store.load(V1_CONVERGED)
    assert converged.version == 1
    assert verify(converged.restore_context(), converged.integrity)
    paused = await store.load(V1_PAUSED)
    assert paused.checkpoint is not None
    [gate] = paused.checkpoint.pending
    decision = GateDecision.approve(gate.gate_id, by="ok")
    result = await build_engine().resume(paused.checkpoint, [decision])
    assert result.stop_reason is StopReason.CONVERGED
    assert await store.save(RunRecord.of(result), expected_version=paused.version) == 2


def test_a_record_names_the_converge_version_that_saved_it_under_its_signature() -> None:
    result = Engine().run_sync(inputs=[seed("a")])
    record = RunRecord.of(result, key=b"k")
    assert record.converge_version == converge.__version__
    assert json.loads(record.model_dump_json())["converge_version"] == converge.__version__
    record.verify_signature(b"k")
    forged = record.model_copy(update={"converge_version": "0.0.1"})
    with pytest.raises(StoreError, match="bad signature"):
        forged.verify_signature(b"k")


def test_a_signed_record_saved_before_the_version_field_still_loads_and_verifies() -> None:
    """A 0.1.0 record has no `converge_version` and was signed over the JSON without it."""
    result = Engine().run_sync(inputs=[seed("a")])
    old = RunRecord.of(result).model_dump(mode="json", exclude={"converge_version", "signature"})
    body = canonical_json({k: v for k, v in old.items() if k != "progress"})
    old["signature"] = hmac.new(b"k", body, hashlib.sha256).hexdigest()
    loaded = RunRecord.model_validate_json(json.dumps(old))
    assert loaded.converge_version == ""
    loaded.verify_signature(b"k")
    assert "converge_version" not in json.loads(loaded.model_dump_json())
