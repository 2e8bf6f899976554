"""Hello, convergence: a seed, a reaction to it, and the result.

Run it with `python examples/hello_convergence.py` (or `make demo`). The formation lives in
`converge_suggestors.demos.hello_convergence`, so `converge demo hello_convergence` runs it too.
"""

from __future__ import annotations

import anyio

from converge import ConvergeResult, verify
from converge_suggestors.demos.hello_convergence import formation


def describe(result: ConvergeResult) -> str:
    """A readable summary: how the run ended, each cycle, each fact, the proof."""
    lines = [
        f"stop reason : {result.stop_reason.value} ({result.detail})",
        f"cycles      : {result.cycles}",
    ]
    for cycle in result.trace.cycles:
        if not cycle.eligible:
            lines.append(f"  cycle {cycle.cycle}: nothing eligible, fixed point")
            continue
        promoted = ", ".join(cycle.promoted) or "nothing"
        lines.append(f"  cycle {cycle.cycle}: ran {', '.join(cycle.eligible)}; promoted {promoted}")
    lines.append("facts:")
    for fact in result.context.facts():
        evidence = f" <- {', '.join(fact.evidence)}" if fact.evidence else ""
        lines.append(
            f"  {fact.ref}: {fact.content!r} by {fact.provenance} "
            f"(cycle {fact.promotion.cycle}, clock {fact.promotion.clock}){evidence}"
        )
    lines.append(f"merkle root : {result.integrity.merkle_root}")
    lines.append(f"verified    : {verify(result.context, result.integrity)}")
    return "\n".join(lines)


def main() -> ConvergeResult:
    """Run the formation and print what happened."""
    result = anyio.run(formation.run)
    print(describe(result))
    return result


if __name__ == "__main__":
    main()
