"""`RunSummary` and `PendingGate`: what a store lists, one line per run and per waiting gate.

A summary comes from a record or from a head alone (`RunRecord.summary`,
`RecordHead.summary`); the inbox's gates from the store's index of its paused runs. Neither
is the signed record itself.
"""

from __future__ import annotations

from datetime import datetime
from typing import final

from ._model import FrozenModel
from ._stop import RunStatus, StopReason

__all__ = ["PendingGate", "RunSummary"]


@final
class RunSummary(FrozenModel, frozen=True):
    """One line about a stored run."""

    run_id: str
    """The run's id."""
    status: RunStatus
    """Where it stands (a running run whose lease ran out shows as `INTERRUPTED`)."""
    stop_reason: StopReason | None
    """How it ended; `None` while running or interrupted."""
    detail: str
    """The stop detail."""
    cycles: int
    """Cycles run."""
    fact_count: int
    """Facts in its context."""
    merkle_root: str
    """Its context's Merkle root (empty while running or interrupted)."""
    saved_at: datetime
    """When it was last saved (UTC)."""
    name: str | None = None
    """The formation's name, if recorded."""
    failures: int = 0
    """Its failed calls not made good and its rolled-back effects (`RunRecord.failure_count`);
    0 while running or interrupted. A run that converged with any converged with failures."""
    pending: int = 0
    """How many human gates it waits on (0 unless paused)."""
    parent_run_id: str | None = None
    """The run it was forked from, for a fork (once it stopped)."""
    fork_cycle: int | None = None
    """The parent's cycle it was forked at, for a fork."""

    @property
    def outcome(self) -> str:
        """The stop reason's value, or the status's while the run has none (`"running"`)."""
        return self.status.value if self.stop_reason is None else self.stop_reason.value


@final
class PendingGate(FrozenModel, frozen=True):
    """One gate a paused run waits on, as the store's inbox lists it.

    The inbox is the store's index of its paused records, not the signed record itself:
    `converge review RUN` checks the record before showing what to decide.
    """

    run_id: str
    """The paused run."""
    gate_id: str
    """The gate."""
    cycle: int
    """The cycle that held it."""
    ref: str
    """The held proposal's `"key/id"`."""
    suggestor: str
    """The suggestor that proposed it."""
    summary: str
    """What to show a reviewer: the proposal's content."""
    deadline: datetime | None = None
    """When the gate expires (UTC), or `None`."""
    saved_at: datetime
    """When the run paused (was last saved)."""
    name: str | None = None
    """The formation's name, if recorded."""
