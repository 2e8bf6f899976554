"""A formation file for the console tests: after the gate, a suggestor that never returns."""

import anyio
from hitl_formation import Recommender

from converge import AgentEffect, Context, ContextKey, Formation, HitlPolicy
from converge_suggestors import SeedSuggestor


class Stalls:
    """Reacts to the approved plan by waiting far longer than any test."""

    name = "stalls"
    dependencies = (ContextKey.STRATEGIES,)

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.has(ContextKey.STRATEGIES)

    async def execute(self, ctx: Context, /) -> AgentEffect:
        await anyio.sleep(3600)
        return AgentEffect.empty()


formation = Formation(
    name="stalls-after-review",
    suggestors=(SeedSuggestor("budget", "Pick a plan within budget"), Recommender(), Stalls()),
    hitl=HitlPolicy(confidence_below=0.5),
)
