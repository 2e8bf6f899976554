"""Loan application: parallel checks, a model's decision validated, and a human gate.

Run it with `python examples/loan_application.py`. The run pauses for a loan officer; the
script approves the held decision and resumes, and the run converges. The formation lives in
`converge_suggestors.demos.loan_application`.
"""

from __future__ import annotations

import anyio

from converge import ConvergeResult, GateDecision
from converge_suggestors.demos.loan_application import formation


def show(result: ConvergeResult) -> None:
    """Stop reason, cycles, facts by key, pending gates."""
    print(f"stop reason : {result.stop_reason.value} ({result.detail})")
    print(f"cycles      : {result.cycles}, tokens {result.tokens}")
    for key in result.context.keys():
        print(f"{key.value}:")
        for fact in result.context.get(key):
            print(f"  {fact.id}: {fact.content} [{fact.provenance}, {fact.confidence}]")
    for request in result.pending:
        print(f"pending     : {request.gate_id} from {request.suggestor}: {request.summary}")
    print(f"merkle root : {result.integrity.merkle_root}")


async def main() -> ConvergeResult:
    """Run until the gate, approve it as a loan officer, resume until the fixed point."""
    engine = formation.engine()
    paused = await engine.run(inputs=formation.inputs)
    show(paused)
    assert paused.checkpoint is not None
    decisions = [GateDecision.approve(gate.gate_id, by="loan-officer") for gate in paused.pending]
    print("\nthe loan officer approves; resuming\n")
    resumed = await engine.resume(paused.checkpoint, decisions)
    show(resumed)
    return resumed


if __name__ == "__main__":
    anyio.run(main)
