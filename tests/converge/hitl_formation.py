"""A small formation with a human gate, shared by the HITL tests and their subprocesses."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from datetime import datetime

import anyio

from converge import (
    AgentEffect,
    Checkpoint,
    Context,
    ContextKey,
    Engine,
    GateDecision,
    HitlPolicy,
    Observer,
    ProposedFact,
    RunStore,
)
from converge_suggestors import ReactOnceSuggestor, SeedSuggestor

SIGNING_KEY = "test-signing-key"


class Recommender:
    """Once a seed exists: proposes a cheap (ungated) and a costly (gated) strategy."""

    name = "recommender"
    dependencies = (ContextKey.SEEDS,)

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.find(ContextKey.STRATEGIES, "cheap") is None

    async def execute(self, ctx: Context, /) -> AgentEffect:
        return AgentEffect.with_proposals(
            [
                ProposedFact(
                    key=ContextKey.STRATEGIES,
                    id="cheap",
                    content="Buy the small plan",
                    provenance=self.name,
                    confidence=0.9,
                ),
                ProposedFact(
                    key=ContextKey.STRATEGIES,
                    id="costly",
                    content="Buy the enterprise plan",
                    provenance=self.name,
                    confidence=0.4,
                    payload={"spend": 250_000},
                ),
            ],
            tokens=10,
        )


def build_engine(
    *,
    clock: Callable[[], datetime] | None = None,
    policy: HitlPolicy | None = None,
    signing_key: str | None = SIGNING_KEY,
    store: RunStore | None = None,
    observers: Sequence[Observer] = (),
    record_effects: bool = False,
) -> Engine:
    """Seed → recommender (one proposal gated below 0.5 confidence) → a reaction to strategies."""
    engine = Engine(
        hitl=policy or HitlPolicy(confidence_below=0.5),
        clock=clock,
        signing_key=signing_key,
        store=store,
        observers=observers,
        record_effects=record_effects,
    )
    engine.register_suggestor(SeedSuggestor("budget", "Pick a plan within budget"))
    engine.register_suggestor(Recommender())
    engine.register_suggestor(
        ReactOnceSuggestor(
            "plan-noted",
            "A plan is on the table",
            source=ContextKey.STRATEGIES,
            target=ContextKey.EVALUATIONS,
        )
    )
    return engine


def resume_from_json(path: str, gate_id: str, approve: bool) -> None:
    """Resume a checkpoint read from a file; print the outcome as JSON (used in a subprocess)."""
    with open(path, encoding="utf-8") as handle:
        checkpoint = Checkpoint.model_validate_json(handle.read())
    decision = (
        GateDecision.approve(gate_id, by="jane")
        if approve
        else GateDecision.reject(gate_id, by="jane", reason="too expensive")
    )
    result = anyio.run(build_engine().resume, checkpoint, [decision])
    print(
        json.dumps(
            {
                "stop_reason": result.stop_reason.value,
                "root": result.integrity.merkle_root,
                "facts": [fact.ref for fact in result.context.facts()],
            }
        )
    )


if __name__ == "__main__":
    resume_from_json(sys.argv[1], sys.argv[2], sys.argv[3] == "approve")
