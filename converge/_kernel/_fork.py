"""A stored run's context at the end of any cycle, rebuilt from its record, and the state
of a fork that continues from there.

The context at the end of cycle `k` is every stored fact promoted in a cycle up to `k`, in
the record's order (key, then insertion). Facts are never removed and each merge ticks the
Lamport clock once per fact, so those facts are exactly the ones with a clock up to the
last of them: a fork keeps them with their promotion records unchanged, and every fact it
promotes itself gets a later clock. That is what `lineage_problem` checks a fork against.
No suggestor runs: each kept fact is restored through the verifying restore, and the
stored digests of all the parent's facts must hash to its recorded root first. What the
fork changes there (retractions, inputs) is `_fork_changes`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import final

from .._core._canonical import EMPTY_ROOT, merkle_root
from .._core._checkpoint import FactRecord, ForkKind, Lineage, restore_fact, restore_snapshot
from .._core._context import ContextSnapshot
from .._core._exceptions import ForkError
from .._core._hitl import GateRequest
from .._core._key import AnyKey, key_rank
from .._core._proposal import ProposedFact
from .._core._record import RunRecord
from .._core._stop import RunStatus
from .._core._trace import RunTrace
from ._state import RunState

__all__ = [
    "ForkPoint",
    "fork_point",
    "fork_state",
    "lineage_problem",
    "records_root",
    "replay_start",
    "replay_trace",
]


@final
@dataclass(frozen=True, slots=True)
class ForkPoint:
    """A run's context at the end of one cycle, as its record has it."""

    run_id: str
    """The run."""
    cycle: int
    """The cycle."""
    facts: tuple[FactRecord, ...]
    """Its facts then, in key then insertion order."""
    root: str
    """Their Merkle root."""
    clock: int
    """The Lamport clock then (0 with no facts)."""
    tokens: int
    """The tokens spent by then."""
    dirty: frozenset[AnyKey]
    """The keys the next cycle wakes up for."""
    held: tuple[GateRequest, ...] = ()
    """The gates a paused run waits on, when the point is its paused cycle: a fork from
    there waits on them again."""


def records_root(facts: Iterable[FactRecord]) -> str:
    """The Merkle root of stored facts, from the digests they carry (nothing re-hashed)."""
    try:
        return merkle_root(bytes.fromhex(fact.digest) for fact in facts)
    except ValueError:
        return ""  # a digest that is not hex matches no root


def fork_point(record: RunRecord, cycle: int) -> ForkPoint:
    """The context of `record` at the end of `cycle` (0: the inputs only).

    The digests of all the record's facts must hash to its integrity proof's root first, so
    the kept facts are the run's; each kept fact is restored (and so re-hashed) by the
    caller.

    Raises:
        ForkError: The run is still running, started from a context of its own, has no
            such cycle, or its facts do not hash to its proof.
    """
    _check_forkable(record, cycle)
    kept, clock = _kept_facts(record, cycle)
    return ForkPoint(
        run_id=record.run_id,
        cycle=cycle,
        facts=kept,
        root=records_root(kept),
        clock=clock,
        tokens=_tokens_at(record, cycle),
        dirty=_dirty_at(record, cycle, kept),
        held=record.pending if cycle == record.cycles else (),
    )


def _check_forkable(record: RunRecord, cycle: int) -> None:
    """Refuse a running run, one started from its own context, a cycle it did not run, or
    facts that do not hash to its proof."""
    run_id = record.run_id
    if record.status is RunStatus.RUNNING:
        raise ForkError(f"run {run_id} is still running: fork it once it stops")
    if record.trace.initial_root != EMPTY_ROOT and record.lineage is None:
        raise ForkError(
            f"run {run_id} started from a context of its own (root "
            f"{record.trace.initial_root[:12]}), whose facts' cycles are not its own; only "
            "a run started from the empty context (or a fork) can be forked"
        )
    last = record.cycles
    if isinstance(cycle, bool) or not isinstance(cycle, int):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ForkError(f"the fork cycle must be a whole number, got {cycle!r}")
    if not 0 <= cycle <= last:
        raise ForkError(
            f"run {run_id} has no cycle {cycle}: it ran cycles 0 to {last} "
            f"({record.outcome}); fork at one of them"
        )
    facts = record.facts
    if len(facts) != record.integrity.fact_count or (
        records_root(facts) != record.integrity.merkle_root
    ):
        raise ForkError(
            f"run {run_id}: its stored facts do not hash to its integrity proof's root "
            f"{record.integrity.merkle_root[:12]}; `converge verify {run_id}` says more"
        )


def _kept_facts(record: RunRecord, cycle: int) -> tuple[tuple[FactRecord, ...], int]:
    """The facts promoted up to `cycle` and the last clock among them; refuse a fact whose
    cycle or clock contradicts the trace."""
    run_id = record.run_id
    later = {
        ref for traced in record.trace.cycles if traced.cycle > cycle for ref in traced.promoted
    }
    kept: list[FactRecord] = []
    clock = 0
    for fact in record.facts:
        promotion = fact.promotion
        if promotion.cycle > cycle:
            continue
        if later and f"{fact.key}/{fact.id}" in later:
            raise ForkError(
                f"run {run_id}: fact {fact.key}/{fact.id} says cycle {promotion.cycle}, but "
                f"its trace promotes it after cycle {cycle}"
            )
        kept.append(fact)
        clock = max(clock, promotion.clock)
    for fact in record.facts:
        if fact.promotion.cycle > cycle and fact.promotion.clock <= clock:
            raise ForkError(
                f"run {run_id}: fact {fact.key}/{fact.id} of cycle {fact.promotion.cycle} has "
                f"clock {fact.promotion.clock}, not later than cycle {cycle}'s {clock}"
            )
    return tuple(kept), clock


def _tokens_at(record: RunRecord, cycle: int) -> int:
    lineage = record.lineage
    spent = lineage.parent_tokens if lineage is not None and cycle >= lineage.at_cycle else 0
    for traced in record.trace.cycles:
        if traced.cycle <= cycle:
            spent += sum(execution.tokens for execution in traced.executions)
    return spent


def _dirty_at(record: RunRecord, cycle: int, facts: Sequence[FactRecord]) -> frozenset[AnyKey]:
    """What the parent's cycle `cycle + 1` woke up for, as its trace says; else the keys
    that gained facts in `cycle` (every key with facts, when none did at cycle 0)."""
    for traced in record.trace.cycles:
        if traced.cycle == cycle + 1:
            return frozenset(traced.dirty)
    gained = frozenset(fact.key for fact in facts if fact.promotion.cycle == cycle)
    if gained or cycle > 0:
        return gained
    return frozenset(fact.key for fact in facts)


def fork_state(
    record: RunRecord,
    point: ForkPoint,
    *,
    inputs: tuple[ProposedFact, ...],
    retracted: tuple[FactRecord, ...],
    kind: ForkKind,
    run_id: str,
) -> RunState:
    """The state a fork of `record` at `point` starts from: the point's facts less
    `retracted`, restored and checked, at the point's cycle, clock and tokens, with
    `inputs` to merge first and its `Lineage`.

    Raises:
        ForkError: A kept fact does not match its digest, or the kept facts do not hash to
            the point's root.
    """
    removed = {(fact.key, fact.id) for fact in retracted}
    kept = tuple(fact for fact in point.facts if (fact.key, fact.id) not in removed)
    try:
        snapshot = restore_snapshot(
            kept, cycle=point.cycle, clock=point.clock, merkle_root=records_root(kept)
        )
        for fact in retracted:
            restore_fact(fact)  # the record of what was removed must be the parent's fact
    except ValueError as error:
        raise ForkError(f"run {record.run_id}, cycle {point.cycle}: {error}") from None
    lineage = Lineage(
        parent_run_id=record.run_id,
        at_cycle=point.cycle,
        parent_root=point.root,
        parent_clock=point.clock,
        parent_tokens=point.tokens,
        retracted=retracted,
        kind=kind,
    )
    dirty = point.dirty | frozenset(fact.key for fact in retracted)
    return RunState(
        run_id=run_id,
        snapshot=snapshot,
        origin=snapshot,
        inputs=inputs,
        cycle=point.cycle,
        dirty=dirty,
        tokens=point.tokens,
        lineage=lineage,
    )


def lineage_problem(record: RunRecord, parent: RunRecord | None) -> str | None:
    """Why `record`'s lineage does not hold; `None` when it does (or it is no fork).

    The fork's facts with a clock up to `parent_clock`, with the facts it retracted put
    back in their places, must hash to `parent_root`; and with `parent` (the parent's
    record, loaded from the store), the parent's context at `at_cycle` must hash to it too.
    """
    lineage = record.lineage
    if lineage is None:
        return None
    run_id = record.run_id
    if parent is not None and parent.run_id != lineage.parent_run_id:
        return f"run {run_id} names parent {lineage.parent_run_id}, not {parent.run_id}"
    before = [fact for fact in record.facts if fact.promotion.clock <= lineage.parent_clock]
    for fact in lineage.retracted:
        try:
            restore_fact(fact)
        except ValueError as error:
            return f"run {run_id}: a retracted fact does not verify: {error}"
    merged = sorted(
        (*before, *lineage.retracted),
        key=lambda fact: (key_rank(fact.key), fact.promotion.clock),
    )
    root = records_root(merged)
    if root != lineage.parent_root:
        return (
            f"run {run_id}: its context before its changes hashes to {root}, not to "
            f"{lineage.parent_root}, the root of run {lineage.parent_run_id} at cycle "
            f"{lineage.at_cycle} it names"
        )
    if parent is None:
        return None
    try:
        point = fork_point(parent, lineage.at_cycle)
    except ForkError as error:
        return f"run {run_id}: its parent does not have the cycle it forked at: {error}"
    if point.root != lineage.parent_root:
        return (
            f"run {run_id}: its parent {parent.run_id} has root {point.root} at cycle "
            f"{lineage.at_cycle}, not {lineage.parent_root}"
        )
    return None


def replay_trace(record: RunRecord, cycle: int) -> RunTrace:
    """`record`'s trace up to `cycle`, to replay: no stop reason, no final root."""
    cycles = tuple(traced for traced in record.trace.cycles if traced.cycle <= cycle)
    return record.trace.model_copy(
        update={"cycles": cycles, "stop_reason": None, "detail": "", "final_root": None}
    )


def replay_start(record: RunRecord) -> RunState:
    """The state a replay of `record` starts from: the empty context and its inputs, or for
    a fork its context after its changes, at its fork cycle.

    Raises:
        ForkError: A fork's kept facts do not verify.
    """
    trace = record.trace
    lineage = record.lineage
    if lineage is None:
        return RunState.start(ContextSnapshot.empty(), trace.inputs, run_id=record.run_id)
    kept = tuple(fact for fact in record.facts if fact.promotion.clock <= lineage.parent_clock)
    try:
        snapshot = restore_snapshot(
            kept,
            cycle=lineage.at_cycle,
            clock=lineage.parent_clock,
            merkle_root=trace.initial_root,
        )
    except ValueError as error:
        raise ForkError(f"run {record.run_id}: {error}") from None
    return RunState(
        run_id=record.run_id,
        snapshot=snapshot,
        origin=snapshot,
        inputs=trace.inputs,
        cycle=lineage.at_cycle,
        tokens=lineage.parent_tokens,
        lineage=lineage,
    )
