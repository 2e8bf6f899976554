"""Reconciliation: a bank statement and the invoices, matched by an exact assignment.

Run it with `python examples/reconciliation.py`. A cost matrix prices every plausible pair,
SciPy's exact assignment picks the matching of least total cost (leaving a line unmatched has
a price too), and the matches and the leftovers on either side are reported. The run
converges in 4 cycles. The formation lives in `converge_suggestors.demos.reconciliation`.
"""

from __future__ import annotations

import anyio

from converge import ContextKey, ConvergeResult
from converge_suggestors import AssignmentPlan
from converge_suggestors.demos.reconciliation import LEFTOVERS, MATCHES, formation


def show(result: ConvergeResult) -> None:
    """Stop reason, each cycle, the matches, the leftovers and the total cost."""
    print(f"stop reason : {result.stop_reason.value} ({result.detail})")
    print(f"cycles      : {result.cycles}")
    for cycle in result.trace.cycles:
        ran = ", ".join(cycle.eligible) or "nothing eligible, fixed point"
        print(f"  cycle {cycle.cycle}: {ran} -> {len(cycle.promoted)} fact(s)")
    context = result.context
    print(f"matches ({context.count(MATCHES)}):")
    for match in context.get(MATCHES):
        print(f"  {match.content}")
    print(f"leftovers ({context.count(LEFTOVERS)}):")
    for leftover in context.get(LEFTOVERS):
        print(f"  {leftover.content}")
    plan = context.find(ContextKey.STRATEGIES, "assignment:ledger-costs")
    if plan is not None:
        print(f"total cost  : {plan.payload_as(AssignmentPlan).total_cost:.3f}")
    print(f"merkle root : {result.integrity.merkle_root}")


def main() -> ConvergeResult:
    """Run the formation and print what happened."""
    result = anyio.run(formation.run)
    show(result)
    return result


if __name__ == "__main__":
    main()
