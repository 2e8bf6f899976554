"""A paused run's human decisions, merged as the last effects of the cycle it paused in.

An approval promotes the held proposal through the human gate, with its approver; a
rejection promotes the `DIAGNOSTIC` note it leaves (`_verdict.rejection_note`) and keeps its
slot refused for the rest of the run. The paused cycle's trace gains what they promoted,
rejected and violated, as if the cycle had merged them itself.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._core._hitl import GateDecision, GateRequest
from ._merge import Merger
from ._run_events import RunEvents
from ._state import RunState
from ._verdict import rejection_note

__all__ = ["HUMAN_SUGGESTOR_ID", "apply_decisions"]

HUMAN_SUGGESTOR_ID = -2
"""The `suggestor_id` of facts written by human decisions (rejection diagnostics)."""


def apply_decisions(
    state: RunState,
    approvals: Merger,
    events: RunEvents,
    pending: Sequence[GateRequest],
    decisions: Sequence[GateDecision],
) -> None:
    """Merge the humans' decisions as the paused cycle's last effects, through `approvals`
    (the human gate's merger, its conflicts rejections), telling `events` of each."""
    cycle = state.cycle
    rejected = set(state.human_rejected)
    by_gate = {decision.gate_id: decision for decision in decisions}
    for request in pending:
        decision = by_gate[request.gate_id]
        state.decisions.append(decision)
        proposal = request.proposal
        if decision.approved:
            approvals.merge(
                request.suggestor,
                request.suggestor_id,
                None,
                (proposal,),
                approved_by=decision.by,
            )
        else:
            rejected.add((proposal.key, proposal.id))
            note = rejection_note(proposal, decision)
            approvals.merge("human", HUMAN_SUGGESTOR_ID, None, (note,), approved_by=decision.by)
        events.gate_decided(cycle, request.gate_id, decision.approved, decision.by)
    events.merged(cycle, approvals.promoted, approvals.rejections, (), approvals.violations)
    state.snapshot = approvals.snapshot()
    state.rejections.extend(approvals.rejections)
    state.human_rejected = frozenset(rejected)
    state.dirty = state.dirty | approvals.added_keys
    if state.cycles:
        last = state.cycles[-1]
        update = {
            "promoted": last.promoted + tuple(f.ref for f in approvals.promoted),
            "rejected": last.rejected + tuple(approvals.rejections),
            "violations": last.violations + tuple(approvals.violations),
        }
        state.cycles.replace_last(last.model_copy(update=update))
