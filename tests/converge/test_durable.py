"""Durable execution in process: per-cycle saves, cancellation, leases, continuations, tampering.

Every store test runs on SQLite and, with DATABASE_URL set, on PostgreSQL, under asyncio
and trio. Hooks inside suggestors only record what they see (the engine isolates a failing
suggestor); the assertions come after the run.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Awaitable, Callable, Generator
from contextlib import ExitStack, closing, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import LiteralString

import anyio
import pytest
from durable_doubles import (
    Arrivals,
    Chain,
    EventLog,
    FailingProgress,
    Hook,
    Risky,
    Slow,
    formation,
)
from hitl_formation import SIGNING_KEY, build_engine
from test_store import V1_CONVERGED, V1_FIXTURE, V1_PAUSED, open_store, postgres_or_skip

from converge import (
    ConfigurationError,
    Continuation,
    ConvergeResult,
    Durability,
    Engine,
    EngineEvent,
    GateDecision,
    HitlPolicy,
    InvalidCheckpointError,
    InvalidResumeError,
    PostgresRunStore,
    ProgressHead,
    RecordHead,
    RunNotFoundError,
    RunRecord,
    RunStatus,
    RunStore,
    SqliteRunStore,
    StaleRecordError,
    StopReason,
    StoreError,
    render_report,
    verify,
)
from converge._core._store import SCHEMA_VERSION
from converge._review import STALE
from converge.stores import CycleDelta
from converge.stores._journal import chain, genesis
from tests.cli_runs import cli
from tests.doubles import seed

DOUBLES = Path(__file__).resolve().parent / "durable_doubles.py"
"""The formation file `converge resume` continues a chain run with."""
StoreTarget = tuple[str, str]
"""`("sqlite", path)` or `("postgres", dsn)`."""

STEPS = 6
"""Cycles of a chain run before its fixed point (one more cycle finds nothing to do)."""
INPUTS = formation.inputs
KEY = "durable-signing-key"
GATE = "gate:2:strategies/costly"


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> StoreTarget:
    kind: str = request.param
    return (kind, str(tmp_path / "runs.db")) if kind == "sqlite" else (kind, postgres_or_skip())


@pytest.fixture
def store(target: StoreTarget) -> RunStore:
    return open_store(*target)


# -- helpers --------------------------------------------------------------------------------------


def sql(target: StoreTarget, statement: LiteralString, *values: object) -> list[tuple[object, ...]]:
    """Run one statement on the store's database behind its back, as an attacker (or a
    dead process) would; the rows it returns. `?` placeholders."""
    kind, where = target
    if kind == "sqlite":
        with closing(sqlite3.connect(where)) as connection, connection:
            return [tuple(row) for row in connection.execute(statement, values).fetchall()]
    import psycopg

    with psycopg.connect(where, autocommit=True) as connection:
        cursor = connection.execute(statement.replace("?", "%s"), values)
        return [tuple(row) for row in cursor.fetchall()] if cursor.description else []


def journal(target: StoreTarget, run_id: str) -> list[str]:
    """The run's journal entries, in order."""
    rows = sql(target, "SELECT entry FROM converge_journal WHERE run_id = ? ORDER BY seq", run_id)
    return [str(entry) for (entry,) in rows]


def head_of(target: StoreTarget, run_id: str) -> ProgressHead:
    """The progress head stored in the run's row."""
    [(text,)] = sql(target, "SELECT record FROM converge_runs WHERE run_id = ?", run_id)
    return ProgressHead.model_validate_json(str(text))


def chain_engine(
    store: RunStore | None,
    *,
    hook: Hook | None = None,
    steps: int = STEPS,
    durability: Durability = "cycle",
    lease: float = 30.0,
    signing_key: str | None = None,
    log: EventLog | None = None,
    risky: bool = False,
) -> tuple[Engine, Chain]:
    """An engine running one `Chain`, and the chain (it counts its calls); with `risky`, also
    `Risky` behind a human gate."""
    engine = Engine(
        store=store,
        durability=durability,
        lease=lease,
        signing_key=signing_key,
        observers=() if log is None else (log,),
        hitl=HitlPolicy(confidence_below=0.5) if risky else None,
    )
    suggestor = Chain(steps=steps, hook=hook)
    engine.register_suggestor(suggestor)
    if risky:
        engine.register_suggestor(Risky())
    return engine, suggestor


async def reference() -> ConvergeResult:
    """The chain run without a store and without interruption."""
    result = await chain_engine(None)[0].run(inputs=INPUTS)
    assert result.converged
    assert result.cycles == STEPS + 1
    return result


def refs(record: RunRecord) -> list[str]:
    return [f"{f.key.value}/{f.id}" for f in record.facts]


def chain_refs(cycles: int) -> list[str]:
    """The facts of a chain run after `cycles` merged cycles."""
    return ["seeds/start"] + [f"hypotheses/step-{n}" for n in range(cycles)]


def facts_of(result: ConvergeResult) -> list[dict[str, object]]:
    return [fact.model_dump() for fact in result.context.facts()]


async def cancelled_run(
    store: RunStore, *, at: int = 4, signing_key: str | None = None, steps: int = STEPS
) -> str:
    """A chain run whose caller cancels it in cycle `at`; its run id (saved after `at - 1`)."""
    scopes: list[anyio.CancelScope] = []

    async def hook(cycle: int) -> None:
        if cycle == at:
            scopes[0].cancel()
            await anyio.sleep(10)

    log = EventLog()
    engine, _ = chain_engine(store, hook=hook, signing_key=signing_key, log=log, steps=steps)
    with anyio.move_on_after(10) as scope:
        scopes.append(scope)
        await engine.run(inputs=INPUTS)
    assert scope.cancelled_caught
    return log.events[0].run_id


async def summary_of(store: RunStore, run_id: str) -> tuple[RunStatus, str]:
    """The status and detail `list_runs` gives the run."""
    [found] = [s for s in await store.list_runs(limit=10_000) if s.run_id == run_id]
    return found.status, found.detail


# -- 1. per-cycle saves ---------------------------------------------------------------------------


async def test_each_cycle_finds_the_last_merged_one_saved_as_running(
    store: RunStore, target: StoreTarget
) -> None:
    outside = open_store(*target)  # another connection, as another process would read
    seen: dict[int, RunRecord | BaseException] = {}
    listed: dict[int, tuple[RunStatus, str]] = {}
    log = EventLog()

    async def hook(cycle: int) -> None:
        run_id = log.events[0].run_id
        try:
            seen[cycle] = await outside.load(run_id)
            listed[cycle] = await summary_of(outside, run_id)
        except Exception as error:
            seen[cycle] = error

    engine, _ = chain_engine(store, hook=hook, log=log)
    result = await engine.run(inputs=INPUTS)
    assert result.converged
    assert sorted(seen) == list(range(1, STEPS + 1))
    final = (await store.load(result.run_id)).restore_context().facts()
    for cycle, record in seen.items():
        assert isinstance(record, RunRecord), record
        assert (record.status, record.interruption, record.stop_reason) == (
            RunStatus.RUNNING,
            None,
            None,
        )
        assert record.cycles == cycle - 1
        assert record.version == cycle  # one save per cycle, the first one at cycle 0
        assert record.tokens == 3 * (cycle - 1)
        assert refs(record) == chain_refs(cycle - 1)
        context = record.restore_context()
        assert verify(context, record.integrity)
        assert [f.model_dump() for f in context.facts()] == [
            f.model_dump() for f in final if f.promotion.cycle < cycle
        ]
        assert [c.cycle for c in record.trace.cycles] == list(range(1, cycle))
        assert listed[cycle] == (RunStatus.RUNNING, f"running: saved after cycle {cycle - 1}")
    stored = await store.load(result.run_id)
    assert (stored.status, stored.stop_reason, stored.version) == (
        RunStatus.FINISHED,
        StopReason.CONVERGED,
        STEPS + 2,
    )
    assert stored.integrity == result.integrity


# -- 2. cancellation ------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["in-cycle-4", "timer"])
async def test_a_cancelled_run_is_kept_and_continues_to_the_same_root(
    store: RunStore, how: str
) -> None:
    expected = await reference()
    log = EventLog()
    scopes: list[anyio.CancelScope] = []

    async def first(cycle: int) -> None:
        if how == "in-cycle-4" and cycle == 4:
            scopes[0].deadline = anyio.current_time()  # the caller's timer runs out now
        if how == "timer" and cycle == 1:  # a timer that runs out wherever the run then is;
            # started once the run has, so a busy machine cannot cancel it before its start
            scopes[0].deadline = anyio.current_time() + 0.1
        await anyio.sleep(0.03)

    engine, _ = chain_engine(store, hook=first, log=log)
    with anyio.move_on_after(10) as scope:
        scopes.append(scope)
        await engine.run(inputs=INPUTS)
    assert scope.cancelled_caught
    run_id = log.events[0].run_id
    assert "run_finished" not in log.types
    stored = await store.load(run_id)
    k = stored.cycles
    if how == "in-cycle-4":
        assert k == 3
    assert 0 <= k < STEPS
    assert (stored.status, stored.interruption, stored.stop_reason) == (
        RunStatus.INTERRUPTED,
        "cancelled",
        None,
    )
    assert stored.detail == f"saved after cycle {k}; interrupted: its caller cancelled it"
    assert await summary_of(store, run_id) == (
        RunStatus.INTERRUPTED,
        f"interrupted: saved after cycle {k}",
    )
    assert refs(stored) == chain_refs(k)
    assert verify(stored.restore_context(), stored.integrity)
    assert stored.tokens == 3 * k
    assert stored.progress is not None
    elapsed = stored.progress.elapsed_seconds
    assert elapsed > 0

    during: list[RunRecord] = []

    async def second(cycle: int) -> None:
        if not during:
            during.append(await store.load(run_id))

    continuing, calls = chain_engine(store, hook=second)
    result = await continuing.resume_run(run_id)
    assert result.converged
    assert result.run_id == run_id
    assert calls.calls == STEPS - k  # the interrupted cycle runs again, nothing before it
    assert result.integrity == expected.integrity  # same root, same Lamport clock
    assert facts_of(result) == facts_of(expected)
    assert result.tokens == expected.tokens == 3 * STEPS
    assert result.cycles == expected.cycles
    assert [c.cycle for c in result.trace.cycles] == [c.cycle for c in expected.trace.cycles]
    assert result.trace.continuations == (Continuation(after_cycle=k, cause="cancelled"),)
    [claimed] = during
    assert claimed.status is RunStatus.RUNNING
    assert claimed.progress is not None
    assert claimed.progress.elapsed_seconds >= elapsed
    assert claimed.trace.continuations == result.trace.continuations
    final = await store.load(run_id)
    assert (final.status, final.stop_reason) == (RunStatus.FINISHED, StopReason.CONVERGED)
    assert final.trace.continuations == (Continuation(after_cycle=k, cause="cancelled"),)
    assert final.integrity == expected.integrity


async def test_a_run_interrupted_twice_records_both_continuations(store: RunStore) -> None:
    expected = await reference()
    run_id = await cancelled_run(store, at=3)
    scopes: list[anyio.CancelScope] = []

    async def hook(cycle: int) -> None:
        if cycle == 5:
            scopes[0].cancel()
            await anyio.sleep(10)

    with anyio.move_on_after(10) as scope:
        scopes.append(scope)
        await chain_engine(store, hook=hook)[0].resume_run(run_id)
    assert scope.cancelled_caught
    again = await store.load(run_id)
    assert (again.status, again.interruption, again.cycles) == (
        RunStatus.INTERRUPTED,
        "cancelled",
        4,
    )
    assert again.trace.continuations == (Continuation(after_cycle=2, cause="cancelled"),)
    result = await chain_engine(store)[0].resume_run(run_id)
    assert result.trace.continuations == (
        Continuation(after_cycle=2, cause="cancelled"),
        Continuation(after_cycle=4, cause="cancelled"),
    )
    assert result.integrity == expected.integrity
    assert facts_of(result) == facts_of(expected)
    assert result.tokens == expected.tokens


@pytest.mark.parametrize("approve", [True, False], ids=["approved", "rejected"])
async def test_a_decided_run_interrupted_later_keeps_its_decision(
    store: RunStore, approve: bool
) -> None:
    decision = (
        GateDecision.approve("gate:2:strategies/risky", by="jane")
        if approve
        else GateDecision.reject("gate:2:strategies/risky", by="jane", reason="too risky")
    )
    uninterrupted, _ = chain_engine(None, risky=True)
    paused = await uninterrupted.run(inputs=INPUTS)
    assert paused.checkpoint is not None
    expected = await uninterrupted.resume(paused.checkpoint, [decision])
    assert expected.converged

    stored = await chain_engine(store, risky=True)[0].run(inputs=INPUTS)
    assert stored.stop_reason is StopReason.AWAITING_HUMAN
    run_id = stored.run_id
    scopes: list[anyio.CancelScope] = []

    async def hook(cycle: int) -> None:
        if cycle == 4:
            scopes[0].cancel()
            await anyio.sleep(10)

    with anyio.move_on_after(10) as scope:
        scopes.append(scope)
        await chain_engine(store, hook=hook, risky=True)[0].resume_run(run_id, [decision])
    assert scope.cancelled_caught
    interrupted = await store.load(run_id)
    assert (interrupted.status, interrupted.cycles) == (RunStatus.INTERRUPTED, 3)
    assert interrupted.trace.decisions == (decision,)
    result = await chain_engine(store, risky=True)[0].resume_run(run_id)
    assert result.converged  # a rejected proposal stays refused: it is not held again
    assert result.integrity == expected.integrity
    assert facts_of(result) == facts_of(expected)
    assert result.rejections == expected.rejections
    assert result.tokens == expected.tokens
    assert result.trace.decisions == (decision,)
    assert result.trace.continuations == (Continuation(after_cycle=3, cause="cancelled"),)
    final = await store.load(run_id)
    assert final.trace.decisions == (decision,)
    said = "approved" if approve else "rejected"
    assert final.decided_by() == f" (decided by jane: {said} gate:2:strategies/risky)"


# -- 3. durability="exit" -------------------------------------------------------------------------


async def test_exit_durability_stores_nothing_until_the_run_stops(
    store: RunStore, target: StoreTarget
) -> None:
    log = EventLog()
    seen: list[tuple[bool, bool]] = []

    async def hook(cycle: int) -> None:
        run_id = log.events[0].run_id
        try:
            await store.load(run_id)
            found = True
        except RunNotFoundError:
            found = False
        listed = any(s.run_id == run_id for s in await store.list_runs(limit=10_000))
        seen.append((found, listed))

    engine, _ = chain_engine(store, hook=hook, durability="exit", log=log)
    result = await engine.run(inputs=INPUTS)
    assert result.converged
    assert seen == [(False, False)] * STEPS
    stored = await store.load(result.run_id)
    assert (stored.status, stored.stop_reason, stored.version) == (
        RunStatus.FINISHED,
        StopReason.CONVERGED,
        1,
    )
    assert stored.integrity == result.integrity
    assert journal(target, result.run_id) == []
    assert await summary_of(store, result.run_id) == (RunStatus.FINISHED, "fixed point reached")


# -- 4. the lease ---------------------------------------------------------------------------------


async def test_a_long_cycle_renews_its_lease_and_stays_running(
    store: RunStore, target: StoreTarget
) -> None:
    outside = open_store(*target)
    log = EventLog()
    seen: list[tuple[RunStatus, RunStatus, str | None]] = []

    async def hook(cycle: int) -> None:
        if cycle != 2:
            return
        run_id = log.events[0].run_id
        with anyio.move_on_after(1.2):  # the long cycle: 1.2 s, four times the lease
            while True:
                await anyio.sleep(0.1)
                listed, _ = await summary_of(outside, run_id)
                record = await outside.load(run_id)
                seen.append((listed, record.status, record.interruption))

    engine, _ = chain_engine(store, hook=hook, lease=0.3, steps=2, log=log)
    result = await engine.run(inputs=INPUTS)
    assert result.converged
    assert len(seen) >= 3  # looked several times across four leases (fewer on a busy machine)
    assert set(seen) == {(RunStatus.RUNNING, RunStatus.RUNNING, None)}
    assert (await store.load(result.run_id)).status is RunStatus.FINISHED


async def test_a_run_whose_lease_ran_out_is_interrupted_and_continues_as_lost(
    store: RunStore, target: StoreTarget
) -> None:
    expected = await reference()
    run_id = await cancelled_run(store, at=3)
    version = (await store.load(run_id)).version
    past = (datetime.now(UTC) - timedelta(seconds=5)).isoformat()
    sql(  # what a process killed after its save of cycle 2 leaves behind
        target,
        "UPDATE converge_runs SET status = 'running', lease_until = ? WHERE run_id = ?",
        past,
        run_id,
    )
    status, detail = await summary_of(store, run_id)
    assert status is RunStatus.INTERRUPTED
    assert detail == f"interrupted: its process stopped saving (lease ran out at {past})"
    lost = await store.load(run_id)
    assert (lost.status, lost.interruption, lost.version) == (
        RunStatus.INTERRUPTED,
        "lost",
        version,
    )
    assert lost.detail == "saved after cycle 2; interrupted: its process stopped saving"
    assert refs(lost) == chain_refs(2)
    engine, calls = chain_engine(store)
    result = await engine.resume_run(run_id)
    assert result.trace.continuations == (Continuation(after_cycle=2, cause="lost"),)
    assert result.integrity == expected.integrity
    assert facts_of(result) == facts_of(expected)
    assert calls.calls == STEPS - 2
    assert (await store.load(run_id)).status is RunStatus.FINISHED


# -- 5. refusals ----------------------------------------------------------------------------------


async def test_resume_run_refuses_what_it_cannot_continue_and_changes_nothing(
    store: RunStore, target: StoreTarget
) -> None:
    run_id = await cancelled_run(store, at=3)
    before = await store.load(run_id)
    entries = journal(target, run_id)
    engine, calls = chain_engine(store)
    decision = GateDecision.approve("gate:1:hypotheses/step-9", by="eve")
    with pytest.raises(
        InvalidResumeError,
        match=f"run {run_id} is interrupted, not waiting for a decision; it continues without",
    ):
        await engine.resume_run(run_id, [decision])
    with pytest.raises(ConfigurationError, match="resume_run needs an engine with a store"):
        await chain_engine(None)[0].resume_run(run_id)
    missing = f"missing-{uuid.uuid4().hex}"
    with pytest.raises(RunNotFoundError, match=f"no run '{missing}'"):
        await engine.resume_run(missing)
    after = await store.load(run_id)
    assert (after.version, after.status, after.interruption) == (
        before.version,
        RunStatus.INTERRUPTED,
        "cancelled",
    )
    assert after == before
    assert journal(target, run_id) == entries
    assert calls.calls == 0

    finished = await engine.resume_run(run_id)
    assert finished.converged
    done = await store.load(run_id)
    with pytest.raises(
        InvalidResumeError,
        match=f"run {run_id} is finished \\(fixed point reached\\); only a paused or "
        "interrupted run can be resumed",
    ):
        await engine.resume_run(run_id)
    assert (await store.load(run_id)).version == done.version
    assert calls.calls == STEPS - 2


async def resume_while_running(target: StoreTarget, *, at: int) -> tuple[str, object, int, int]:
    """A chain run that, in cycle `at`, has another engine try to continue it; the run id,
    what the attempt raised (or returned), and the stored version before and after it."""
    outside = open_store(*target)
    log = EventLog()
    seen: list[tuple[object, int, int]] = []
    calls: list[int] = []

    async def hook(cycle: int) -> None:
        if cycle != at:
            return
        run_id = log.events[0].run_id
        before = (await outside.load(run_id)).version
        intruder, intruder_chain = chain_engine(outside)
        try:
            outcome: object = await intruder.resume_run(run_id)
        except Exception as error:
            outcome = error
        seen.append((outcome, before, (await outside.load(run_id)).version))
        calls.append(intruder_chain.calls)

    engine, _ = chain_engine(open_store(*target), hook=hook, log=log)
    result = await engine.run(inputs=INPUTS)
    assert result.converged
    assert result.trace.continuations == ()
    [(outcome, before, after)] = seen
    assert calls == [0]  # the intruder ran nothing
    return result.run_id, outcome, before, after


async def test_resume_run_refuses_a_run_still_running_with_a_live_lease(
    target: StoreTarget,
) -> None:
    run_id, outcome, before, after = await resume_while_running(target, at=3)
    assert isinstance(outcome, InvalidResumeError)
    assert str(outcome) == (
        f"run {run_id} is running (saved after cycle 2); only a paused or interrupted run "
        "can be resumed"
    )
    assert before == after == 3


# -- 6. tampering ---------------------------------------------------------------------------------


def rewrite_head(target: StoreTarget, run_id: str, head: ProgressHead | dict[str, object]) -> None:
    text = head.model_dump_json() if isinstance(head, ProgressHead) else json.dumps(head)
    sql(target, "UPDATE converge_runs SET record = ? WHERE run_id = ?", text, run_id)


def forge_entry(target: StoreTarget, run_id: str, seq: int, old: str, new: str) -> None:
    """Change one journal entry and re-chain the head's digest over it (no key needed)."""
    entries = journal(target, run_id)
    forged = entries[seq - 1].replace(old, new)
    assert forged != entries[seq - 1]
    entries[seq - 1] = forged
    digest = genesis(run_id)
    for entry in entries:
        digest = chain(digest, entry)
    sql(
        target,
        "UPDATE converge_journal SET entry = ? WHERE run_id = ? AND seq = ?",
        forged,
        run_id,
        seq,
    )
    head = head_of(target, run_id)
    rewrite_head(target, run_id, head.model_copy(update={"journal_digest": digest}))


@pytest.mark.parametrize("tamper", ["edit", "drop", "swap", "add"])
async def test_a_changed_journal_is_refused_on_load(
    store: RunStore, target: StoreTarget, tamper: str
) -> None:
    run_id = await cancelled_run(store, at=5)
    entries = journal(target, run_id)
    assert len(entries) == head_of(target, run_id).journal_length == 5
    where = "WHERE run_id = ? AND seq = ?"
    if tamper == "edit":
        sql(
            target,
            "UPDATE converge_journal SET entry = replace(entry, 'step 1 of', 'step 7 of') "
            "WHERE run_id = ? AND seq = ?",
            run_id,
            3,
        )
        assert journal(target, run_id)[2] != entries[2]
    elif tamper == "drop":
        sql(target, "DELETE FROM converge_journal " + where, run_id, 3)
    elif tamper == "swap":
        for old, new in ((2, -2), (3, 2), (-2, 3)):
            sql(target, "UPDATE converge_journal SET seq = ? " + where, new, run_id, old)
        assert journal(target, run_id) == [entries[0], entries[2], entries[1], *entries[3:]]
    else:
        sql(
            target,
            "INSERT INTO converge_journal (run_id, seq, entry) VALUES (?, ?, ?)",
            run_id,
            6,
            CycleDelta().model_dump_json(),
        )
    refused = f"^run {run_id}: its journal \\(\\d entries\\) does not match its head"
    with pytest.raises(StoreError, match=refused) as caught:
        await store.load(run_id)
    assert not isinstance(caught.value, RunNotFoundError)
    engine, calls = chain_engine(store)
    with pytest.raises(StoreError, match=refused):
        await engine.resume_run(run_id)
    assert calls.calls == 0


@pytest.mark.parametrize("tamper", ["none", "tokens", "rechained", "unsigned", "other-key"])
async def test_with_a_key_a_changed_head_is_refused_by_resume_run(
    store: RunStore, target: StoreTarget, tamper: str
) -> None:
    expected = await reference()
    run_id = await cancelled_run(store, at=4, signing_key=KEY)
    head = head_of(target, run_id)
    assert head.signature is not None
    data: dict[str, object] = json.loads(head.model_dump_json())
    if tamper == "tokens":
        rewrite_head(target, run_id, data | {"tokens": 0})
    elif tamper == "rechained":  # the attacker re-chains the journal consistently
        forge_entry(target, run_id, 3, "step 1 of the chain", "step 1 of the forgery")
    elif tamper == "unsigned":
        rewrite_head(target, run_id, data | {"signature": None})
    loaded = await store.load(run_id)  # the journal chains to the head: it loads
    assert loaded.status is RunStatus.INTERRUPTED
    engine, calls = chain_engine(store, signing_key="another-key" if tamper == "other-key" else KEY)
    if tamper == "none":
        result = await engine.resume_run(run_id)
        assert result.integrity == expected.integrity
        return
    said = "is unsigned, but a signing key is set" if tamper == "unsigned" else "bad signature"
    with pytest.raises(StoreError, match=f"^run {run_id}: the stored progress .*{said}"):
        await engine.resume_run(run_id)
    assert calls.calls == 0
    assert (await store.load(run_id)).version == loaded.version


async def test_without_a_key_an_edited_fact_is_refused_when_continuing(
    store: RunStore, target: StoreTarget
) -> None:
    run_id = await cancelled_run(store, at=4)
    forge_entry(target, run_id, 3, "step 1 of the chain", "step 1 of the forgery")
    loaded = await store.load(run_id)  # no key: the re-chained journal loads
    assert [f.content for f in loaded.facts if f.id == "step-1"] == ["step 1 of the forgery"]
    with pytest.raises(StoreError, match="fact hypotheses/step-1: digest"):
        loaded.restore_context()
    engine, calls = chain_engine(store)
    with pytest.raises(InvalidCheckpointError, match=f"run {run_id}: .*hypotheses/step-1: digest"):
        await engine.resume_run(run_id)
    assert calls.calls == 0
    assert (await store.load(run_id)).version == loaded.version


# -- 7. two continuations at once -----------------------------------------------------------------


@contextmanager
def row_locked(target: StoreTarget, run_id: str, *, bump: bool = False) -> Generator[None]:
    """Hold the run's row in a writer's open transaction (bumping its version if `bump`),
    as another process saving it at that moment would, until the block ends."""
    kind, where = target
    if kind == "sqlite":
        with closing(sqlite3.connect(where, isolation_level=None)) as connection:
            connection.execute("BEGIN IMMEDIATE")
            if bump:
                connection.execute(
                    "UPDATE converge_runs SET version = version + 1 WHERE run_id = ?", (run_id,)
                )
            try:
                yield
            finally:
                connection.execute("COMMIT")
        return
    import psycopg

    with psycopg.connect(where) as connection:  # one transaction, committed on exit
        if bump:
            connection.execute(
                "UPDATE converge_runs SET version = version + 1 WHERE run_id = %s", (run_id,)
            )
        else:
            connection.execute(
                "SELECT 1 FROM converge_runs WHERE run_id = %s FOR UPDATE", (run_id,)
            )
        yield


async def lock_waiters(target: StoreTarget, count: int) -> None:
    """Return once `count` transactions wait for a lock (PostgreSQL), or after a moment."""
    if target[0] == "sqlite":
        await anyio.sleep(0.2)  # SQLite serialises writers; the outcome does not depend on it
        return
    with anyio.fail_after(10):
        while True:
            [(waiting,)] = sql(
                target, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            )
            if int(str(waiting)) >= count:
                return
            await anyio.sleep(0.02)


Attempt = Callable[[RunStore], Awaitable[ConvergeResult]]


async def race(
    target: StoreTarget, run_id: str, attempts: dict[str, Attempt]
) -> dict[str, ConvergeResult | StoreError]:
    """Run `attempts` at once, each on a store of its own, so that all of them have read the
    run and wait to claim it (its row held) before any claim goes through."""
    arrived: list[str] = []
    ready = anyio.Event()
    outcomes: dict[str, ConvergeResult | StoreError] = {}

    stores: dict[str, RunStore] = {}
    for name in attempts:
        stores[name] = open_store(*target)
        await stores[name].list_runs(limit=1)  # connected (and the schema checked) beforehand

    async def attempt(name: str, call: Attempt) -> None:
        store = Arrivals(
            stores[name], name=name, parties=len(attempts), arrived=arrived, ready=ready
        )
        try:
            outcomes[name] = await call(store)
        except StoreError as error:
            outcomes[name] = error

    with ExitStack() as held:
        held.enter_context(row_locked(target, run_id))
        async with anyio.create_task_group() as group:
            for name, call in attempts.items():
                group.start_soon(attempt, name, call)
            with anyio.fail_after(10):
                await ready.wait()
            await lock_waiters(target, len(attempts))
            held.close()  # let the claims through
    claims = arrived[: len(attempts)]
    assert sorted(claims) == sorted(attempts)  # every claim was made before any went through
    return outcomes


@pytest.mark.parametrize("durability", ["cycle", "exit"])
async def test_of_two_concurrent_continuations_one_wins_and_the_other_saves_nothing(
    store: RunStore, target: StoreTarget, request: pytest.FixtureRequest, durability: Durability
) -> None:
    expected = await reference()
    run_id = await cancelled_run(store, at=3)
    version = (await store.load(run_id)).version
    chains: dict[str, Chain] = {}

    def contender(name: str) -> Attempt:
        async def call(store: RunStore) -> ConvergeResult:
            engine, chains[name] = chain_engine(store, durability=durability)
            return await engine.resume_run(run_id)

        return call

    outcomes = await race(target, run_id, {"a": contender("a"), "b": contender("b")})
    [winner] = [name for name, o in outcomes.items() if isinstance(o, ConvergeResult)]
    [loser] = [name for name, o in outcomes.items() if not isinstance(o, ConvergeResult)]
    lost = outcomes[loser]
    assert isinstance(lost, StaleRecordError), repr(lost)
    assert (lost.run_id, lost.expected) == (run_id, version)
    assert chains[winner].calls == STEPS - 2
    if durability == "cycle":
        assert chains[loser].calls == 0  # refused at its claim, before any cycle
        assert lost.result is None
    else:
        assert chains[loser].calls == STEPS - 2  # refused at its final save, result kept
        assert lost.result is not None
        assert lost.result.integrity == expected.integrity
    final = await store.load(run_id)
    assert (final.status, final.stop_reason) == (RunStatus.FINISHED, StopReason.CONVERGED)
    assert final.trace.continuations == (Continuation(after_cycle=2, cause="cancelled"),)
    assert final.integrity == expected.integrity


async def test_of_two_concurrent_decisions_on_a_paused_run_only_the_winners_is_kept(
    store: RunStore, target: StoreTarget, request: pytest.FixtureRequest
) -> None:
    paused = await build_engine(store=store).run()
    run_id = paused.run_id
    decisions = {
        "jane": GateDecision.approve(GATE, by="jane"),
        "bob": GateDecision.reject(GATE, by="bob", reason="too expensive"),
    }

    def decider(who: str) -> Attempt:
        async def call(store: RunStore) -> ConvergeResult:
            return await build_engine(store=store).resume_run(run_id, [decisions[who]])

        return call

    outcomes = await race(target, run_id, {who: decider(who) for who in decisions})
    [winner] = [who for who, o in outcomes.items() if isinstance(o, ConvergeResult)]
    [loser] = [who for who, o in outcomes.items() if not isinstance(o, ConvergeResult)]
    assert isinstance(outcomes[loser], StaleRecordError), repr(outcomes[loser])
    final = await store.load(run_id)
    assert final.status is RunStatus.FINISHED
    assert final.trace.decisions == (decisions[winner],)


async def test_a_versioned_save_waiting_behind_a_concurrent_save_is_stale(
    store: RunStore, target: StoreTarget, request: pytest.FixtureRequest
) -> None:
    record = RunRecord.of(await Engine().run(inputs=[seed("a")]))
    version = await store.save(record, expected_version=0)
    outcome: list[int | Exception] = []

    async def save() -> None:
        try:
            outcome.append(await store.save(record, expected_version=version))
        except Exception as error:
            outcome.append(error)

    with ExitStack() as held:
        held.enter_context(row_locked(target, record.run_id, bump=True))
        async with anyio.create_task_group() as group:
            group.start_soon(save)
            await lock_waiters(target, 1)
            held.close()
    [error] = outcome
    assert isinstance(error, StaleRecordError), repr(error)
    assert (error.expected, error.current) == (version, version + 1)
    assert (await store.load(record.run_id)).version == version + 1


# -- 8. a store failing mid-run -------------------------------------------------------------------


@pytest.mark.parametrize("fail_at", [1, 3])
async def test_a_failed_per_cycle_save_fails_the_run_naming_it_and_the_cycle(
    store: RunStore, fail_at: int
) -> None:
    failing = FailingProgress(store, fail_at=fail_at)
    log = EventLog()
    engine, calls = chain_engine(failing, log=log)
    with pytest.raises(StoreError) as caught:
        await engine.run(inputs=INPUTS)
    error = caught.value
    assert not isinstance(error, StaleRecordError)
    run_id, cycle = failing.heads[-1]
    assert cycle == fail_at - 1
    assert str(error) == f"run {run_id}: cycle {cycle} could not be saved: OSError: disk full"
    assert isinstance(error.__cause__, OSError)
    assert error.result is None
    assert calls.calls == fail_at - 1  # no cycle ran past the failed save
    assert failing.records == []
    assert "run_finished" not in log.types
    if fail_at == 1:
        with pytest.raises(RunNotFoundError):
            await store.load(run_id)
        return
    stored = await store.load(run_id)
    assert (stored.status, stored.stop_reason, stored.cycles) == (
        RunStatus.RUNNING,  # until its lease runs out, as for any exception escaping `run`
        None,
        fail_at - 2,
    )


# -- 9. the journal, entry by entry ---------------------------------------------------------------


async def test_the_journal_holds_what_each_cycle_added_and_stays_as_the_finished_runs_rows(
    store: RunStore, target: StoreTarget
) -> None:
    log = EventLog()
    during: dict[int, tuple[list[str], ProgressHead]] = {}
    scopes: list[anyio.CancelScope] = []

    async def first(cycle: int) -> None:
        run_id = log.events[0].run_id
        during[cycle] = (journal(target, run_id), head_of(target, run_id))
        if cycle == 5:
            scopes[0].cancel()
            await anyio.sleep(10)

    engine, _ = chain_engine(store, hook=first, log=log)
    with anyio.move_on_after(10) as scope:
        scopes.append(scope)
        await engine.run(inputs=INPUTS)
    run_id = log.events[0].run_id
    assert sorted(during) == [1, 2, 3, 4, 5]
    for cycle, (entries, head) in during.items():
        assert len(entries) == head.journal_length == cycle
        digest = genesis(run_id)
        for entry in entries:
            digest = chain(digest, entry)
        assert digest == head.journal_digest
        deltas = [CycleDelta.model_validate_json(entry) for entry in entries]
        assert [f"{f.key.value}/{f.id}" for f in deltas[0].facts] == ["seeds/start"]
        assert deltas[0].cycles == ()
        for n, delta in enumerate(deltas[1:], start=1):  # entry n + 1: what cycle n added
            assert [(f.id, f.promotion.cycle) for f in delta.facts] == [(f"step-{n - 1}", n)]
            assert [c.cycle for c in delta.cycles] == [n]
            assert (delta.rejections, delta.decisions) == ((), ())
        if cycle > 1:
            assert entries[:-1] == during[cycle - 1][0]  # appended, never rewritten
    after = journal(target, run_id)
    assert after == during[5][0]
    stored = await store.load(run_id)
    assert stored.progress is not None
    assert stored.progress.journal_length == len(after) == 5

    restarted: list[list[str]] = []

    async def second(cycle: int) -> None:
        if not restarted:
            restarted.append(journal(target, run_id))

    result = await chain_engine(store, hook=second)[0].resume_run(run_id)
    assert result.converged
    [[claim]] = restarted  # a continuation starts its journal again, with everything
    delta = CycleDelta.model_validate_json(claim)
    assert [f"{f.key.value}/{f.id}" for f in delta.facts] == chain_refs(4)
    assert [c.cycle for c in delta.cycles] == [1, 2, 3, 4]
    kept = journal(target, run_id)  # the finished run's rows: the continuation's entries
    assert kept[0] == claim
    assert sql(target, "SELECT layout FROM converge_runs WHERE run_id = ?", run_id) == [("rows",)]
    [(text,)] = sql(target, "SELECT record FROM converge_runs WHERE run_id = ?", run_id)
    head = RecordHead.model_validate_json(str(text))
    assert head.journal_length == len(kept)
    assert head.record.facts == ()
    assert head.record.trace.cycles == ()
    loaded = await store.load(run_id)
    assert loaded == RunRecord.of(result).model_copy(update={"version": loaded.version})


# -- 10. a paused run -----------------------------------------------------------------------------


async def test_a_paused_run_is_stored_paused_and_is_decided_once(
    store: RunStore, target: StoreTarget
) -> None:
    paused = await build_engine(store=store).run()
    assert paused.stop_reason is StopReason.AWAITING_HUMAN
    run_id = paused.run_id
    record = await store.load(run_id)
    assert (record.status, record.pending) == (RunStatus.PAUSED, paused.pending)
    assert (await summary_of(store, run_id))[0] is RunStatus.PAUSED
    assert journal(target, run_id)  # its rows, under a head holding its checkpoint's rest
    assert sql(target, "SELECT layout FROM converge_runs WHERE run_id = ?", run_id) == [("rows",)]
    decision = GateDecision.approve(GATE, by="jane")
    result = await build_engine(store=store).resume_run(run_id, [decision])
    assert result.converged
    final = await store.load(run_id)
    assert (final.status, final.stop_reason) == (RunStatus.FINISHED, StopReason.CONVERGED)
    assert final.trace.decisions == (decision,)
    assert final.integrity == result.integrity
    assert journal(target, run_id)  # the continuation's entries: the finished run's rows
    assert sql(target, "SELECT layout FROM converge_runs WHERE run_id = ?", run_id) == [("rows",)]
    again = GateDecision.reject(GATE, by="bob", reason="too expensive")
    with pytest.raises(
        InvalidResumeError, match=f"decided by jane: approved {GATE}.*only a paused or interrupted"
    ):
        await build_engine(store=store).resume_run(run_id, [again])
    assert (await store.load(run_id)).version == final.version


# -- 11. a stored running or interrupted run renders ----------------------------------------------


async def test_the_report_of_a_running_and_of_an_interrupted_run_shows_its_status(
    store: RunStore,
) -> None:
    log = EventLog()
    pages: list[str] = []
    scopes: list[anyio.CancelScope] = []

    async def hook(cycle: int) -> None:
        if cycle == 3:
            pages.append(render_report(await store.load(log.events[0].run_id)))
            scopes[0].cancel()
            await anyio.sleep(10)

    engine, _ = chain_engine(store, hook=hook, log=log)
    with anyio.move_on_after(10) as scope:
        scopes.append(scope)
        await engine.run(inputs=INPUTS)
    record = await store.load(log.events[0].run_id)
    assert record.status is RunStatus.INTERRUPTED
    [running] = pages
    for page, status, detail in (
        (running, "running", "saved after cycle 2"),
        (render_report(record), "interrupted", record.detail),
    ):
        badge = (
            f'<span class="badge stop-{status}" data-stop-reason="{status}" '
            f'data-badge="{status}">{status}</span>'
        )
        assert badge in page
        assert f'<body data-run-id="{record.run_id}" data-stop-reason="{status}">' in page
        assert detail in page
        assert 'data-verified="true"' in page  # its facts verify against its proof
        assert "hypotheses/step-1" in page


def test_the_cli_shows_and_lists_an_interrupted_run_and_resume_continues_it(
    target: StoreTarget, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # a PostgreSQL run's report goes to ./.converge/reports
    kind, where = target
    run_id = anyio.run(lambda: cancelled_run(open_store(kind, where), at=3))
    code, out = cli("--store", where, "show", run_id)
    assert code == 0
    assert (
        "status       interrupted (saved after cycle 2; interrupted: its caller cancelled it)"
        in out.splitlines()
    )
    assert "  step-1: step 1 of the chain" in out.splitlines()
    code, out = cli("--store", where, "runs", "--limit", "5")
    assert code == 0
    [line] = [line for line in out.splitlines() if line.startswith(run_id)]
    assert line.split()[2:4] == ["interrupted", "-"]
    assert " 2 cycles     3 facts" in line

    code, out = cli("--store", where, "resume", run_id, "--formation", str(DOUBLES))
    assert code == 0, out
    assert f"saved run    {run_id}" in out
    record = anyio.run(open_store(kind, where).load, run_id)
    assert (record.status, record.stop_reason) == (RunStatus.FINISHED, StopReason.CONVERGED)
    assert record.trace.continuations == (Continuation(after_cycle=2, cause="cancelled"),)
    assert refs(record) == chain_refs(STEPS)
    code, out = cli("--store", where, "runs", "--limit", "5")
    [line] = [line for line in out.splitlines() if line.startswith(run_id)]
    assert line.split()[2:4] == ["finished", "converged"]
    version = record.version
    late = cli("--store", where, "resume", run_id, "--formation", str(DOUBLES))
    assert late[0] == STALE  # a second continuation comes too late, as a second decision does
    assert anyio.run(open_store(kind, where).load, run_id).version == version


async def test_a_read_only_store_being_created_has_no_runs_yet(tmp_path: Path) -> None:
    """A writer has created the file (WAL on) but not yet its tables: readers see no runs."""
    path = tmp_path / "runs.db"
    with closing(sqlite3.connect(path)) as connection:
        connection.execute("PRAGMA journal_mode = WAL")
        store = SqliteRunStore(path, read_only=True)
        assert await store.list_runs() == ()
        with pytest.raises(RunNotFoundError):
            await store.load("some-run")
    path.write_bytes(b"not a database at all, but some text that is long enough" * 100)
    with pytest.raises(StoreError, match="not a converge store"):
        await SqliteRunStore(path, read_only=True).list_runs()


# -- 12. upgrades ---------------------------------------------------------------------------------


def v1_copy(tmp_path: Path) -> Path:
    path = tmp_path / "runs-v1.db"
    path.write_bytes(V1_FIXTURE.read_bytes())
    return path


async def check_upgraded(store: RunStore, *, signing_key: str | None) -> None:
    """The two runs of the version-1 fixture, as an upgraded store gives them back; then the
    paused one decided by id."""
    with closing(sqlite3.connect(V1_FIXTURE)) as fixture:
        written = dict(fixture.execute("SELECT run_id, record FROM converge_runs").fetchall())
    for run_id, text in written.items():  # every record comes back as release 1 wrote it
        original = RunRecord.model_validate_json(str(text)).model_copy(update={"version": 1})
        assert await store.load(str(run_id)) == original
    runs = {s.run_id: s for s in await store.list_runs(limit=10_000)}
    assert runs[V1_PAUSED].status is RunStatus.PAUSED
    assert runs[V1_CONVERGED].status is RunStatus.FINISHED
    assert runs[V1_CONVERGED].stop_reason is StopReason.CONVERGED
    converged = await store.load(V1_CONVERGED)
    assert (converged.version, converged.status) == (1, RunStatus.FINISHED)
    assert verify(converged.restore_context(), converged.integrity)
    paused = await store.load(V1_PAUSED)
    assert (paused.version, paused.status) == (1, RunStatus.PAUSED)
    [gate] = paused.pending
    decision = GateDecision.approve(gate.gate_id, by="ok")
    engine = build_engine(store=store, signing_key=signing_key)
    result = await engine.resume_run(V1_PAUSED, [decision])
    assert result.stop_reason is StopReason.CONVERGED
    decided = await store.load(V1_PAUSED)
    assert decided.status is RunStatus.FINISHED
    assert decided.version > paused.version  # saved per cycle, then finished
    assert decided.trace.decisions == (decision,)
    assert (await summary_of(store, V1_PAUSED))[0] is RunStatus.FINISHED


async def test_a_schema_1_sqlite_store_upgrades_and_its_paused_run_resumes_by_id(
    tmp_path: Path,
) -> None:
    await check_upgraded(SqliteRunStore(v1_copy(tmp_path)), signing_key=None)


async def test_a_schema_1_paused_run_under_a_key_resumes_from_its_signed_checkpoint(
    tmp_path: Path,
) -> None:
    """Release 1 signed checkpoints, not records: with a key, `resume_run` refuses the unsigned
    record (an unsigned record could hold any earlier checkpoint of the run), and the run is
    resumed from its checkpoint, whose signature is verified (docs/stores.md says so)."""
    store = SqliteRunStore(v1_copy(tmp_path))
    engine = build_engine(store=store, signing_key=SIGNING_KEY)
    paused = await store.load(V1_PAUSED)
    [gate] = paused.pending
    decision = GateDecision.approve(gate.gate_id, by="ok")
    with pytest.raises(StoreError, match="the stored record is unsigned"):
        await engine.resume_run(V1_PAUSED, [decision])
    assert (await store.load(V1_PAUSED)).version == paused.version
    assert paused.checkpoint is not None
    result = await engine.resume(paused.checkpoint, [decision], run_id=V1_PAUSED)
    assert result.stop_reason is StopReason.CONVERGED
    assert (await store.load(V1_PAUSED)).trace.decisions == (decision,)
    forged = paused.checkpoint.model_copy(update={"tokens": paused.checkpoint.tokens + 1})
    with pytest.raises(InvalidResumeError):  # used up, and forged besides
        await engine.resume(forged, [decision], run_id=V1_PAUSED)


async def test_a_schema_1_postgres_database_is_upgraded_in_place_with_nothing_lost(
    tmp_path: Path,
) -> None:
    import psycopg
    from psycopg import sql as pg
    from psycopg.conninfo import make_conninfo

    dsn = postgres_or_skip()
    name = f"converge_v1_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(pg.SQL("CREATE DATABASE {}").format(pg.Identifier(name)))
    v1 = make_conninfo(dsn, dbname=name)
    columns = (
        "run_id, stop_reason, detail, cycles, fact_count, merkle_root, saved_at, name, record, "
        "checkpoint"
    )
    with closing(sqlite3.connect(V1_FIXTURE)) as fixture:
        rows = fixture.execute(f"SELECT {columns} FROM converge_runs").fetchall()
    store = PostgresRunStore(v1)
    try:
        with psycopg.connect(v1, autocommit=True) as connection:  # what release 1 created
            connection.execute(
                "CREATE TABLE converge_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            connection.execute("INSERT INTO converge_meta VALUES ('schema_version', '1')")
            connection.execute(
                "CREATE TABLE converge_runs (run_id TEXT PRIMARY KEY, stop_reason TEXT NOT NULL, "
                "detail TEXT NOT NULL, cycles INTEGER NOT NULL, fact_count INTEGER NOT NULL, "
                "merkle_root TEXT NOT NULL, saved_at TIMESTAMPTZ NOT NULL, name TEXT, "
                "record TEXT NOT NULL, checkpoint TEXT)"
            )
            for row in rows:
                values = (*row[:6], datetime.fromisoformat(row[6]), *row[7:])
                connection.execute(
                    "INSERT INTO converge_runs (run_id, stop_reason, detail, cycles, fact_count, "
                    "merkle_root, saved_at, name, record, checkpoint) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    values,
                )
        upgraded = SqliteRunStore(v1_copy(tmp_path))
        listed = {s.run_id: s for s in await store.list_runs()}
        assert set(listed) == {V1_PAUSED, V1_CONVERGED}
        assert listed == {s.run_id: s for s in await upgraded.list_runs()}  # nothing lost
        for run_id in (V1_PAUSED, V1_CONVERGED):
            assert await store.load(run_id) == await upgraded.load(run_id)
        with psycopg.connect(v1, autocommit=True) as connection:
            [(schema,)] = connection.execute(
                "SELECT value FROM converge_meta WHERE key = 'schema_version'"
            ).fetchall()
        assert schema == str(SCHEMA_VERSION)
        await check_upgraded(store, signing_key=None)
    finally:
        store.close()
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(pg.SQL("DROP DATABASE {} WITH (FORCE)").format(pg.Identifier(name)))


# -- cancellation at the edges of a save ----------------------------------------------------------


async def test_a_cancel_during_a_shielded_save_stops_a_run_whose_suggestors_never_await(
    store: RunStore,
) -> None:
    """The per-cycle save is shielded; the cancellation that arrived meanwhile must still be
    raised before the next cycle, even though `Chain.execute` (no hook) never awaits."""
    log = EventLog()
    engine, chain = chain_engine(Slow(store, seconds=0.05), steps=40, log=log)
    with anyio.move_on_after(0.2) as scope:
        await engine.run(inputs=INPUTS)
    assert scope.cancelled_caught
    assert chain.calls < 40
    record = await store.load(log.events[0].run_id)
    assert (record.status, record.interruption) == (RunStatus.INTERRUPTED, "cancelled")
    assert record.cycles == chain.calls


async def test_a_cancel_during_the_final_save_keeps_the_finished_run(
    store: RunStore, target: StoreTarget
) -> None:
    """A cancellation landing after the last cycle, during the (shielded) final save, does
    not lose the finished record: whether the caller then sees the cancellation or the result
    depends on whether anything awaits after the save, which differs by backend."""
    log = EventLog()
    engine, chain = chain_engine(Slow(store, seconds=0.3, final=True), steps=3, log=log)
    with anyio.fail_after(5), anyio.move_on_after(0.15):
        await engine.run(inputs=INPUTS)
    assert chain.calls == 3
    record = await store.load(log.events[0].run_id)
    assert (record.status, record.stop_reason) == (RunStatus.FINISHED, StopReason.CONVERGED)
    assert journal(target, record.run_id) == []


async def test_a_cancel_during_the_last_event_flush_leaves_a_run_that_continues(
    store: RunStore,
) -> None:
    """Cancelled while an observer takes the run's last events: the run is kept interrupted
    (not left `running` until its lease runs out) and continues to the same end."""

    class SlowAtTheEnd:
        def __init__(self) -> None:
            self.run_id = ""

        async def on_event(self, event: EngineEvent, /) -> None:
            if event.type == "run_started":
                self.run_id = event.run_id
            if event.type == "run_finished":
                await anyio.sleep(1)

    observer = SlowAtTheEnd()
    engine = Engine(store=store, observers=(observer,))
    engine.register_suggestor(Chain(steps=3))
    with anyio.move_on_after(0.3) as scope:
        await engine.run(inputs=INPUTS)
    assert scope.cancelled_caught
    record = await store.load(observer.run_id)
    assert (record.status, record.interruption) == (RunStatus.INTERRUPTED, "cancelled")
    again, _ = chain_engine(store, steps=3)
    result = await again.resume_run(observer.run_id)
    full, _ = chain_engine(None, steps=3)
    expected = await full.run(inputs=INPUTS)
    assert result.integrity.merkle_root == expected.integrity.merkle_root
