"""W7's model-bound formation: two suggestors that each wait 50 ms per call, for 3 steps.

Each suggestor stands in for a model call: `execute` awaits `anyio.sleep(0.05)` and proposes
its next fact, under its own key (`HYPOTHESES` for one, `SIGNALS` for the other), while it
has fewer than `STEPS`. Each depends on `SEEDS` (the run's input fact) and on its own key, so
both run in every cycle, concurrently: a run is 3 productive cycles of 50 ms and a last one
that finds nothing to do. `run_batch` imports this file by path in every worker (the
module-level `formation`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, final

import anyio

from converge import AgentEffect, Budget, Context, ContextKey, Formation, ProposedFact

__all__ = ["MODEL_WAIT", "STEPS", "formation", "inputs"]

MODEL_WAIT: Final = 0.05
"""Seconds each call waits, as a model call would."""
STEPS: Final = 3
"""Facts each suggestor proposes: the productive cycles of a run."""


@final
class ModelCall:
    """Waits `MODEL_WAIT` and proposes the next of its `STEPS` facts under `key`."""

    __slots__ = ("_key", "_name")

    def __init__(self, name: str, key: ContextKey) -> None:
        self._name = name
        self._key = key

    @property
    def name(self) -> str:
        """The suggestor's name."""
        return self._name

    @property
    def dependencies(self) -> Sequence[ContextKey]:
        """`SEEDS` (the run's input) and its own key, so each new fact of its calls it again."""
        return (ContextKey.SEEDS, self._key)

    def accepts(self, ctx: Context, /) -> bool:
        """While it has proposed fewer than `STEPS` facts."""
        return ctx.count(self._key) < STEPS

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Wait like a model call, then propose the next fact."""
        await anyio.sleep(MODEL_WAIT)
        step = ctx.count(self._key)
        return AgentEffect.with_proposals(
            (
                ProposedFact(
                    key=self._key,
                    id=f"{self._name}-{step}",
                    content=f"{self._name}: answer {step}",
                    provenance=self._name,
                ),
            )
        )


def inputs(index: int) -> tuple[ProposedFact, ...]:
    """The input of run `index`: one `SEEDS` fact."""
    return (
        ProposedFact(
            key=ContextKey.SEEDS, id="question", content=f"question {index}", provenance="bench"
        ),
    )


formation: Final = Formation(
    name="w7-model-bound",
    description="Two suggestors, each waiting 50 ms per call, 3 steps.",
    suggestors=(
        ModelCall("analyst-a", ContextKey.HYPOTHESES),
        ModelCall("analyst-b", ContextKey.SIGNALS),
    ),
    budget=Budget(max_cycles=20),
)
