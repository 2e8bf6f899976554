"""Each journal entry's counts, stored beside it (schema 8), and the stores that predate them.

A run saved after every cycle writes, beside each entry, the last cycle it saved and how many
facts of each key it adds (`EntryCounts`), in the entry's own transaction; `entry_counts`
reads them all in one query. Each test tries to break that: the counts of a run of today add
up to its head's, a schema 7 store (`fixtures/runs-v7.db`, written by converge before the
counts) is upgraded in place on SQLite and PostgreSQL with its rows kept and their counts
NULL, and a converge that reads schema 7 refuses a schema 8 store and changes nothing.
Every test runs on SQLite and, with DATABASE_URL set, on PostgreSQL.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Generator
from contextlib import closing
from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from test_durable import sql
from test_store import open_store, scoped_postgres
from test_store_rows import Target, target

from converge import (
    EntryCounts,
    PostgresRunStore,
    RecordHead,
    RowStore,
    SqliteRunStore,
    StoreError,
)
from converge._core._store import SCHEMA_VERSION
from converge.stores import _sql, sqlite
from tests.cli_runs import cli, run_id_of

pytestmark = pytest.mark.anyio

HERE = Path(__file__).resolve().parent
FORMATION = str(HERE / "paging_formation.py")
V7_FIXTURE = HERE / "fixtures" / "runs-v7.db"
"""A schema 7 store written by converge before entries had counts, with the key
`test-signing-key`: one run of `paging_formation.py` stored as rows (`V7_RUN`, 9 entries)."""
V7_RUN = "286022f8e13d4193a1b5216010140832"
V7_KEY = "test-signing-key"
SCHEMA = "SELECT value FROM converge_meta WHERE key = 'schema_version'"

__all__ = ["FORMATION", "V7_RUN", "paging_run", "target", "v7_target"]


@pytest.fixture(autouse=True)
def _keyed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", V7_KEY)


def paging_run(target: Target) -> str:
    """A run of `paging_formation.py`, saved after every cycle with `converge run`."""
    code, out = cli("--store", target[1], "run", FORMATION)
    assert code == 0, out
    return run_id_of(out)


def counted(rows: list[tuple[int, str | None]]) -> list[EntryCounts]:
    parsed: list[EntryCounts] = []
    for _, text in rows:
        assert text is not None
        parsed.append(EntryCounts.model_validate_json(text))
    return parsed


async def head_of(store: RowStore, run_id: str) -> RecordHead:
    head = await store.load_head(run_id)
    assert head is not None
    return head


async def test_each_entry_of_a_run_of_today_says_what_it_holds(target: Target) -> None:
    run_id = await anyio.to_thread.run_sync(paging_run, target)
    store = open_store(*target)
    assert isinstance(store, RowStore)
    head = await head_of(store, run_id)
    rows = await store.entry_counts(run_id)
    assert [seq for seq, _ in rows] == list(range(1, head.journal_length + 1))
    counts = counted(rows)
    record = await store.load(run_id)
    for (seq, entry), said in zip(await store.journal(run_id, limit=100), counts, strict=True):
        held: dict[str, int] = {}
        for fact in CycleDeltaFacts.of(entry):
            held[fact] = held.get(fact, 0) + 1
        assert {key.value: n for key, n in said.keys} == held, seq
    totals: dict[str, int] = {}
    for said in counts:
        for key, n in said.keys:
            totals[key.value] = totals.get(key.value, 0) + n
    assert totals == {key.value: n for key, n in head.keys}
    cycles = [said.cycle for said in counts]
    assert cycles == sorted(cycles)
    assert cycles[-1] == record.cycles
    for said in counts:  # each entry's facts were promoted by its cycle
        assert said.cycle >= 0
    assert await store.entry_counts("no-such-run") == []


class CycleDeltaFacts:
    """The keys of an entry's facts, one per fact, as the entry holds them."""

    @staticmethod
    def of(entry: str) -> list[str]:
        from converge.stores import CycleDelta

        return [fact.key.value for fact in CycleDelta.model_validate_json(entry).facts]


@pytest.fixture(params=["sqlite", "postgres"])
def v7_target(request: pytest.FixtureRequest, tmp_path: Path) -> Generator[Target]:
    """The v7 fixture's file, or its rows in a PostgreSQL schema of version 7 (today's tables
    less the journal's `counts`), neither yet opened by this converge."""
    if request.param == "sqlite":
        path = tmp_path / "runs-v7.db"
        shutil.copyfile(V7_FIXTURE, path)
        yield ("sqlite", str(path))
        return
    with scoped_postgres("v7") as scoped:
        made = PostgresRunStore(scoped)
        assert anyio.run(lambda: made.list_runs()) == ()
        made.close()
        target = ("postgres", scoped)
        sql(target, "ALTER TABLE converge_journal DROP COLUMN counts")
        sql(target, "UPDATE converge_meta SET value = '7' WHERE key = 'schema_version'")
        with closing(sqlite3.connect(V7_FIXTURE)) as fixture:
            for table in ("converge_runs", "converge_journal", "converge_gates"):
                for row in fixture.execute(f"SELECT * FROM {table}").fetchall():
                    marks = ", ".join("?" * len(row))
                    sql(target, f"INSERT INTO {table} VALUES ({marks})", *row)  # pyright: ignore[reportArgumentType]
        yield target


async def test_a_schema_7_store_is_upgraded_in_place_its_rows_kept_uncounted(
    v7_target: Target,
) -> None:
    target = v7_target
    before = sql(target, "SELECT run_id, seq, entry FROM converge_journal ORDER BY seq")
    assert len(before) == 9
    store = open_store(*target)
    assert isinstance(store, SqliteRunStore | PostgresRunStore)
    record = await store.load(V7_RUN)  # opened for writing: upgraded
    record.verify_signature(V7_KEY.encode())
    [(version,)] = sql(target, SCHEMA)
    assert str(version) == str(SCHEMA_VERSION) == "8"
    assert sql(target, "SELECT run_id, seq, entry FROM converge_journal ORDER BY seq") == before
    assert await store.entry_counts(V7_RUN) == [(seq, None) for seq in range(1, 10)]
    (await head_of(store, V7_RUN)).verify_signature(V7_KEY.encode())
    # a run of today in the upgraded store has its counts
    new = await anyio.to_thread.run_sync(paging_run, target)
    assert all(text is not None for _, text in await store.entry_counts(new))
    store.close()


def test_a_store_older_than_the_journal_gets_the_counts_column_once(tmp_path: Path) -> None:
    """A schema 1 store had no journal: it is made with today's columns, and the upgrade
    through 7 does not add `counts` twice."""
    path = tmp_path / "runs-v1.db"
    shutil.copyfile(HERE / "fixtures" / "runs-v1.db", path)
    store = SqliteRunStore(path)
    assert anyio.run(lambda: store.list_runs())
    store.close()
    target = ("sqlite", str(path))
    assert [str(v) for (v,) in sql(target, SCHEMA)] == [str(SCHEMA_VERSION)]
    assert paging_run(target)


def test_a_converge_that_reads_schema_7_refuses_a_schema_8_store_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "runs.db"
    run_id = paging_run(("sqlite", str(path)))
    target = ("sqlite", str(path))
    rows = sql(target, "SELECT * FROM converge_journal ORDER BY seq")
    monkeypatch.setattr(sqlite, "SCHEMA_VERSION", 7)  # as converge before schema 8 reads
    monkeypatch.setattr(_sql, "SCHEMA_VERSION", 7)
    monkeypatch.setattr(sqlite, "UPGRADES", {k: v for k, v in _sql.UPGRADES.items() if k < 7})
    for read_only in (False, True):
        store = SqliteRunStore(path, read_only=read_only)
        with pytest.raises(StoreError, match="written by a newer converge") as refused:
            anyio.run(lambda: store.load(run_id))  # noqa: B023 - run at once
        assert "schema version 8; this converge reads version 7" in str(refused.value)
        store.close()
    assert sql(target, "SELECT * FROM converge_journal ORDER BY seq") == rows
    assert [str(v) for (v,) in sql(target, SCHEMA)] == ["8"]
