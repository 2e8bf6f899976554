"""W8's formation: one seed, then 1,000 small facts a cycle.

It promotes facts until `CONVERGE_W8_FACTS` (default 100,000); `converge run` loads this
file by path.
"""

from __future__ import annotations

import os

from converge import AgentEffect, Budget, Context, ContextKey, Formation, ProposedFact
from converge_suggestors import SeedSuggestor

FACTS = int(os.environ.get("CONVERGE_W8_FACTS", "100000"))
"""How many facts the run promotes (besides its seed)."""
PER_CYCLE = 1_000


class Bulk:
    """`per_cycle` small facts a cycle, each citing the seed, until `limit`."""

    name = "bulk"
    dependencies = (ContextKey.SEEDS, ContextKey.HYPOTHESES)

    def __init__(self, limit: int = FACTS, per_cycle: int = PER_CYCLE) -> None:
        self.limit = limit
        self.per_cycle = per_cycle

    def accepts(self, ctx: Context, /) -> bool:
        """Until the run has all its facts."""
        return ctx.has(ContextKey.SEEDS) and ctx.count(ContextKey.HYPOTHESES) < self.limit

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """The next cycle's facts."""
        done = ctx.count(ContextKey.HYPOTHESES)
        return AgentEffect.with_proposals(
            [
                ProposedFact(
                    key=ContextKey.HYPOTHESES,
                    id=f"h-{index}",
                    content=f"fact {index}",
                    provenance=self.name,
                    evidence=("seeds/start",),
                )
                for index in range(done, min(done + self.per_cycle, self.limit))
            ]
        )


formation = Formation(
    name="w8-scale",
    description="1,000 small facts a cycle",
    suggestors=(SeedSuggestor("start", "go"), Bulk()),
    budget=Budget(max_cycles=FACTS // PER_CYCLE + 10, max_facts=FACTS + 10),
)
