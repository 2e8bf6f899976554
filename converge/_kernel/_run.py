"""One run of the loop: inputs at cycle 0, then one cycle at a time until a stop reason.

`Engine` builds a `RunLoop` per run, resume or replay from its configuration and a frozen view
of its registrations, so registering more suggestors never disturbs a run in progress. There
is one cycle: `RunLoop._cycles` awaits what it needs, and `RunLoop._merged` merges what
came back without awaiting. An `EffectSource` feeds it, live (`_live.LiveEffects`) or
recorded (`_replay.RecordedEffects`). Only this module changes a `RunState` (and `_decisions`,
which merges a paused run's human decisions into it); `_pause` turns one into a checkpoint
and back, `_outcome` into the result the run stops with. Everything the loop has to say goes
through `RunEvents`.
"""

from __future__ import annotations

from collections.abc import Sequence
from time import perf_counter
from typing import Protocol, final

import anyio
import anyio.lowlevel

from .._core._budget import Stopwatch
from .._core._checkpoint import Checkpoint
from .._core._collector import LongLived, settle
from .._core._context import ContextSnapshot
from .._core._fact import Fact, GateKind
from .._core._hitl import GateDecision, GateRequest
from .._core._invariant import Violation, check_invariants
from .._core._key import AnyKey
from .._core._result import Conflict, ConvergeResult
from .._core._stop import StopReason
from .._core._trace import Rejection
from ._abort import SuggestorAbort
from ._admit import storable_inputs
from ._calls import records
from ._config import RunConfig
from ._decisions import apply_decisions
from ._gate import Gate
from ._live import LiveEffects
from ._log import EventLog
from ._merge import ConflictMode, Merger
from ._outcome import run_result
from ._pause import checkpoint_of
from ._registry import RegistryView
from ._run_events import RunEvents
from ._source import Batch, EffectSource
from ._state import RunState
from ._watch import CancelWatch

__all__ = ["INPUT_SUGGESTOR_ID", "RunLoop", "Saver"]

INPUT_SUGGESTOR_ID = -1
"""The `suggestor_id` of facts the inputs became (the pseudo-suggestor `"input"`)."""


class Saver(Protocol):
    """What saves a run as it goes: the loop calls it before every cycle and when its caller
    cancels it (`converge.stores._durable.CycleSaver`, which the engine passes)."""

    async def saved(self, state: RunState, elapsed: float, /) -> None:
        """Save the run as it stands after its last merged cycle."""
        ...

    async def interrupted(self, state: RunState, elapsed: float, /) -> bool:
        """Mark the run interrupted at its last merged cycle; whether that was saved."""
        ...


@final
class RunLoop:
    """Drives one run (or one resumed stretch of it) to a stop reason."""

    __slots__ = (
        "_check_facts",
        "_config",
        "_cycle_start",
        "_keep_facts",
        "_kept",
        "_saver",
        "_state",
        "_stopwatch",
        "_view",
        "_watch",
        "events",
    )

    def __init__(
        self,
        config: RunConfig,
        view: RegistryView,
        state: RunState,
        saver: Saver | None = None,
        *,
        check_facts: bool = False,
        keep_facts: bool = False,
    ) -> None:
        self._config = config
        self._check_facts = check_facts
        """Check every fact against its kept leaf when the run ends (`RunState.changed_facts`):
        for a run whose facts leave the process, saved or signed."""
        self._keep_facts = keep_facts
        """Keep the records that check made, in the result: its record is saved whole."""
        self._view = view
        self._state = state
        self._saver = saver
        if saver is not None:
            state.keep_seals()
        self._stopwatch = Stopwatch(state.elapsed_before)
        self._cycle_start = 0.0
        """The cycle's start, a `perf_counter()` reading (`Stopwatch.at` tells its times)."""
        self._kept: Merger | None = None  # the engine's, while the human-rejected stay
        self._watch = CancelWatch()
        """What tells a suggestor's stray cancellation from a native one of the run."""
        log = EventLog(run_id=state.run_id)
        self.events = RunEvents(state.run_id, config.observers, log)

    # -- entry points ----------------------------------------------------------------------------

    async def start(
        self, source: EffectSource | None = None, held: Sequence[GateRequest] = ()
    ) -> ConvergeResult:
        """Merge the inputs at cycle 0 (a fork's at its cycle), then run cycles from `source`
        (live by default); with `held` (a fork of a paused run at its paused cycle), pause
        on those gates again first."""
        source = source or LiveEffects(
            self._config, self._view, self._stopwatch, self.events, self._watch
        )
        self._started()
        result = self._merge_inputs(source)
        if result is None and held:
            result = self._pause(list(held))
        return await self._drive(source, result)

    async def resume(
        self, pending: Sequence[GateRequest], decisions: Sequence[GateDecision]
    ) -> ConvergeResult:
        """Apply a paused run's decisions (an interrupted run has none); continue it live."""
        self._started()
        if pending:
            self._apply_decisions(pending, decisions)
        state = self._state
        live = LiveEffects(
            self._config, self._view, self._stopwatch, self.events, self._watch, state.cycles
        )
        return await self._drive(live, None)

    # -- the cycle -------------------------------------------------------------------------------

    async def _drive(self, source: EffectSource, result: ConvergeResult | None) -> ConvergeResult:
        """Run cycles to a stop reason (unless `result` is one already), then flush the events.

        With a saver, the run is saved before each cycle, and a cancelled run is kept as
        interrupted at its last merged cycle before the cancellation goes on; so is a run a
        suggestor's `BaseException` stopped (`SuggestorAbort`), which then says where.
        """
        saver = self._saver
        try:
            if result is None:
                result = await self._watched(source)
            await self.events.flush()
        except anyio.get_cancelled_exc_class():
            if saver is not None:
                await saver.interrupted(self._state, self._stopwatch.elapsed())
            raise
        except SuggestorAbort as abort:
            state = self._state
            saved = None
            if saver is not None:
                saved = await saver.interrupted(state, self._stopwatch.elapsed())
            abort.stop(state.cycle, state.run_id, saved)
            raise
        return result

    async def _watched(self, source: EffectSource) -> ConvergeResult:
        """`_cycles`, its cancellations watched, each merged cycle's leftovers kept out of the
        cyclic collector's walks until the run ends (`_collector.LongLived`)."""
        with LongLived():
            return await self._watch.watching(self._cycles(source))

    async def _cycles(self, source: EffectSource) -> ConvergeResult:
        """Run cycles until one stops the run. What a cycle awaits (the save, the events,
        the suggestors' calls) is here; merging what they returned is `_merged`, which
        never awaits: one coroutine a cycle, not one for the loop and one for the cycle."""
        state = self._state
        saver = self._saver
        events = self.events
        while True:
            if saver is not None:
                await saver.saved(state, self._stopwatch.elapsed())
                # The save is shielded: a cancellation that came meanwhile is raised here,
                # even if no suggestor of the next cycle ever awaits.
                await anyio.lowlevel.checkpoint_if_cancelled()
            if events.pending:
                await events.flush()
            state.cycle = cycle = state.cycle + 1
            self._cycle_start = perf_counter()
            end = source.end(cycle)
            if end is not None:
                state.cycle = end.cycle
                if end.reason is None:
                    return self._fixed_point()
                return self._finish(end.reason, end.detail)
            if events.debug:
                events.cycle_started(cycle, state.dirty)
                await events.flush()
            batch = await source.produce(cycle, state.dirty, state.snapshot)
            result = self._merged(source, cycle, batch)
            if result is not None:
                return result
            settle()  # what the cycle left is what the run keeps: out of the collector's walks

    def _merged(self, source: EffectSource, cycle: int, batch: Batch) -> ConvergeResult | None:
        """Merge and record one cycle's `batch`, produced against the state's snapshot for
        its dirty keys; the result when the run stops here, `None` to go on."""
        state = self._state
        dirty, snapshot = state.dirty, state.snapshot
        if not batch.eligible:
            self._record(cycle, dirty, batch, None)
            return self._quiet(source, cycle)
        state.tokens += batch.tokens
        if batch.cancelled is not None:
            self._record(cycle, dirty, batch, None, merged=False)
            return self._finish(*batch.cancelled)
        merger = self._kept  # the engine's, while the human-rejected slots stay the same
        if merger is not None and merger.gate.refused is state.human_rejected:
            merger.begin(snapshot, cycle)
        else:
            merger = self._merger(snapshot, cycle)
        conflict: Conflict | None = None
        for reg, effect in batch.effects:
            conflict = merger.merge_stamped(reg.stamp, reg.writes, effect.proposals)
            if effect.refused:
                merger.refuse(reg.name, effect.refused)
            if conflict is not None:
                break
        state.snapshot = merger.snapshot()
        if merger.rejections:
            state.rejections.extend(merger.rejections)
        if conflict is not None:
            self._record(cycle, dirty, batch, merger)
            return self._finish(StopReason.CONFLICT, conflict.describe(), conflict)
        stop = source.budget_stop(len(state.snapshot), state.tokens)
        if stop is not None:
            self._record(cycle, dirty, batch, merger)
            return self._finish(*stop)
        if merger.held:
            state.dirty = merger.added_keys
            self._record(cycle, dirty, batch, merger)
            decisions = source.decisions(merger.held)
            if decisions is None:
                return self._pause(merger.held)
            self._apply_decisions(merger.held, decisions)
            return None
        if not merger.promoted:
            self._record(cycle, dirty, batch, merger)
            return self._quiet(source, cycle)
        checks = self._view.semantic
        semantic = check_invariants(checks, state.snapshot, cycle) if checks else ()
        self._record(cycle, dirty, batch, merger, semantic)
        state.dirty = merger.added_keys
        return None

    def _quiet(self, source: EffectSource, cycle: int) -> ConvergeResult | None:
        """A cycle that changed nothing: the fixed point, unless a retry is still to come."""
        if source.retrying(cycle):
            self._state.dirty = frozenset()
            return None
        return self._fixed_point()

    # -- phases ------------------------------------------------------------------------------------

    def _started(self) -> None:
        state = self._state
        suggestors = len(self._view.registrations)
        self.events.run_started(state.cycle, suggestors, len(state.inputs), len(state.snapshot))

    def _merge_inputs(self, source: EffectSource) -> ConvergeResult | None:
        """Merge the inputs at the run's first cycle: 0, or a fork's cycle (whose keys that
        were to wake up next in its parent, `state.dirty`, stay awake)."""
        state = self._state
        cycle = state.cycle
        merger = self._merger(state.snapshot, cycle, gate="input", hitl=False)
        conflict = merger.merge("input", INPUT_SUGGESTOR_ID, None, state.inputs)
        # what the record keeps of an input that cannot be stored is its rejection
        state.inputs = storable_inputs(state.inputs)
        state.snapshot = merger.snapshot()
        state.rejections.extend(merger.rejections)
        state.input_violations = tuple(merger.violations)
        self.events.merged(cycle, merger.promoted, merger.rejections, (), merger.violations)
        self.events.invalid(cycle, merger.rejections)
        if conflict is not None:
            return self._finish(StopReason.CONFLICT, conflict.describe(), conflict)
        stop = source.budget_stop(len(state.snapshot), state.tokens)
        if stop is not None:
            return self._finish(*stop)
        if state.lineage is not None:
            state.dirty = state.dirty | merger.added_keys
        else:
            state.dirty = merger.added_keys or frozenset(state.snapshot.keys())
        return None

    def _apply_decisions(
        self, pending: Sequence[GateRequest], decisions: Sequence[GateDecision]
    ) -> None:
        """Merge the humans' decisions as the paused cycle's last effects (`_decisions`)."""
        state = self._state
        approvals = self._merger(
            state.snapshot, state.cycle, gate="human", hitl=False, mode="reject"
        )
        apply_decisions(state, approvals, self.events, pending, decisions)

    def _merger(
        self,
        snapshot: ContextSnapshot,
        cycle: int,
        *,
        gate: GateKind = "engine",
        hitl: bool = True,
        mode: ConflictMode | None = None,
    ) -> Merger:
        """A new merger: the engine's is kept for the next cycles, which begin it again
        while the human-rejected slots stay the same (`_merged`); the inputs and the humans'
        decisions get their own."""
        config = self._config
        merger = Merger(
            snapshot,
            cycle,
            Gate(
                config.policy,
                kind=gate,
                refused=self._state.human_rejected,
                stamps=self._view.stamps,
            ),
            config.on_conflict if mode is None else mode,
            self._view.structural,
            config.hitl if hitl else None,
            config.clock,
            self._state.texts,
        )
        if gate == "engine":
            self._kept = merger
        return merger

    def _fixed_point(self) -> ConvergeResult:
        """Acceptance and semantic invariants decide between converged and violated."""
        state = self._state
        view = self._view
        checks = (*view.semantic, *view.acceptance)
        violations = check_invariants(checks, state.snapshot, state.cycle) if checks else []
        if not violations:
            return self._finish(StopReason.CONVERGED, "fixed point reached")
        if state.cycles and state.cycles[-1].cycle == state.cycle:
            last = state.cycles[-1]
            known = set(last.violations)
            fresh = tuple(v for v in violations if v not in known)
            state.cycles.replace_last(
                last.model_copy(update={"violations": last.violations + fresh})
            )
        self.events.merged(state.cycle, violations=violations)
        detail = "; ".join(f"{v.invariant}: {v.reason}" for v in violations)
        return self._finish(StopReason.INVARIANT_VIOLATED, detail)

    def _pause(self, held: list[GateRequest]) -> ConvergeResult:
        checkpoint = checkpoint_of(
            self._state,
            held,
            fingerprint=self._view.fingerprint,
            elapsed=self._stopwatch.elapsed(),
            key=self._config.signing_key,
        )
        gates = ", ".join(request.gate_id for request in held)
        return self._finish(
            StopReason.AWAITING_HUMAN,
            f"{len(held)} proposal(s) awaiting a human: {gates}",
            pending=tuple(held),
            checkpoint=checkpoint,
        )

    # -- records -----------------------------------------------------------------------------------

    def _record(
        self,
        cycle: int,
        dirty: frozenset[AnyKey],
        batch: Batch,
        merger: Merger | None,
        semantic: Sequence[Violation] = (),
        *,
        merged: bool = True,
    ) -> None:
        """Narrate the cycle to whoever listens, and log it for the trace (built when read)."""
        if merger is None:
            promoted: Sequence[Fact] = ()
            rejected: Sequence[Rejection] = ()
            held: Sequence[GateRequest] = ()
            violations: tuple[Violation, ...] = tuple(semantic)
        else:  # the merger's own lists: it is done with them
            promoted = merger.promoted
            rejected = merger.rejections
            held = merger.held
            violations = (*merger.violations, *semantic)
        events = self.events
        # above debug level, only failures, holds and violations are worth narrating
        if events.debug or (
            events.warn and (batch.failed or violations or (merger is not None and merger.held))
        ):
            batch.calls = built = records(batch.calls)  # built once: the trace keeps these
            events.executions(cycle, built)
            events.merged(cycle, promoted, rejected, held, violations)
            facts = len(self._state.snapshot)
            events.cycle_finished(
                cycle, len(batch.eligible), promoted, len(rejected), len(held), facts
            )
        if rejected and events.warn:
            events.invalid(cycle, rejected)
        self._state.cycles.record(
            cycle,
            dirty,
            batch.eligible,
            batch.calls,
            promoted,
            rejected,
            held,
            violations,
            merged,
            self._stopwatch,
            self._cycle_start,
        )

    def _finish(
        self,
        reason: StopReason,
        detail: str,
        conflict: Conflict | None = None,
        *,
        pending: tuple[GateRequest, ...] = (),
        checkpoint: Checkpoint | None = None,
    ) -> ConvergeResult:
        """The result the run stops with (`_outcome.run_result`)."""
        return run_result(
            self._state,
            self.events,
            reason,
            detail,
            conflict,
            pending,
            checkpoint,
            check_facts=self._check_facts,
            keep_facts=self._keep_facts,
        )
