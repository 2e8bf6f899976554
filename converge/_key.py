"""The closed set of context keys."""

from __future__ import annotations

from collections.abc import Collection
from enum import StrEnum
from typing import Final, final

__all__ = ["KEYS", "KEY_ORDER", "ContextKey", "in_key_order"]


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

KEYS: Final[tuple[ContextKey, ...]] = tuple(ContextKey)
"""Every key in declaration order (iterating a tuple is much cheaper than the enum class)."""


def in_key_order(keys: Collection[ContextKey]) -> tuple[ContextKey, ...]:
    """`keys` sorted in declaration order, without duplicates."""
    if len(keys) == 1:
        return tuple(keys)
    return tuple([key for key in KEYS if key in keys])
