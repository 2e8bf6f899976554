"""Fixed point or budget: the same formation with a generous and with a tight cycle budget.

Run it with `python examples/fixed_point_vs_budget.py`. With `max_cycles=20` the refinement
settles and the run converges in 7 cycles; with `max_cycles=4` it stops with
`cycle_budget_exhausted`, and the partial context keeps the four estimates made so far. The
formation lives in `converge_suggestors.demos.fixed_point_vs_budget`.
"""

from __future__ import annotations

import anyio

from converge import ConvergeResult
from converge_suggestors.demos.fixed_point_vs_budget import formation, tight_formation


def show(title: str, result: ConvergeResult) -> None:
    """Stop reason, cycles and the facts, by key."""
    print(f"{title}: {result.stop_reason.value} ({result.detail}) after {result.cycles} cycles")
    for key in result.context.keys():
        print(f"  {key.value}:")
        for fact in result.context.get(key):
            print(f"    {fact.content}")
    print(f"  pending: {len(result.pending)}, merkle root {result.integrity.merkle_root[:16]}")


async def main() -> tuple[ConvergeResult, ConvergeResult]:
    """Run both variants and print what each ended with."""
    generous = await formation.run()
    show(f"max_cycles={formation.budget.max_cycles}", generous)
    tight = await tight_formation.run()
    show(f"max_cycles={tight_formation.budget.max_cycles}", tight)
    return generous, tight


if __name__ == "__main__":
    anyio.run(main)
