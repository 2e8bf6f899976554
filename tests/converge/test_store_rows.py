"""A finished run stored as rows: its journal kept, a signed head in its row.

A run saved after every cycle ends with its head and its last journal entry
(`RowStore.save_final`), not with a copy of everything. Each test tries to break what the
stores promise of such a run: it loads as the record saved whole would (the record's own
signature and Merkle root verify), a row changed, dropped, added or re-chained by hand never
reads as verified, a schema 5 store is upgraded in place, and a store without
`save_final` still gets the whole record. Every test runs on SQLite and, with DATABASE_URL
set, on PostgreSQL.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import LiteralString, cast

import anyio
import pytest
from durable_doubles import formation
from test_durable import cancelled_run, chain_engine, sql
from test_store import open_store, postgres_or_skip, scoped_postgres

from converge import (
    ContextKey,
    Engine,
    GateDecision,
    RecordHead,
    RowStore,
    RunFinal,
    RunRecord,
    RunStatus,
    RunStore,
    SqliteRunStore,
    StopReason,
    StoreError,
    verify,
)
from converge._core._canonical import merkle_root
from converge._core._record import Deferred, saved_facts
from converge._core._store import SCHEMA_VERSION
from converge.stores import CycleDelta, assemble_final
from converge.stores._journal import chain, genesis
from tests.cli_runs import cli
from tests.converge.forgery import fact_digest
from tests.doubles import ProposesOnce
from tests.doubles import fact as proposal

pytestmark = pytest.mark.anyio

KEY = "rows-signing-key"
INPUTS = formation.inputs
HERE = Path(__file__).resolve().parent
V5_FIXTURE = HERE / "fixtures" / "runs-v5.db"
"""A schema 5 store written with the key `test-signing-key`: a converged run, a paused one
(gate `V5_GATE`) and one interrupted after its third cycle, its journal beside it."""
V5_CONVERGED = "f9e79a97cc69412cab9517df6497381b"
V5_PAUSED = "00651a09eff1426389295d1c6fb8de84"
V5_INTERRUPTED = "dfcc01d0f7714fdeb5fa700aa043784b"
V5_GATE = "gate:2:strategies/risky"
V5_KEY = "test-signing-key"

Target = tuple[str, str]


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    kind: str = request.param
    return (kind, str(tmp_path / "runs.db")) if kind == "sqlite" else (kind, postgres_or_skip())


@pytest.fixture
def store(target: Target) -> RunStore:
    return open_store(*target)


async def finished_as_rows(store: RunStore, target: Target) -> tuple[str, RunRecord]:
    """A signed chain run saved after every cycle; its id and the record it saved."""
    result = await chain_engine(store, signing_key=KEY)[0].run(inputs=INPUTS)
    assert result.converged
    assert layout(target, result.run_id) == "rows"
    return result.run_id, RunRecord.of(result, key=KEY.encode())


def layout(target: Target, run_id: str) -> str:
    [(value,)] = sql(target, "SELECT layout FROM converge_runs WHERE run_id = ?", run_id)
    return str(value)


def entries(target: Target, run_id: str) -> list[tuple[int, str]]:
    rows = sql(
        target, "SELECT seq, entry FROM converge_journal WHERE run_id = ? ORDER BY seq", run_id
    )
    return [(int(str(seq)), str(entry)) for seq, entry in rows]


def head_text(target: Target, run_id: str) -> str:
    [(text,)] = sql(target, "SELECT record FROM converge_runs WHERE run_id = ?", run_id)
    return str(text)


def set_entry(target: Target, run_id: str, seq: int, entry: str) -> None:
    sql(
        target,
        "UPDATE converge_journal SET entry = ? WHERE run_id = ? AND seq = ?",
        entry,
        run_id,
        seq,
    )


def set_head(target: Target, run_id: str, text: str) -> None:
    sql(target, "UPDATE converge_runs SET record = ? WHERE run_id = ?", text, run_id)


# -- what is stored ------------------------------------------------------------------------------


async def test_a_finished_run_keeps_its_journal_as_rows_and_loads_as_saved(
    store: RunStore, target: Target
) -> None:
    assert isinstance(store, RowStore)
    run_id, saved = await finished_as_rows(store, target)
    head = RecordHead.model_validate_json(head_text(target, run_id))
    assert head.record.facts == ()
    assert head.record.trace.cycles == ()
    assert head.journal_length == len(entries(target, run_id)) > 1
    assert len(head_text(target, run_id)) < len(saved.model_dump_json()) / 2
    head.verify_signature(KEY.encode())
    loaded = await store.load(run_id)
    assert loaded == saved.model_copy(update={"version": loaded.version})
    assert loaded.model_dump_json() == saved.model_dump_json()
    loaded.verify_signature(KEY.encode())  # the record's own signature, as if saved whole
    assert loaded.restore_context().merkle_root() == saved.integrity.merkle_root
    [summary] = [s for s in await store.list_runs(limit=500) if s.run_id == run_id]
    assert (summary.status, summary.stop_reason) == (RunStatus.FINISHED, StopReason.CONVERGED)
    assert (summary.fact_count, summary.merkle_root) == (
        saved.integrity.fact_count,
        saved.integrity.merkle_root,
    )


async def test_a_payloads_keys_keep_their_order_through_the_rows(
    store: RunStore, target: Target
) -> None:
    # An entry writes each fact's JSON from its leaf's text, whose keys are sorted; a
    # payload's must still come back in the order they were proposed.
    payload = {"zeta": 1, "alpha": {"b": [{"y": 1, "x": 2}], "a": None}, "mid": "ü"}
    proposals = [
        proposal(ContextKey.SEEDS, "s1", payload=payload),
        proposal(ContextKey.SEEDS, "s2", payload=["b", {"d": 1, "c": 2}]),
        proposal(ContextKey.SEEDS, "s3", payload=7.5),
    ]
    engine = Engine(store=store, durability="cycle")
    engine.register_suggestor(
        ProposesOnce("later", [proposal(ContextKey.HYPOTHESES, "h", payload=payload)])
    )
    result = await engine.run(inputs=proposals)
    assert result.converged
    assert layout(target, result.run_id) == "rows"
    saved = RunRecord.of(result)
    loaded = await store.load(result.run_id)
    assert loaded.model_dump_json() == saved.model_dump_json()
    restored = {f.id: f.payload for f in loaded.restore_context().facts()}
    assert json.dumps(restored["s1"]) == json.dumps(payload)
    assert json.dumps(restored["h"]) == json.dumps(payload)
    assert json.dumps(restored["s2"]) == json.dumps(["b", {"d": 1, "c": 2}])


async def test_a_paused_run_is_kept_as_rows_and_so_is_its_resumed_end(
    store: RunStore, target: Target
) -> None:
    engine = chain_engine(store, signing_key=KEY, risky=True)[0]
    paused = await engine.run(inputs=INPUTS)
    assert paused.stop_reason is StopReason.AWAITING_HUMAN
    assert layout(target, paused.run_id) == "rows"
    saved = RunRecord.of(paused, key=KEY.encode())
    loaded = await store.load(paused.run_id)
    assert loaded.model_dump_json() == saved.model_dump_json()  # its checkpoint's signature too
    [gate] = paused.pending
    decision = GateDecision.approve(gate.gate_id, by="jane")
    resumed = await chain_engine(store, signing_key=KEY, risky=True)[0].resume_run(
        paused.run_id, [decision]
    )
    assert resumed.converged
    assert layout(target, paused.run_id) == "rows"
    loaded = await store.load(paused.run_id)
    loaded.verify_signature(KEY.encode())
    assert loaded.trace.decisions == (decision,)
    assert loaded.model_dump_json() == RunRecord.of(resumed, key=KEY.encode()).model_dump_json()


async def test_a_run_saved_only_at_its_end_is_kept_whole(store: RunStore, target: Target) -> None:
    result = await chain_engine(store, durability="exit")[0].run(inputs=INPUTS)
    assert layout(target, result.run_id) == "whole"
    assert entries(target, result.run_id) == []


async def test_a_store_without_save_final_gets_the_whole_record(tmp_path: Path) -> None:
    inner = SqliteRunStore(tmp_path / "runs.db")

    class Plain:  # a store of a user's own: the protocol's methods only
        def __init__(self) -> None:
            self.save = inner.save
            self.save_progress = inner.save_progress
            self.renew_lease = inner.renew_lease
            self.load = inner.load
            self.list_runs = inner.list_runs
            self.load_checkpoint = inner.load_checkpoint

    plain = Plain()
    assert not isinstance(plain, RowStore)
    result = await chain_engine(plain)[0].run(inputs=INPUTS)
    target = ("sqlite", str(tmp_path / "runs.db"))
    assert layout(target, result.run_id) == "whole"
    assert entries(target, result.run_id) == []
    assert (await inner.load(result.run_id)).integrity == result.integrity
    inner.close()


# -- rows changed behind the store's back --------------------------------------------------------


async def test_a_journal_entry_changed_dropped_or_added_is_refused_naming_the_run(
    store: RunStore, target: Target
) -> None:
    run_id, _ = await finished_as_rows(store, target)
    rows = entries(target, run_id)
    seq, entry = rows[1]
    set_entry(target, run_id, seq, entry.replace("step-0", "step-X", 1))
    with pytest.raises(StoreError, match=f"run {run_id}: its journal .* does not match its head"):
        await store.load(run_id)
    set_entry(target, run_id, seq, entry)
    assert (await store.load(run_id)).run_id == run_id  # restored: reads again
    sql(target, "DELETE FROM converge_journal WHERE run_id = ? AND seq = ?", run_id, rows[-1][0])
    with pytest.raises(StoreError, match=f"run {run_id}: its journal"):
        await store.load(run_id)
    sql(
        target,
        "INSERT INTO converge_journal (run_id, seq, entry) VALUES (?, ?, ?)",
        run_id,
        rows[-1][0],
        rows[-1][1],
    )
    sql(
        target,
        "INSERT INTO converge_journal (run_id, seq, entry) VALUES (?, ?, ?)",
        run_id,
        999,
        rows[-1][1],
    )
    with pytest.raises(StoreError, match=f"run {run_id}: its journal"):
        await store.load(run_id)


async def test_rows_rechained_by_hand_never_verify(store: RunStore, target: Target) -> None:
    """An attacker without the key edits a fact, re-chains every entry and writes the new
    digest into the head: the store reads it, and the signatures refuse it."""
    run_id, saved = await finished_as_rows(store, target)
    rows = entries(target, run_id)
    forged: list[str] = []
    digest = genesis(run_id)
    for seq, entry in rows:
        delta = CycleDelta.model_validate_json(entry)
        if any(f.id == "step-1" for f in delta.facts):
            document = json.loads(entry)
            for fact in document["facts"]:
                if fact["id"] == "step-1":
                    fact["content"] = "forged"
            entry = json.dumps(document)
            set_entry(target, run_id, seq, entry)
        forged.append(entry)
        digest = chain(digest, entry)
    head = json.loads(head_text(target, run_id))
    head["journal_digest"] = digest
    set_head(target, run_id, json.dumps(head))
    loaded = await store.load(run_id)  # the rows chain: the store cannot tell without a key
    with pytest.raises(StoreError, match="bad signature"):
        loaded.verify_signature(KEY.encode())
    with pytest.raises(StoreError, match="bad signature"):
        RecordHead.model_validate_json(head_text(target, run_id)).verify_signature(KEY.encode())
    with pytest.raises(StoreError, match=r"digest .* does not match its fields"):
        loaded.restore_context()  # without a key too: the fact no longer matches its leaf
    assert saved.integrity.merkle_root == loaded.integrity.merkle_root


async def test_a_head_edited_by_hand_never_verifies(store: RunStore, target: Target) -> None:
    run_id, _ = await finished_as_rows(store, target)
    head = json.loads(head_text(target, run_id))
    head["record"]["detail"] = "all good"
    head["failures"] = []
    set_head(target, run_id, json.dumps(head))
    loaded = await store.load(run_id)
    assert loaded.detail == "all good"
    with pytest.raises(StoreError, match="stored record has a bad signature"):
        loaded.verify_signature(KEY.encode())
    with pytest.raises(StoreError, match="stored head has a bad signature"):
        RecordHead.model_validate_json(head_text(target, run_id)).verify_signature(KEY.encode())


def _rejections(head: dict[str, object]) -> None:
    head["rejections"] = 3


def _other_run(head: dict[str, object]) -> None:
    record = cast("dict[str, object]", head["record"])
    record["run_id"] = "someone-else"


def _a_cycle_in_the_head(head: dict[str, object]) -> None:
    record = cast("dict[str, dict[str, object]]", head["record"])
    record["trace"]["cycles"] = [{"cycle": 1}]


def _no_digest(head: dict[str, object]) -> None:
    del head["journal_digest"]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (_rejections, "its journal holds .* 0 rejections"),
        (_other_run, "holds the record of run someone-else"),
        (_a_cycle_in_the_head, "stored record is invalid"),
        (_no_digest, "stored record is invalid"),
    ],
)
async def test_a_head_that_does_not_fit_its_rows_is_refused(
    store: RunStore,
    target: Target,
    change: Callable[[dict[str, object]], None],
    said: str,
) -> None:
    run_id, _ = await finished_as_rows(store, target)
    head: dict[str, object] = json.loads(head_text(target, run_id))
    change(head)
    set_head(target, run_id, json.dumps(head))
    with pytest.raises(StoreError, match=said):
        await store.load(run_id)


async def test_assemble_final_is_the_way_back_for_a_store_of_ones_own(
    store: RunStore, target: Target
) -> None:
    run_id, saved = await finished_as_rows(store, target)
    record = assemble_final(
        head_text(target, run_id), [e for _, e in entries(target, run_id)], run_id=run_id, version=7
    )
    assert record.version == 7
    assert record.model_dump_json() == saved.model_dump_json()


# -- a store of schema 5 ------------------------------------------------------------------------


def v5_copy(tmp_path: Path) -> Path:
    path = tmp_path / "runs-v5.db"
    shutil.copyfile(V5_FIXTURE, path)
    return path


async def check_v5_store(store: RunStore, schema: LiteralString, target: Target) -> None:
    """The fixture's runs after the upgrade: each reads, verifies and goes on."""
    key = V5_KEY.encode()
    for run_id in (V5_CONVERGED, V5_PAUSED):
        loaded = await store.load(run_id)
        loaded.verify_signature(key)
        assert loaded.restore_context().merkle_root() == loaded.integrity.merkle_root
        assert layout(target, run_id) == "whole"
    interrupted = await store.load(V5_INTERRUPTED)
    assert interrupted.status is RunStatus.INTERRUPTED
    interrupted.verify_signature(key)
    engine = chain_engine(store, signing_key=V5_KEY)[0]
    result = await engine.resume_run(V5_INTERRUPTED)
    assert result.converged
    assert layout(target, V5_INTERRUPTED) == "rows"
    (await store.load(V5_INTERRUPTED)).verify_signature(key)
    [(version,)] = sql(target, schema)
    assert str(version) == str(SCHEMA_VERSION) == "8"


async def test_a_schema_5_store_is_upgraded_in_place(tmp_path: Path) -> None:
    path = v5_copy(tmp_path)
    store = SqliteRunStore(path)
    await check_v5_store(
        store,
        "SELECT value FROM converge_meta WHERE key = 'schema_version'",
        ("sqlite", str(path)),
    )
    store.close()


async def test_a_postgres_store_of_schema_5_is_upgraded_in_place() -> None:
    """The v5 fixture's tables, copied into a fresh PostgreSQL schema, upgraded and used."""
    import psycopg

    from converge import PostgresRunStore

    with scoped_postgres("v5") as scoped:
        with closing(sqlite3.connect(V5_FIXTURE)) as fixture:
            runs = fixture.execute(
                "SELECT run_id, stop_reason, detail, cycles, fact_count, merkle_root, saved_at, "
                "name, record, checkpoint, version, status, lease_until, failures, formation, "
                "pending, parent_run_id, fork_cycle FROM converge_runs"
            ).fetchall()
            journal = fixture.execute("SELECT run_id, seq, entry FROM converge_journal").fetchall()
            gates = fixture.execute("SELECT * FROM converge_gates").fetchall()
        with psycopg.connect(scoped, autocommit=True) as connection:
            connection.execute(
                "CREATE TABLE converge_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            connection.execute("INSERT INTO converge_meta VALUES ('schema_version', '5')")
            connection.execute(
                "CREATE TABLE converge_runs (run_id TEXT PRIMARY KEY, stop_reason TEXT NOT NULL, "
                "detail TEXT NOT NULL, cycles INTEGER NOT NULL, fact_count INTEGER NOT NULL, "
                "merkle_root TEXT NOT NULL, saved_at TIMESTAMPTZ NOT NULL, name TEXT, "
                "record TEXT NOT NULL, checkpoint TEXT, version INTEGER NOT NULL DEFAULT 1, "
                "status TEXT NOT NULL DEFAULT 'finished', lease_until TEXT, "
                "failures INTEGER NOT NULL DEFAULT 0, formation TEXT, "
                "pending INTEGER NOT NULL DEFAULT 0, parent_run_id TEXT, fork_cycle INTEGER)"
            )
            connection.execute(
                "CREATE TABLE converge_journal (run_id TEXT NOT NULL, seq INTEGER NOT NULL, "
                "entry TEXT NOT NULL, PRIMARY KEY (run_id, seq))"
            )
            connection.execute(
                "CREATE TABLE converge_gates (run_id TEXT NOT NULL, seq INTEGER NOT NULL, "
                "gate_id TEXT NOT NULL, cycle INTEGER NOT NULL, ref TEXT NOT NULL, "
                "suggestor TEXT NOT NULL, summary TEXT NOT NULL, deadline TEXT, "
                "PRIMARY KEY (run_id, seq))"
            )
            with connection.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO converge_runs VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, "
                    "%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    runs,
                )
                cursor.executemany("INSERT INTO converge_journal VALUES (%s, %s, %s)", journal)
                cursor.executemany(
                    "INSERT INTO converge_gates VALUES (%s, %s, %s, %s, %s, %s, %s, %s)", gates
                )
        store = PostgresRunStore(scoped)
        assert [g.gate_id for g in await store.pending_gates()] == [V5_GATE]
        await check_v5_store(
            store,
            "SELECT value FROM converge_meta WHERE key = 'schema_version'",
            ("postgres", scoped),
        )
        store.close()


async def test_an_interrupted_run_of_today_ends_as_rows_with_every_fact(
    store: RunStore, target: Target
) -> None:
    run_id = await cancelled_run(store, signing_key=KEY)
    result = await chain_engine(store, signing_key=KEY)[0].resume_run(run_id)
    assert result.converged
    assert layout(target, run_id) == "rows"
    loaded = await store.load(run_id)
    loaded.verify_signature(KEY.encode())
    assert [f.id for f in loaded.facts] == [f.id for f in result.context.facts()]
    # built from the journal's facts, restarted with every fact: as `of` builds it
    assert loaded.model_dump_json() == RunRecord.of(result, key=KEY.encode()).model_dump_json()


# -- `converge verify`, a page of rows at a time -------------------------------------------------


async def verify_cli(target: Target, *args: str) -> tuple[int, str]:
    """`converge --store TARGET verify ARGS`, from a thread of its own (it runs its own loop)."""
    return await anyio.to_thread.run_sync(lambda: cli("--store", target[1], "verify", *args))


def rechain(target: Target, run_id: str, change: Callable[[dict[str, object]], None]) -> None:
    """Change each stored fact `change` takes, then chain every entry again and write the new
    digest into the head, as an attacker without the key would."""
    digest = genesis(run_id)
    for seq, entry in entries(target, run_id):
        document = json.loads(entry)
        for fact in document["facts"]:
            change(fact)
        entry = json.dumps(document)
        set_entry(target, run_id, seq, entry)
        digest = chain(digest, entry)
    head = json.loads(head_text(target, run_id))
    head["journal_digest"] = digest
    set_head(target, run_id, json.dumps(head))


def _forge_step_1(fact: dict[str, object]) -> None:
    if fact["id"] == "step-1":
        fact["content"] = "forged"


async def test_verify_checks_a_run_stored_as_rows_from_its_head_and_rows(
    store: RunStore, target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, saved = await finished_as_rows(store, target)
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", KEY)
    code, out = await verify_cli(target, run_id)
    assert code == 0, out
    assert out.startswith(
        f"verified: run {run_id}, {saved.integrity.fact_count} facts, clock "
        f"{saved.integrity.clock}, root {saved.integrity.merkle_root}; signature verified"
    )
    code, out = await verify_cli(target, run_id, "--json")
    document = json.loads(out)
    assert (code, document["verified"], document["signature_check"]["state"]) == (
        0,
        True,
        "verified",
    )


async def test_verify_fails_a_run_whose_rows_were_changed(
    store: RunStore, target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, _ = await finished_as_rows(store, target)
    seq, entry = entries(target, run_id)[1]
    set_entry(target, run_id, seq, entry.replace("step-0", "step-X", 1))
    code, out = await verify_cli(target, run_id)
    assert code == 7
    assert out.startswith(f"FAILED: run {run_id}: entry 2: fact hypotheses/step-X: digest")
    set_entry(target, run_id, seq, entry)
    rechain(target, run_id, _forge_step_1)  # chained again: only the fact's own leaf tells
    code, out = await verify_cli(target, run_id)
    assert code == 7
    assert "fact hypotheses/step-1: digest" in out
    assert "does not match its fields" in out


async def test_verify_fails_forged_rows_and_root_when_a_key_is_set(
    store: RunStore, target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Facts, leaves, root and chain all forged consistently: only the head's signature can
    tell, and it does; without a key the run is said to be unauthenticated, never signed."""
    run_id, _ = await finished_as_rows(store, target)

    def forge(fact: dict[str, object]) -> None:
        if fact["id"] == "step-1":
            fact["content"] = "forged"
            fact["digest"] = fact_digest(fact)

    rechain(target, run_id, forge)
    forged = await store.load(run_id)
    head = json.loads(head_text(target, run_id))
    root = merkle_root(bytes.fromhex(fact.digest) for fact in forged.facts)
    head["record"]["integrity"]["merkle_root"] = root
    head["record"]["trace"]["final_root"] = root
    set_head(target, run_id, json.dumps(head))
    code, out = await verify_cli(target, run_id)
    assert code == 0  # without a key nothing is authenticated, and it says so
    assert "not authenticated (no signing key is set)" in out
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", KEY)
    code, out = await verify_cli(target, run_id)
    assert code == 7
    assert out.startswith(f"FAILED: run {run_id}: the stored head has a bad signature")


# -- the record a run saved ------------------------------------------------------------------------


async def test_the_result_holds_the_record_its_engine_saved(
    store: RunStore, target: Target
) -> None:
    result = await chain_engine(store, signing_key=KEY)[0].run(inputs=INPUTS)
    saved = RunRecord.saved(result)
    assert saved is not None
    assert saved.model_dump_json() == RunRecord.of(result, key=KEY.encode()).model_dump_json()
    assert (await store.load(result.run_id)).model_dump_json() == saved.model_dump_json()
    alone = await chain_engine(None, signing_key=KEY)[0].run(inputs=INPUTS)
    assert RunRecord.saved(alone) is None  # nothing was saved


async def test_an_unsigned_run_saved_as_rows_builds_its_record_on_first_use(
    store: RunStore, target: Target
) -> None:
    result = await chain_engine(store)[0].run(inputs=INPUTS)
    deferred = result._saved  # pyright: ignore[reportPrivateUsage]
    assert isinstance(deferred, Deferred)  # no record of the facts was made as the run ended
    shown = saved_facts(result)
    assert shown is not None
    bare, facts = shown
    assert bare.facts == ()
    assert facts == result.context.facts()
    saved = RunRecord.saved(result)
    assert saved is not None
    assert saved is RunRecord.saved(result)
    assert saved.model_dump_json() == RunRecord.of(result).model_dump_json()
    assert saved.model_copy(update={"facts": ()}) == bare
    assert (await store.load(result.run_id)).model_dump_json() == saved.model_dump_json()


async def test_a_fact_changed_after_the_run_shows_in_the_record_built_later(
    store: RunStore, target: Target
) -> None:
    result = await chain_engine(store)[0].run(inputs=INPUTS)
    assert result.stop_reason is StopReason.CONVERGED
    fact = result.context.facts()[-1]
    dict[str, object].__setitem__(vars(fact), "content", "Changed after the run.")
    saved = RunRecord.saved(result)
    assert saved is not None
    assert (saved.stop_reason, saved.signature) == (StopReason.INVARIANT_VIOLATED, None)
    assert fact.ref in saved.detail
    loaded = await store.load(result.run_id)  # the store holds what was promoted
    assert loaded.stop_reason is StopReason.CONVERGED
    assert verify(loaded.restore_context(), loaded.integrity)


# -- an end that fails half-way --------------------------------------------------------------------


async def test_an_end_that_fails_after_its_head_is_written_leaves_the_run_as_it_was(
    store: RunStore, target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fails between the head and the last entry: the transaction rolls back, the
    run stays as its last cycle saved it, and it can be continued to its end as rows."""
    from converge.stores import _db, postgres, sqlite

    real = _db.write_final

    class HalfDisk:
        def __init__(self, db: _db.Db) -> None:
            self.db = db

        def one(
            self, statement: LiteralString, values: tuple[object, ...], /
        ) -> tuple[object, ...] | None:
            return self.db.one(statement, values)

        def all(
            self, statement: LiteralString, values: tuple[object, ...], /
        ) -> list[tuple[object, ...]]:
            return self.db.all(statement, values)

        def run(self, statement: LiteralString, values: tuple[object, ...], /) -> None:
            if statement.startswith("INSERT INTO converge_journal"):
                raise OSError("disk full")
            self.db.run(statement, values)

    def failing(db: _db.Db, final: RunFinal, saved_at: object, expected: int) -> int:
        return real(HalfDisk(db), final, saved_at, expected)

    for module in (sqlite, postgres):
        monkeypatch.setattr(module, "write_final", failing)
    engine = chain_engine(store, signing_key=KEY, lease=0.5)[0]
    with pytest.raises(StoreError, match="could not be saved: OSError: disk full") as raised:
        await engine.run(inputs=INPUTS)
    result = raised.value.result
    assert result is not None
    assert result.converged
    run_id = result.run_id
    [(text,)] = sql(target, "SELECT record FROM converge_runs WHERE run_id = ?", run_id)
    assert "journal_digest" in str(text)
    assert '"record"' not in str(text)
    kept = await store.load(run_id)
    assert kept.status in (RunStatus.RUNNING, RunStatus.INTERRUPTED)
    assert {f.id for f in kept.facts} <= {f.id for f in result.context.facts()}
    monkeypatch.undo()
    await anyio.sleep(0.6)  # its lease runs out: the run is lost, and may be continued
    again = await chain_engine(store, signing_key=KEY)[0].resume_run(run_id)
    assert again.converged
    assert layout(target, run_id) == "rows"
    loaded = await store.load(run_id)
    loaded.verify_signature(KEY.encode())
    assert [f.id for f in loaded.facts] == [f.id for f in result.context.facts()]
    # built from the journal's facts, restarted with every fact: as `of` builds it
    assert loaded.model_dump_json() == RunRecord.of(again, key=KEY.encode()).model_dump_json()
