"""W7's CPU-bound formation: one suggestor doing about 30 ms of pure-Python work per run.

`execute` runs a fixed integer loop (`ITERATIONS` steps of a linear congruential generator,
no I/O, no awaits) and proposes its result once; the next cycle finds nothing to do. The
work holds the GIL throughout, so only separate processes run two of these at once.
`run_batch` imports this file by path in every worker (the module-level `formation`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, final

from converge import AgentEffect, Budget, Context, ContextKey, Formation, ProposedFact

__all__ = ["ITERATIONS", "crunch", "formation", "inputs"]

ITERATIONS: Final = 300_000
"""Loop steps per run: about 30 ms of CPython on the reference machine."""


def crunch(seed: int, iterations: int = ITERATIONS) -> int:
    """A deterministic pure-Python loop: `iterations` LCG steps from `seed`."""
    value = seed
    for _ in range(iterations):
        value = (value * 1_103_515_245 + 12_345) & 0x7FFFFFFF
    return value


@final
class Cruncher:
    """Proposes one `EVALUATIONS` fact, computed by `crunch` from the run's seed."""

    __slots__ = ()

    @property
    def name(self) -> str:
        """`cruncher`."""
        return "cruncher"

    @property
    def dependencies(self) -> Sequence[ContextKey]:
        """`SEEDS`: the run's input."""
        return (ContextKey.SEEDS,)

    def accepts(self, ctx: Context, /) -> bool:
        """Until it has proposed its result."""
        return not ctx.has(ContextKey.EVALUATIONS)

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Run the loop and propose its result."""
        seed = len(ctx.get(ContextKey.SEEDS)[0].content)
        return AgentEffect.with_proposals(
            (
                ProposedFact(
                    key=ContextKey.EVALUATIONS,
                    id="result",
                    content=f"crunched {crunch(seed)}",
                    provenance="cruncher",
                ),
            )
        )


def inputs(index: int) -> tuple[ProposedFact, ...]:
    """The input of run `index`: one `SEEDS` fact."""
    return (
        ProposedFact(
            key=ContextKey.SEEDS, id="task", content=f"task number {index}", provenance="bench"
        ),
    )


formation: Final = Formation(
    name="w7-cpu-bound",
    description="One suggestor doing about 30 ms of pure-Python work per run.",
    suggestors=(Cruncher(),),
    budget=Budget(max_cycles=20),
)
