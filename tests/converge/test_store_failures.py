"""The failure count of a stored run's summary (`RunSummary.failures`), and its upgrade.

- a run that converged with a failed call lists with `failures == 1`, a clean one with 0,
  in SQLite and PostgreSQL;
- a store of schema 3 (no `failures` column) is upgraded in place: the column is added and
  the runs stored before are recounted from their records, nothing else changed.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import LiteralString

import pytest
from test_store import postgres_or_skip

from converge import (
    AgentEffect,
    Context,
    ContextKey,
    Engine,
    PostgresRunStore,
    ProposedFact,
    RunStore,
    SqliteRunStore,
)
from converge._core._store import SCHEMA_VERSION


class Failing:
    """Fails every call."""

    name = "failing"
    dependencies = (ContextKey.SEEDS,)

    def accepts(self, ctx: Context, /) -> bool:
        return True

    async def execute(self, ctx: Context, /) -> AgentEffect:
        raise RuntimeError("model unreachable")


SEED = ProposedFact(key=ContextKey.SEEDS, id="s", content="seed", provenance="test")


@pytest.fixture
def anyio_backend() -> str:
    """Store round trips, not the event loop, are under test: asyncio only."""
    return "asyncio"


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """`(kind, where)`: a SQLite file, or a fresh PostgreSQL database dropped afterwards."""
    if request.param == "sqlite":
        yield "sqlite", str(tmp_path / "runs.db")
        return
    import psycopg
    import psycopg.sql

    server = postgres_or_skip()
    name = f"failures_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    try:
        yield "postgres", server.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(
                psycopg.sql.SQL("DROP DATABASE {} WITH (FORCE)").format(
                    psycopg.sql.Identifier(name)
                )
            )


def opened(kind: str, where: str) -> SqliteRunStore | PostgresRunStore:
    return SqliteRunStore(where) if kind == "sqlite" else PostgresRunStore(where)


def sql(kind: str, where: str, *statements: LiteralString) -> None:
    """Statements run behind the store's back, as an older release's tables would be."""
    if kind == "sqlite":
        with closing(sqlite3.connect(where)) as connection, connection:
            for statement in statements:
                connection.execute(statement)
        return
    import psycopg

    with psycopg.connect(where, autocommit=True) as connection:
        for statement in statements:
            connection.execute(statement)


async def two_runs(store: RunStore) -> tuple[str, str]:
    """A run that converged with a failed call, and a clean one; their ids. Both are saved
    whole, as every schema before 6 kept a finished run."""
    engine = Engine(store=store, durability="exit")
    engine.register_suggestor(Failing())
    failed = await engine.run(inputs=[SEED])
    clean = await Engine(store=store, durability="exit").run(inputs=[SEED])
    assert failed.converged
    assert len(failed.failures) == 1
    assert clean.failures == ()
    return failed.run_id, clean.run_id


@pytest.mark.anyio
async def test_run_summary_counts_the_failures_of_a_converged_run(
    target: tuple[str, str],
) -> None:
    store = opened(*target)
    failed, clean = await two_runs(store)
    counts = {run.run_id: run.failures for run in await store.list_runs()}
    store.close()
    assert counts == {failed: 1, clean: 0}


@pytest.mark.anyio
async def test_a_schema_3_store_is_upgraded_with_its_runs_failures_recounted(
    target: tuple[str, str],
) -> None:
    kind, where = target
    store = opened(kind, where)
    failed, clean = await two_runs(store)
    before = {run.run_id: run for run in await store.list_runs()}
    store.close()
    sql(  # the tables as schema 3 left them
        kind,
        where,
        "DROP INDEX converge_runs_pending",
        "DROP INDEX converge_runs_parent",
        "DROP TABLE converge_gates",
        "ALTER TABLE converge_runs DROP COLUMN failures",
        "ALTER TABLE converge_runs DROP COLUMN formation",
        "ALTER TABLE converge_runs DROP COLUMN pending",
        "ALTER TABLE converge_runs DROP COLUMN parent_run_id",
        "ALTER TABLE converge_runs DROP COLUMN fork_cycle",
        "ALTER TABLE converge_runs DROP COLUMN layout",
        "UPDATE converge_meta SET value = '3' WHERE key = 'schema_version'",
    )

    store = opened(kind, where)
    after = {run.run_id: run for run in await store.list_runs()}
    record = await store.load(failed)
    store.close()

    assert {run_id: run.failures for run_id, run in after.items()} == {failed: 1, clean: 0}
    assert {run_id: run.model_copy(update={"failures": 0}) for run_id, run in after.items()} == {
        run_id: run.model_copy(update={"failures": 0}) for run_id, run in before.items()
    }
    assert record.failure_count == 1
    if kind == "sqlite":
        with closing(sqlite3.connect(where)) as connection:
            (schema,) = connection.execute(
                "SELECT value FROM converge_meta WHERE key = 'schema_version'"
            ).fetchone()
        assert schema == str(SCHEMA_VERSION) == "8"
