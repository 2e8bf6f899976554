"""A reviewer's decisions: the form read as gate decisions, and the run resumed with them.

Each decision is recorded as the signed-in reviewer's. A run resumes through
`resume_stored`, the path `converge resume` takes, so a run decided here and one decided on
the command line race under the same rules: one wins, the other is told who decided. It
resumes in the console's task group, and the page answers once it has claimed its record
(its first event); what fails after that is logged, since the page has answered.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final, final

from anyio.abc import TaskStatus

from .._core._escape import VisibleLines
from .._core._events import EngineEvent
from .._core._hitl import GateDecision
from .._core._record import RunRecord
from .._core._stop import RunStatus
from .._formation import EngineOptions, Formation, command_timeout
from .._review import resume_stored, signing_key
from ..stores._durable import DEFAULT_LEASE
from ._form import FormError
from ._gate_page import live_gates
from ._settings import ConsoleSettings
from ._signin import SignedIn

__all__ = ["gate_decisions", "resume", "undecided_gates"]

_LOG: Final = logging.getLogger("converge.ui")
_LONGEST_REASON: Final = 2000


@final
class _Claim:
    """An observer that says when a resumed run has claimed its record (its first event)."""

    event_types: Final = frozenset({"run_started"})

    def __init__(self, claimed: Callable[[], None]) -> None:
        self._claimed = claimed

    def on_event(self, event: EngineEvent, /) -> None:
        self._claimed()


def gate_decisions(form: dict[str, str], signed: SignedIn) -> list[GateDecision]:
    """The decisions a form takes, recorded as the signed-in reviewer's.

    Raises:
        FormError: A reason is longer than 2,000 characters.
    """
    decisions: list[GateDecision] = []
    for name, value in form.items():
        if not name.startswith("gate:") or value not in {"approve", "reject"}:
            continue
        gate = name.removeprefix("gate:")
        reason = form.get(f"reason:{gate}", "").strip() or None
        if reason is not None and len(reason) > _LONGEST_REASON:
            raise FormError(f"the reason for {gate} is longer than {_LONGEST_REASON} characters")
        approved = value == "approve"
        by = signed.reviewer.name
        decisions.append(GateDecision(gate_id=gate, approved=approved, by=by, reason=reason))
    return decisions


def undecided_gates(
    record: RunRecord, gate_id: str | None, decisions: list[GateDecision]
) -> list[str]:
    """The live gates the form left without a decision (none when continuing a run)."""
    checkpoint = record.checkpoint
    if gate_id is None or checkpoint is None or record.status is not RunStatus.PAUSED:
        return []
    decided = {decision.gate_id for decision in decisions}
    live = live_gates(checkpoint, datetime.now(UTC))
    return [gate.gate_id for gate in live if gate.gate_id not in decided]


async def resume(
    settings: ConsoleSettings,
    run_id: str,
    decisions: list[GateDecision],
    seen: int,
    *,
    task_status: TaskStatus[str | None],
) -> None:
    """Resume `run_id` with `decisions`, as the task `task_status` reports on.

    Started with `None` once the run has claimed its record, or with what stopped it when
    someone else had it first.
    """
    started = False

    def claimed() -> None:
        nonlocal started
        if not started:
            started = True
            task_status.started(None)

    def options(formation: Formation, locator: str) -> EngineOptions:
        chosen: EngineOptions = {
            "store": settings.store,
            "formation": locator,
            "durability": "cycle",
            "lease": DEFAULT_LEASE,
            "observers": (_Claim(claimed),),
            "suggestor_timeout": command_timeout(formation),
        }
        key = signing_key()
        if key is not None:
            chosen["signing_key"] = key
        return chosen

    try:
        resumed = await resume_stored(
            settings.store,
            run_id,
            decisions,
            formation=settings.formation,
            options=options,
            err=VisibleLines(sys.stderr),
            seen_version=seen,
        )
    except Exception:
        if not started:
            raise
        _LOG.exception("run %s failed after it resumed", run_id)
        return
    if not started:
        task_status.started(resumed if isinstance(resumed, str) else None)
