"""Replay: re-merge a recorded run without calling a suggestor, and check its root."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ._exceptions import ReplayError
from ._invariant import check_invariants
from ._registry import Registration
from ._result import Conflict, ConvergeResult
from ._stop import StopReason
from ._trace import CycleTrace, RunTrace

if TYPE_CHECKING:
    from ._run import RunLoop

__all__ = ["replay_trace"]

_BUDGET_STOPS = frozenset(
    {
        StopReason.CYCLE_BUDGET_EXHAUSTED,
        StopReason.FACT_BUDGET_EXHAUSTED,
        StopReason.TOKEN_BUDGET_EXHAUSTED,
        StopReason.TIME_BUDGET_EXHAUSTED,
    }
)


async def replay_trace(loop: RunLoop, trace: RunTrace) -> ConvergeResult:
    """Re-merge a trace's recorded effects and decisions through `loop`; call no suggestor."""
    state = loop.state
    if state.initial_root != trace.initial_root:
        raise ReplayError(
            f"trace of run {trace.run_id} starts from root {trace.initial_root}, but the "
            f"given context has root {state.initial_root}"
        )
    loop.started_event()
    result = loop.merge_inputs()
    if result is None:
        result = await _replay_cycles(loop, trace)
    await loop.events.flush()
    if trace.final_root is not None and result.integrity.merkle_root != trace.final_root:
        raise ReplayError(
            f"replaying run {trace.run_id} gives root {result.integrity.merkle_root}, not "
            f"the recorded {trace.final_root}: the trace or the registrations differ"
        )
    return result


def _replayed_registrations(
    registrations: Sequence[Registration], cycle: int, recorded: CycleTrace
) -> list[Registration]:
    eligible: list[Registration] = []
    for execution in recorded.executions:
        sid = execution.suggestor_id
        reg = registrations[sid] if 0 <= sid < len(registrations) else None
        if reg is None or reg.name != execution.suggestor:
            raise ReplayError(
                f"cycle {cycle}: the trace ran {execution.suggestor!r} as id {sid}, "
                "which this engine does not have"
            )
        if execution.phase == "execute":
            eligible.append(reg)
    return eligible


async def _replay_cycles(loop: RunLoop, trace: RunTrace) -> ConvergeResult:
    state = loop.state
    registrations = loop.view.registrations
    decisions = {decision.gate_id: decision for decision in trace.decisions}
    recorded_reason = trace.stop_reason or StopReason.CONVERGED
    last = len(trace.cycles) - 1
    for index, recorded in enumerate(trace.cycles):
        state.cycle = cycle = recorded.cycle
        dirty = frozenset(recorded.dirty)
        loop.events.cycle_started(cycle, dirty)
        await loop.events.flush()
        eligible = _replayed_registrations(registrations, cycle, recorded)
        merger = loop.merger(state.snapshot, cycle)
        conflict: Conflict | None = None
        for execution in recorded.executions:
            if execution.outcome != "ok":
                state.tokens += execution.tokens
                continue
            effect = execution.effect
            if effect is None:
                raise ReplayError(
                    f"cycle {cycle}: no recorded effect for {execution.suggestor!r}; "
                    "record the run with Engine(record_effects=True)"
                )
            state.tokens += effect.tokens
            if not recorded.merged or conflict is not None:
                continue
            reg = registrations[execution.suggestor_id]
            conflict = merger.merge(reg.name, int(reg.id), reg.writes, effect.proposals)
        if not recorded.merged:
            loop.record(cycle, dirty, eligible, recorded.executions, None, merged=False)
            return loop.finish(recorded_reason, trace.detail)
        state.snapshot = merger.snapshot()
        state.rejections.extend(merger.rejections)
        if conflict is not None:
            loop.record(cycle, dirty, eligible, recorded.executions, merger)
            return loop.finish(StopReason.CONFLICT, conflict.describe(), conflict)
        budget_stop = index == last and recorded_reason in _BUDGET_STOPS
        if merger.held and not budget_stop:
            loop.record(cycle, dirty, eligible, recorded.executions, merger)
            state.dirty = merger.added_keys
            chosen = [decisions.get(request.gate_id) for request in merger.held]
            if any(decision is None for decision in chosen):
                return loop.pause(merger.held)
            loop.apply_decisions(merger.held, [d for d in chosen if d is not None])
            continue
        semantic = (
            check_invariants(loop.view.semantic, state.snapshot, cycle)
            if merger.promoted and not budget_stop
            else ()
        )
        loop.record(cycle, dirty, eligible, recorded.executions, merger, semantic)
        state.dirty = merger.added_keys
        if budget_stop:
            return loop.finish(recorded_reason, trace.detail)
    if recorded_reason in (StopReason.CONVERGED, StopReason.INVARIANT_VIOLATED):
        return loop.fixed_point()
    return loop.finish(recorded_reason, trace.detail)
