"""A formation file for the durability tests: a chain of cycles, one step per cycle.

`Step` adds hypothesis `step-N` (N = how many there are) each cycle until there are
`CONVERGE_TEST_STEPS` (default 20), sleeping `CONVERGE_TEST_SLEEP` seconds (default 0.05)
in each call, so a test can kill or cancel the run between two cycles.
"""

from __future__ import annotations

import os

import anyio

from converge import AgentEffect, Budget, Context, ContextKey, Formation, ProposedFact

STEPS = int(os.environ.get("CONVERGE_TEST_STEPS", "20"))
SLEEP = float(os.environ.get("CONVERGE_TEST_SLEEP", "0.05"))


class Step:
    """Adds the next hypothesis of the chain, each with two facts of evidence."""

    name = "step"
    dependencies = (ContextKey.SEEDS, ContextKey.HYPOTHESES)

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.count(ContextKey.HYPOTHESES) < STEPS

    async def execute(self, ctx: Context, /) -> AgentEffect:
        await anyio.sleep(SLEEP)
        n = ctx.count(ContextKey.HYPOTHESES)
        return AgentEffect.with_proposals(
            [
                ProposedFact(
                    key=ContextKey.HYPOTHESES,
                    id=f"step-{n}",
                    content=f"step {n} of the chain",
                    payload={"n": n, "square": n * n},
                    provenance="step",
                    evidence=("seeds/start",),
                )
            ]
        )


formation = Formation(
    name="chain",
    description="one hypothesis per cycle",
    suggestors=(Step(),),
    inputs=(
        ProposedFact(
            key=ContextKey.SEEDS, id="start", content="start the chain", provenance="test"
        ),
    ),
    budget=Budget(max_cycles=STEPS + 5),
)
