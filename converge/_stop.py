"""`StopReason`: why a run stopped."""

from __future__ import annotations

from enum import StrEnum
from typing import final

__all__ = ["StopReason"]


@final
class StopReason(StrEnum):
    """Why a run stopped. Only `CONVERGED` is success."""

    CONVERGED = "converged"
    """A fixed point with every invariant satisfied."""
    CYCLE_BUDGET_EXHAUSTED = "cycle_budget_exhausted"
    """`Budget.max_cycles` cycles ran without reaching a fixed point."""
    FACT_BUDGET_EXHAUSTED = "fact_budget_exhausted"
    """The context grew past `Budget.max_facts`."""
    TOKEN_BUDGET_EXHAUSTED = "token_budget_exhausted"
    """Suggestors reported more than `Budget.max_tokens` tokens."""
    TIME_BUDGET_EXHAUSTED = "time_budget_exhausted"
    """The run's own time passed `Budget.max_seconds`."""
    INVARIANT_VIOLATED = "invariant_violated"
    """An acceptance or semantic invariant was violated at the fixed point."""
    CONFLICT = "conflict"
    """A proposal contradicted an existing fact and `on_conflict="stop"`."""
    AWAITING_HUMAN = "awaiting_human"
    """Proposals are held for a human decision."""
