"""A formation file for the paused-rows tests: a held proposal whose evidence cites a chain.

Once the seed exists, `Filler` promotes `FILLER` unrelated hypotheses and `Grounds` two that
cite each other back to the seed; then `Bet` proposes `strategies/bet` at confidence 0.3,
citing `hypotheses/grounds-2` and a fact that does not exist, and a human gate holds it.
"""

from converge import AgentEffect, Context, ContextKey, Formation, HitlPolicy, ProposedFact
from converge_suggestors import SeedSuggestor

H = ContextKey.HYPOTHESES
FILLER = 30


class Filler:
    """Promotes `FILLER` hypotheses nobody cites."""

    name = "filler"
    dependencies = (ContextKey.SEEDS,)

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.find(H, "filler-0") is None

    async def execute(self, ctx: Context, /) -> AgentEffect:
        return AgentEffect.with_proposals(
            [
                ProposedFact(key=H, id=f"filler-{n}", content=f"filler {n}", provenance=self.name)
                for n in range(FILLER)
            ]
        )


class Grounds:
    """Promotes `hypotheses/grounds-1` (citing the seed) and `grounds-2` (citing grounds-1)."""

    name = "grounds"
    dependencies = (ContextKey.SEEDS,)

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.find(H, "grounds-1") is None

    async def execute(self, ctx: Context, /) -> AgentEffect:
        return AgentEffect.with_proposals(
            [
                ProposedFact(
                    key=H,
                    id="grounds-1",
                    content="the vendor is solvent",
                    provenance=self.name,
                    evidence=("seeds/budget",),
                ),
                ProposedFact(
                    key=H,
                    id="grounds-2",
                    content="the vendor answers in a day",
                    provenance=self.name,
                    evidence=("hypotheses/grounds-1",),
                ),
            ]
        )


class Bet:
    """Once the grounds exist, proposes a bet a human must decide."""

    name = "bet"
    dependencies = (H,)

    def accepts(self, ctx: Context, /) -> bool:
        return (
            ctx.find(H, "grounds-2") is not None and ctx.find(ContextKey.STRATEGIES, "bet") is None
        )

    async def execute(self, ctx: Context, /) -> AgentEffect:
        return AgentEffect.with_proposals(
            [
                ProposedFact(
                    key=ContextKey.STRATEGIES,
                    id="bet",
                    content="bet everything on one vendor",
                    provenance=self.name,
                    confidence=0.3,
                    evidence=("hypotheses/grounds-2", "hypotheses/nowhere"),
                )
            ]
        )


formation = Formation(
    name="cited-bet",
    description="a bet citing a chain of facts waits for a human",
    suggestors=(SeedSuggestor("budget", "Pick a vendor"), Filler(), Grounds(), Bet()),
    hitl=HitlPolicy(confidence_below=0.5),
)
