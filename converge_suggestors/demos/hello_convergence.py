"""Hello, convergence: a seed and a reaction to it, converging in three cycles.

Cycle 1 promotes the seed, cycle 2 the reaction (which cites the seed as evidence), and in
cycle 3 nothing is left to do: a fixed point.
"""

from __future__ import annotations

from converge import ContextKey, Formation
from converge_suggestors import ReactOnceSuggestor, SeedSuggestor

__all__ = ["formation"]

formation: Formation = Formation(
    name="hello_convergence",
    description="A seed and a reaction to it: converges in three cycles.",
    suggestors=(
        SeedSuggestor("question", "What should we build first?"),
        ReactOnceSuggestor(
            "answer",
            "The smallest complete vertical slice.",
            source=ContextKey.SEEDS,
            target=ContextKey.HYPOTHESES,
        ),
    ),
)
"""A seed (`seeds/question`) and a reaction (`hypotheses/answer`); converges in 3 cycles."""
