"""A running run saved cycle by cycle: `ProgressHead`, `EntryCounts` and `RunProgress`.

A running run's row holds a small `ProgressHead`, and each cycle's additions are appended
beside it as one journal entry (`RunProgress`), so a per-cycle save costs what the cycle
added, not the run. The `EntryCounts` stored beside each entry say what it holds by number,
so a page reads only the entries it needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, final

from pydantic import Field

from ._invariant import Violation
from ._key import KeyField
from ._model import FrozenModel
from ._proposal import ProposedFact
from ._stop import RunStatus
from ._trace import Continuation

__all__ = ["EntryCounts", "ProgressHead", "RunProgress"]


@final
class ProgressHead(FrozenModel, frozen=True):
    """What a running run's row holds besides its journal: everything but the facts, the
    cycle traces, the rejections and the decisions, which the journal entries carry.

    `journal_digest` chains every entry's JSON (`SHA-256(previous digest + entry)`, from
    `SHA-256("converge-journal:" + run_id)`), and `signature` (with a signing key) covers
    the head, so an entry changed, dropped, added or reordered in the store is refused.
    """

    run_id: str
    """The run."""
    name: str | None = None
    """The formation's name, if recorded."""
    formation: str | None = None
    """Where the formation can be loaded from, if recorded."""
    registrations: tuple[str, ...]
    """The registrations fingerprint, as a checkpoint records it."""
    invariants: tuple[str, ...]
    """The invariants fingerprint, as a checkpoint records it."""
    inputs: tuple[ProposedFact, ...] = ()
    """The run's inputs."""
    input_violations: tuple[Violation, ...] = ()
    """Structural violations of the inputs."""
    initial_root: str
    """The Merkle root of the starting context."""
    cycle: int
    """The last cycle saved."""
    clock: int
    """The Lamport clock after it."""
    version: int
    """The context's version after it."""
    fact_count: int
    """Facts in the context after it."""
    dirty: tuple[KeyField, ...]
    """Keys that gained facts in it (what the next cycle wakes up)."""
    tokens: int
    """Tokens spent so far."""
    elapsed_seconds: float = Field(ge=0.0)
    """The run's own time so far."""
    refused: tuple[str, ...] = ()
    """`"key/id"` of proposals a human rejected in this run."""
    continuations: tuple[Continuation, ...] = ()
    """Where the run was interrupted and continued so far."""
    journal_length: int = Field(ge=0)
    """How many journal entries the run has."""
    journal_digest: str
    """The chain over those entries (see the class)."""
    signature: str | None = None
    """HMAC-SHA256 over the rest of the head (hex), with a signing key."""


@final
class EntryCounts(FrozenModel, frozen=True):
    """What one journal entry holds, by number: stored beside it (schema 8), so a page can
    find the entries that hold a key's n-th fact, or the facts at the end of a cycle, without
    reading the others."""

    cycle: int = Field(ge=0)
    """The last cycle the entry saved (the run's cycle when it was written)."""
    keys: tuple[tuple[KeyField, int], ...] = ()
    """How many facts of each key the entry adds, in key order (keys it adds none of are
    left out)."""


@final
@dataclass(frozen=True, slots=True)
class RunProgress:
    """One per-cycle save of a running run: its new head and what to append to its journal."""

    head: ProgressHead
    """The run's head after this save."""
    entry: str | None
    """The journal entry to append (JSON; `None` appends nothing)."""
    status: Literal[RunStatus.RUNNING, RunStatus.INTERRUPTED]
    """`RUNNING` while the run goes on; `INTERRUPTED` when its caller cancelled it."""
    lease_seconds: float
    """How long the run counts as running without another save or `renew_lease`."""
    restart: bool = False
    """Drop the journal (and any finished record) first: this entry starts it again."""
    counts: EntryCounts | None = None
    """What `entry` holds, by number, stored beside it (`None`: not known)."""
