"""The closed set of context keys."""

from __future__ import annotations

from enum import StrEnum
from typing import Final, final

__all__ = ["KEY_ORDER", "ContextKey"]


@final
class ContextKey(StrEnum):
    """Where a fact lives. The declaration order is the order used for hashing and display."""

    SEEDS = "seeds"
    """Starting facts: the problem statement, inputs from outside."""
    HYPOTHESES = "hypotheses"
    """Claims derived from other facts."""
    STRATEGIES = "strategies"
    """Plans and courses of action."""
    CONSTRAINTS = "constraints"
    """Rules and limits the result must respect."""
    SIGNALS = "signals"
    """Observations from the world."""
    COMPETITORS = "competitors"
    """Alternatives under comparison."""
    EVALUATIONS = "evaluations"
    """Scores and judgements of other facts."""
    PROPOSALS = "proposals"
    """Staged proposals awaiting validation; each names a `target` key."""
    DIAGNOSTIC = "diagnostic"
    """Notes about the run itself: rejections, failures, decisions."""


KEY_ORDER: Final[dict[ContextKey, int]] = {key: index for index, key in enumerate(ContextKey)}
"""The position of each key in declaration order."""
