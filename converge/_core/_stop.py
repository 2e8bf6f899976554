"""`StopReason`: why a run stopped; `RunStatus`: where a stored run stands."""

from __future__ import annotations

from enum import StrEnum
from typing import final

__all__ = ["RunStatus", "StopReason"]


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


@final
class RunStatus(StrEnum):
    """Where a stored run stands. Only `FINISHED` and `PAUSED` runs have a stop reason."""

    RUNNING = "running"
    """A process is running it and holds its lease (see `Engine`'s `lease`)."""
    PAUSED = "paused"
    """Stopped with `AWAITING_HUMAN`; `Engine.resume_run` applies the decisions."""
    FINISHED = "finished"
    """Stopped for any other reason; nothing more will happen to it."""
    INTERRUPTED = "interrupted"
    """Its caller cancelled it, or its process died (its lease ran out) between two saved
    cycles; `Engine.resume_run` continues it from the last saved cycle."""
