"""Adaptive gap loop: the work is discovered from the data, so the data sets the cycles.

Run it with `python examples/adaptive_gap_loop.py`. Starting from a survey of `app`, the loop
surveys the dependency graph level by level, opening and closing gaps, and converges in 12
cycles with no gap open. The formation lives in `converge_suggestors.demos.adaptive_gap_loop`.
"""

from __future__ import annotations

import anyio

from converge import ConvergeResult
from converge_suggestors.demos.adaptive_gap_loop import formation


def show(result: ConvergeResult) -> None:
    """Stop reason, what each cycle promoted, and the facts by key."""
    print(f"stop reason : {result.stop_reason.value} ({result.detail})")
    print(f"cycles      : {result.cycles}")
    for cycle in result.trace.cycles:
        promoted = ", ".join(ref.partition("/")[2] for ref in cycle.promoted)
        ran = ", ".join(cycle.eligible) or "nothing eligible, fixed point"
        print(f"  cycle {cycle.cycle:>2}: {ran}{' -> ' + promoted if promoted else ''}")
    for key in result.context.keys():
        ids = ", ".join(fact.id for fact in result.context.get(key))
        print(f"{key.value} ({result.context.count(key)}): {ids}")
    print(f"pending     : {len(result.pending)}")
    print(f"merkle root : {result.integrity.merkle_root}")


def main() -> ConvergeResult:
    """Run the formation and print what happened."""
    result = anyio.run(formation.run)
    show(result)
    return result


if __name__ == "__main__":
    main()
