"""A formation file for the fact-paging tests: several keys, spread over several entries.

After the seed, `Spread` promotes `PER_CYCLE` hypotheses and, every other cycle, 3 strategies
a cycle until `CYCLES` cycles of them: each journal entry holds a few facts of each key, so a
page of a key spans entries.
"""

from converge import AgentEffect, Budget, Context, ContextKey, Formation, ProposedFact
from converge_suggestors import SeedSuggestor

H = ContextKey.HYPOTHESES
S = ContextKey.STRATEGIES
PER_CYCLE = 7
CYCLES = 6


class Spread:
    """`PER_CYCLE` hypotheses a cycle, and 3 strategies every other cycle, `CYCLES` times."""

    name = "spread"
    dependencies = (ContextKey.SEEDS, H)

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.has(ContextKey.SEEDS) and ctx.count(H) < PER_CYCLE * CYCLES

    async def execute(self, ctx: Context, /) -> AgentEffect:
        cycle = ctx.count(H) // PER_CYCLE
        facts = [
            ProposedFact(
                key=H, id=f"h-{cycle}-{n}", content=f"hypothesis {cycle}.{n}", provenance=self.name
            )
            for n in range(PER_CYCLE)
        ]
        if cycle % 2 == 0:
            facts += [
                ProposedFact(
                    key=S,
                    id=f"s-{cycle}-{n}",
                    content=f"strategy {cycle}.{n}",
                    provenance=self.name,
                )
                for n in range(3)
            ]
        return AgentEffect.with_proposals(facts)


formation = Formation(
    name="paging",
    description="a few facts of two keys a cycle",
    suggestors=(SeedSuggestor("start", "go"), Spread()),
    budget=Budget(max_cycles=CYCLES + 5),
)
