"""A deterministic chain for the fork tests: a seed, then one step per cycle, each step's
fact citing the one before, and a tally reading every step; optionally one step held for a
human. The same file is the formation the fork commands load."""

from __future__ import annotations

import os

from pydantic import BaseModel

from converge import (
    AgentEffect,
    Context,
    ContextKey,
    Formation,
    HitlPolicy,
    Key,
    ProposedFact,
)

STEPS = int(os.environ.get("FORK_TEST_STEPS", "5"))
"""How many steps the chain takes (the seed is cycle 1, step n is cycle n + 1)."""


class Bid(BaseModel, frozen=True):
    """The payload of the typed key `fork_bids`."""

    amount: int


BIDS = Key("fork_bids", payload=Bid)


class Seeder:
    """Cycle 1: the seed `seeds/start`, unless the context already has it."""

    name = "seeder"
    dependencies = ()

    def accepts(self, ctx: Context, /) -> bool:
        return not ctx.has(ContextKey.SEEDS)

    async def execute(self, ctx: Context, /) -> AgentEffect:
        return AgentEffect.with_proposals(
            [ProposedFact(key=ContextKey.SEEDS, id="start", content="start", provenance=self.name)]
        )


class Stepper:
    """One step per cycle after the seed: `hypotheses/step-n`, citing step n - 1 (or the
    seed), until `STEPS`; the content says how many bids the context holds."""

    name = "stepper"
    dependencies = (ContextKey.SEEDS, ContextKey.HYPOTHESES)

    def __init__(self, steps: int = STEPS, held: int | None = None) -> None:
        self._steps = steps
        self._held = held

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.has(ContextKey.SEEDS) and ctx.count(ContextKey.HYPOTHESES) < self._steps

    async def execute(self, ctx: Context, /) -> AgentEffect:
        n = ctx.count(ContextKey.HYPOTHESES) + 1
        evidence = "seeds/start" if n == 1 else f"hypotheses/step-{n - 1}"
        confidence = 0.3 if n == self._held else 0.9
        return AgentEffect.with_proposals(
            [
                ProposedFact(
                    key=ContextKey.HYPOTHESES,
                    id=f"step-{n}",
                    content=f"step {n} with {ctx.count(BIDS)} bids",
                    provenance=self.name,
                    evidence=(evidence,),
                    confidence=confidence,
                )
            ],
            tokens=3,
        )


class Tally:
    """After each step: `evaluations/tally-n`, the steps so far."""

    name = "tally"
    dependencies = (ContextKey.HYPOTHESES,)

    def accepts(self, ctx: Context, /) -> bool:
        n = ctx.count(ContextKey.HYPOTHESES)
        return n > 0 and ctx.find(ContextKey.EVALUATIONS, f"tally-{n}") is None

    async def execute(self, ctx: Context, /) -> AgentEffect:
        n = ctx.count(ContextKey.HYPOTHESES)
        return AgentEffect.with_proposals(
            [
                ProposedFact(
                    key=ContextKey.EVALUATIONS,
                    id=f"tally-{n}",
                    content=f"{n} steps",
                    provenance=self.name,
                    evidence=(f"hypotheses/step-{n}",),
                )
            ]
        )


def chain_formation(steps: int = STEPS, held: int | None = None) -> Formation:
    """The chain as a formation (`held`: the step a human must approve)."""
    return Formation(
        name="fork-chain",
        description="one step per cycle",
        suggestors=(Seeder(), Stepper(steps, held), Tally()),
        inputs=(ProposedFact(key=ContextKey.SIGNALS, id="go", content="go", provenance="test"),),
        hitl=HitlPolicy(confidence_below=0.5) if held is not None else None,
    )


formation = chain_formation(
    held=int(os.environ["FORK_TEST_HELD"]) if "FORK_TEST_HELD" in os.environ else None
)
