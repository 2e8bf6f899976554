"""Vendor selection: parallel evaluators, a consensus, a Cedar policy gate and a human sign-off.

Run it with `python examples/vendor_selection.py` (`converge demo` runs the same formation).
Four evaluators score the bids in one cycle, the consensus recommends the best vendor, the
Cedar policy denies it (over the spend limit), the consensus recommends the next one, the
policy allows it, and the commitment waits for a human because the spend is high. The script
approves it as the procurement lead and resumes; the run converges. The formation lives in
`converge_suggestors.demos.vendor_selection`.
"""

from __future__ import annotations

import anyio

from converge import ContextKey, ConvergeResult, GateDecision
from converge_suggestors.demos.vendor_selection import (
    BIDS,
    COMMITMENTS,
    EVALUATIONS,
    RECOMMENDATIONS,
    formation,
)


def show(result: ConvergeResult) -> None:
    """Stop reason, each cycle, the scores, the recommendations and decisions, pending gates."""
    print(f"stop reason : {result.stop_reason.value} ({result.detail})")
    print(f"cycles      : {result.cycles}")
    for cycle in result.trace.cycles:
        ran = ", ".join(cycle.eligible) or "nothing eligible, fixed point"
        added = len(cycle.promoted)
        held = f", held {', '.join(cycle.held)}" if cycle.held else ""
        print(f"  cycle {cycle.cycle}: {ran} -> {added} fact(s){held}")
    context = result.context
    print("scores:")
    for bid in BIDS.read(context):
        scores = [
            f"{e.criterion} {e.score}" for e in EVALUATIONS.read(context) if e.vendor == bid.id
        ]
        print(f"  {bid.id:<7}: {', '.join(scores)}")
    for key in (RECOMMENDATIONS, COMMITMENTS, ContextKey.CONSTRAINTS, ContextKey.DIAGNOSTIC):
        for fact in context.get(key):
            approved = (
                f" [approved by {fact.promotion.approved_by}]" if fact.promotion.approved_by else ""
            )
            print(f"{fact.ref}: {fact.content}{approved}")
    for request in result.pending:
        print(f"pending     : {request.gate_id} from {request.suggestor}: {request.summary}")
    print(f"merkle root : {result.integrity.merkle_root}")


async def main() -> ConvergeResult:
    """Run until the commitment's gate, approve it, resume until the fixed point."""
    engine = formation.engine()
    paused = await engine.run(inputs=formation.inputs)
    show(paused)
    assert paused.checkpoint is not None
    decisions = [
        GateDecision.approve(gate.gate_id, by="procurement-lead") for gate in paused.pending
    ]
    print("\nthe procurement lead approves; resuming\n")
    resumed = await engine.resume(paused.checkpoint, decisions)
    show(resumed)
    return resumed


if __name__ == "__main__":
    anyio.run(main)
