"""The `ConvergeResult` a run stops with, built from its state once its stop reason is known.

When the run's facts leave the process (a saved or signed run, a checkpoint), each is checked
against the leaf the context kept at its promotion first, and a changed one is the run's end
instead. The trace is built when it is first read (`_state.run_trace`), and the integrity
proof comes with the run's last event.
"""

from __future__ import annotations

from functools import partial
from typing import TypedDict

from .._core._checkpoint import Checkpoint
from .._core._hitl import GateRequest
from .._core._result import Conflict, ConvergeResult
from .._core._stop import StopReason
from ._run_events import RunEvents
from ._state import RunState, run_trace

__all__ = ["FactChecks", "run_result"]


class FactChecks(TypedDict):
    """What a run's end does with its facts (`RunLoop`'s keyword arguments of that name)."""

    check_facts: bool
    keep_facts: bool


def run_result(
    state: RunState,
    events: RunEvents,
    reason: StopReason,
    detail: str,
    conflict: Conflict | None,
    pending: tuple[GateRequest, ...],
    checkpoint: Checkpoint | None,
    *,
    check_facts: bool,
    keep_facts: bool,
) -> ConvergeResult:
    """The result of a run that stops at `state` for `reason`, its end told to `events`;
    with `check_facts` (or a checkpoint), every fact checked against its kept leaf first,
    and with `keep_facts` the records that check made kept in the result."""
    # a fact changed below the API since its promotion: checked when the facts leave the
    # process (a saved or signed run, a checkpoint), not for a run that stays in memory
    if (check_facts or checkpoint is not None) and (ended := state.changed_facts(keep=keep_facts)):
        (reason, detail), conflict, pending, checkpoint = ended, None, (), None
    fields: dict[str, object] = {
        "run_id": state.run_id,
        "inputs": state.inputs,
        "initial_root": "",  # these three are filled in when the trace is built
        "cycles": (),
        "decisions": tuple(state.decisions),
        "input_violations": state.input_violations,
        "stop_reason": reason,
        "detail": detail,
        "final_root": "",
        "continuations": state.continuations,
    }
    ends = (state.origin, state.snapshot)
    trace = partial(run_trace, fields, state.cycles, len(state.cycles), ends)
    proof = events.run_finished(state.cycle, reason, detail, state.snapshot, state.tokens)
    return ConvergeResult(
        stop_reason=reason,
        detail=detail,
        cycles=state.cycle,
        context=state.snapshot,
        _integrity=proof,  # else built on the first read of `integrity`
        _trace=trace,
        rejections=tuple(state.rejections),
        tokens=state.tokens,
        run_id=state.run_id,
        conflict=conflict,
        pending=pending,
        checkpoint=checkpoint,
        lineage=state.lineage,
        _facts=state.facts,
    )
