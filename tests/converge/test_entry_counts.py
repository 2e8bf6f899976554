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
from test_durable import cancelled_run, chain_engine, sql
from test_store import copy_rows, open_store, scoped_postgres
from test_store_rows import Target, target

from converge import (
    EntryCounts,
    FactRecord,
    PostgresRunStore,
    RecordHead,
    RowStore,
    RunRecord,
    SqliteRunStore,
    StoreError,
)
from converge._core._store import SCHEMA_VERSION
from converge.stores import _rows_read as rows_read
from converge.stores import _sql, _sqlite_schema
from converge.stores._journal import chain, counts_genesis
from converge.stores._rows_check import rows_problem
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
        copy_rows(V7_FIXTURE, scoped)
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
    monkeypatch.setattr(_sqlite_schema, "SCHEMA_VERSION", 7)  # as converge before schema 8 reads
    monkeypatch.setattr(_sql, "SCHEMA_VERSION", 7)
    monkeypatch.setattr(
        _sqlite_schema, "UPGRADES", {k: v for k, v in _sql.UPGRADES.items() if k < 7}
    )
    for read_only in (False, True):
        store = SqliteRunStore(path, read_only=read_only)
        with pytest.raises(StoreError, match="written by a newer converge") as refused:
            anyio.run(lambda: store.load(run_id))  # noqa: B023 - run at once
        assert "schema version 8; this converge reads version 7" in str(refused.value)
        store.close()
    assert sql(target, "SELECT * FROM converge_journal ORDER BY seq") == rows
    assert [str(v) for (v,) in sql(target, SCHEMA)] == ["8"]


# -- a fact page found by the counts ----------------------------------------------------------


def facts_of(record: RunRecord, key: str) -> list[FactRecord]:
    return [fact for fact in record.facts if fact.key.value == key]


class Reads:
    """The entries `journal` returned, call by call."""

    def __init__(self, store: RowStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[list[int]] = []
        original = store.journal

        async def journal(run: str, /, *, after: int = 0, limit: int = 16) -> list[tuple[int, str]]:
            page = await original(run, after=after, limit=limit)
            self.calls.append([seq for seq, _ in page])
            return page

        monkeypatch.setattr(store, "journal", journal)


async def a_paged_run(target: Target) -> tuple[RowStore, str, RecordHead, RunRecord]:
    run_id = await anyio.to_thread.run_sync(paging_run, target)
    store = open_store(*target)
    assert isinstance(store, RowStore)
    head = await head_of(store, run_id)
    assert head.counts_digest is not None
    return store, run_id, head, await store.load(run_id)


async def every_page_agrees(store: RowStore, head: RecordHead, record: RunRecord) -> None:
    for key in ("seeds", "hypotheses", "strategies"):
        whole = facts_of(record, key)
        for size in (1, 3, 7, 10, 100):
            for start in range(0, len(whole) + 1, size):
                page = await rows_read.key_facts(store, head, key, start, size)
                assert list(page) == whole[start : start + size], (key, size, start)


async def test_every_page_of_every_key_is_the_whole_records(target: Target) -> None:
    store, _, head, record = await a_paged_run(target)
    assert [k.value for k, _ in head.keys] == ["seeds", "hypotheses", "strategies"]
    await every_page_agrees(store, head, record)


async def test_a_middle_page_reads_only_the_entries_that_hold_it(
    target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _, head, record = await a_paged_run(target)
    reads = Reads(store, monkeypatch)
    # hypotheses 14 to 20 are the third cycle's: entry 5 (entries 1 and 2: nothing, the seed)
    page = await rows_read.key_facts(store, head, "hypotheses", 14, 7)
    assert list(page) == facts_of(record, "hypotheses")[14:21]
    assert reads.calls == [[5]]
    reads.calls.clear()
    page = await rows_read.key_facts(store, head, "hypotheses", 12, 4)  # across two entries
    assert list(page) == facts_of(record, "hypotheses")[12:16]
    assert reads.calls == [[4, 5]]
    reads.calls.clear()
    page = await rows_read.key_facts(store, head, "strategies", 3, 3)  # cycle 4's, entry 5
    assert list(page) == facts_of(record, "strategies")[3:6]
    assert reads.calls == [[5]]


async def test_rows_without_counts_are_paged_as_before(
    target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, run_id, head, record = await a_paged_run(target)
    sql(target, "UPDATE converge_journal SET counts = NULL WHERE run_id = ? AND seq = 4", run_id)
    assert await rows_read.located(store, head, "hypotheses") is None
    await every_page_agrees(store, head, record)
    reads = Reads(store, monkeypatch)
    await rows_read.key_facts(store, head, "hypotheses", 14, 7)
    assert len(reads.calls) > 1  # one entry at a time, as before the counts


async def test_the_pages_of_a_schema_7_run_read_as_before_the_upgrade(v7_target: Target) -> None:
    store = open_store(*v7_target)
    assert isinstance(store, SqliteRunStore | PostgresRunStore)
    head = await head_of(store, V7_RUN)
    assert head.counts_digest is None
    await every_page_agrees(store, head, await store.load(V7_RUN))
    store.close()


def set_counts(target: Target, run_id: str, seq: int, text: str) -> None:
    sql(
        target,
        "UPDATE converge_journal SET counts = ? WHERE run_id = ? AND seq = ?",
        text,
        run_id,
        seq,
    )


def counts_of(target: Target, run_id: str, seq: int) -> str:
    [(text,)] = sql(
        target, "SELECT counts FROM converge_journal WHERE run_id = ? AND seq = ?", run_id, seq
    )
    return str(text)


async def test_counts_changed_by_hand_never_page_wrong_facts(target: Target) -> None:
    store, run_id, head, _ = await a_paged_run(target)
    moved = [
        ("hypotheses", 5),  # entry 4 says 5, entry 5 says 9: the total and the others hold
        ("hypotheses", 9),
    ]
    original = {seq: counts_of(target, run_id, seq) for seq in (4, 5)}
    for seq, (key, n) in zip((4, 5), moved, strict=True):
        counts = EntryCounts.model_validate_json(original[seq])
        edited = tuple((k, n if k.value == key else m) for k, m in counts.keys)
        set_counts(
            target, run_id, seq, counts.model_copy(update={"keys": edited}).model_dump_json()
        )
    with pytest.raises(StoreError, match=f"run {run_id}: the counts beside its journal"):
        await rows_read.key_facts(store, head, "hypotheses", 14, 7)
    # the head rewritten to commit to the edited counts: the entry read is found wrong
    texts = [str(text) for _, text in await store.entry_counts(run_id)]
    digest = counts_genesis(run_id)
    for text in texts:
        digest = chain(digest, text)
    forged = head.model_copy(update={"counts_digest": digest})
    with pytest.raises(
        StoreError,
        match=f"run {run_id}: journal entry 5 holds 7 facts of hypotheses; the counts beside "
        "it say 9",
    ):
        await rows_read.key_facts(store, forged, "hypotheses", 14, 7)
    set_counts(target, run_id, 6, "{not json")
    with pytest.raises(
        StoreError, match=f"run {run_id}: the counts of journal entry 6 are invalid"
    ):
        await rows_read.key_facts(store, head, "hypotheses", 0, 7)


async def test_a_deleted_entry_is_named(target: Target) -> None:
    store, run_id, head, _ = await a_paged_run(target)
    sql(target, "DELETE FROM converge_journal WHERE run_id = ? AND seq = 5", run_id)
    with pytest.raises(StoreError, match=f"run {run_id}: journal entry 5 is missing"):
        await rows_read.key_facts(store, head, "hypotheses", 0, 7)
    last = head.journal_length
    sql(target, "DELETE FROM converge_journal WHERE run_id = ? AND seq = ?", run_id, last)
    with pytest.raises(StoreError, match=f"run {run_id}: journal entry 5 is missing"):
        await rows_read.key_facts(store, head, "hypotheses", 0, 7)


# -- the facts at the end of a cycle ----------------------------------------------------------


async def facts_at_each_cycle_agree(store: RowStore, run_id: str) -> None:
    head = await head_of(store, run_id)
    record = await store.load(run_id)
    for cycle in range(record.cycles + 1):
        for shown in (1, 4, 500):
            found = await rows_read.facts_at(store, head, cycle, shown)
            kept = [fact for fact in record.facts if fact.promotion.cycle <= cycle]
            assert found == (len(kept), tuple(kept[:shown])), (cycle, shown)


async def test_the_facts_at_each_cycle_are_the_whole_records(target: Target) -> None:
    store, run_id, _, _ = await a_paged_run(target)
    await facts_at_each_cycle_agree(store, run_id)


async def test_the_facts_at_each_cycle_of_a_continued_run_are_the_whole_records(
    target: Target,
) -> None:
    """The continuation's first entry holds every fact of the cycles before it."""
    store = open_store(*target)
    assert isinstance(store, RowStore)
    run_id = await cancelled_run(store, signing_key=V7_KEY)
    assert (await chain_engine(store, signing_key=V7_KEY)[0].resume_run(run_id)).converged
    first = EntryCounts.model_validate_json(str((await store.entry_counts(run_id))[0][1]))
    assert first.cycle >= 3
    assert sum(n for _, n in first.keys) > 1
    await facts_at_each_cycle_agree(store, run_id)


def test_sqlite_reads_the_counts_from_an_index_not_the_entries(tmp_path: Path) -> None:
    """Its rows keep `counts` after the entry: read from the table, every entry's pages
    would be walked (a page of a large run then costs what the run does)."""
    path = tmp_path / "runs-v7.db"
    shutil.copyfile(V7_FIXTURE, path)
    store = SqliteRunStore(path)
    assert anyio.run(lambda: store.entry_counts(V7_RUN))  # upgraded: the index made
    store.close()
    with closing(sqlite3.connect(path)) as connection:
        plan = connection.execute(f"EXPLAIN QUERY PLAN {_sql.COUNTS_SELECT}", ("r",)).fetchall()
    assert "COVERING INDEX converge_journal_counts" in " ".join(str(row[-1]) for row in plan)


async def test_verify_fails_counts_that_are_not_what_the_entries_hold(target: Target) -> None:
    store, run_id, head, _ = await a_paged_run(target)
    assert await rows_problem(store, head) is None
    counts = EntryCounts.model_validate_json(counts_of(target, run_id, 4))
    edited = tuple((k, n - 2 if k.value == "hypotheses" else n) for k, n in counts.keys)
    set_counts(target, run_id, 4, counts.model_copy(update={"keys": edited}).model_dump_json())
    said = await rows_problem(store, head)
    assert said is not None
    assert said.startswith(f"run {run_id}: the counts beside its journal entries are not")
    digest = counts_genesis(run_id)
    for _, text in await store.entry_counts(run_id):
        digest = chain(digest, str(text))
    forged = head.model_copy(update={"counts_digest": digest})  # as if the head said so too
    assert await rows_problem(store, forged) == (
        f"run {run_id}: the counts beside journal entry 4 are not what it holds"
    )
    code, out = await anyio.to_thread.run_sync(lambda: cli("--store", target[1], "verify", run_id))
    assert code != 0
    assert "the counts beside its journal entries are not" in out


def test_a_paused_run_resumed_counts_its_restarted_journal(target: Target) -> None:
    """A resumed run's journal starts again, holding the approved fact at its gate's cycle."""
    formation = str(HERE / "cited_formation.py")
    code, out = cli("--store", target[1], "run", formation)
    assert code == 6, out
    run_id = run_id_of(out)
    approve = ("--approve", "gate:3:strategies/bet", "--by", "jane")
    assert cli("--store", target[1], "resume", run_id, *approve)[0] == 0

    async def check() -> None:
        store = open_store(*target)
        assert isinstance(store, RowStore)
        head = await head_of(store, run_id)
        assert head.counts_digest is not None
        assert await rows_problem(store, head) is None
        await facts_at_each_cycle_agree(store, run_id)
        record = await store.load(run_id)
        for key, n in head.keys:
            whole = facts_of(record, key.value)
            for start in range(0, n, 3):
                page = await rows_read.key_facts(store, head, key.value, start, 3)
                assert list(page) == whole[start : start + 3]

    anyio.run(check)
