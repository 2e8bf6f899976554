"""`RunState`: what a run carries from cycle to cycle, and across a pause.

Only the run loop (`_run.RunLoop`) changes a `RunState`; `_pause` turns one into a
`Checkpoint` and back, and `run_trace` builds the trace of a run's result from it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import final

from .._core._checkpoint import FactRecord, Lineage, fact_records
from .._core._collector import paused_collector, settle
from .._core._context import ContextSnapshot
from .._core._hitl import GateDecision
from .._core._integrity import changed, ended_on, violation
from .._core._invariant import Violation
from .._core._key import AnyKey
from .._core._model import trusted
from .._core._proposal import ProposedFact
from .._core._seal import Texts
from .._core._stop import StopReason
from .._core._trace import Continuation, Rejection, RunTrace
from .._core._witness import Witnesses
from ._cycle_log import CycleLog

__all__ = ["Origin", "RunState", "root_of", "run_trace"]


@final
@dataclass(slots=True)
class RunState:
    """What a run carries from cycle to cycle, and across a pause."""

    run_id: str
    snapshot: ContextSnapshot
    origin: Origin
    """The context the run started from, or its Merkle root (`initial_root`)."""
    inputs: tuple[ProposedFact, ...]
    cycle: int = 0
    dirty: frozenset[AnyKey] = frozenset()
    tokens: int = 0
    elapsed_before: float = 0.0
    human_rejected: frozenset[tuple[AnyKey, str]] = frozenset()
    """`(key, id)` of proposals a human rejected in this run; the gate refuses them again."""
    decisions: list[GateDecision] = field(default_factory=list[GateDecision])
    rejections: list[Rejection] = field(default_factory=list[Rejection])
    cycles: CycleLog = field(default_factory=CycleLog)
    """Each cycle's trace, built when first read."""
    input_violations: tuple[Violation, ...] = ()
    continuations: tuple[Continuation, ...] = ()
    facts: tuple[FactRecord, ...] | None = None
    """The records of the facts as the run's end checked them (`changed_facts(keep=True)`)."""
    lineage: Lineage | None = None
    """Where a forked run branched off its parent."""
    texts: Texts | None = None
    """For a run saved after every cycle: the text the leaf of each fact promoted since the
    last save hashes, by key and id (`Stamp.promote`), which its journal entry holds as is
    (`_seal.promoted_json`); the saver empties it once the store has taken the entry."""
    witnesses: Witnesses | None = None
    """For a run saved after every cycle: the witness of each fact its journal wrote from
    its seal's text (`_witness`), for the end check (`changed_facts`)."""

    def keep_seals(self) -> None:
        """Keep, from now on, what each seal writes and hashes, for a run saved after every
        cycle: its journal's entries take the texts, its end check the witnesses."""
        if self.texts is None:
            self.texts, self.witnesses = {}, Witnesses()

    @property
    def initial_root(self) -> str:
        """The Merkle root of the context the run started from, hashed on the first read."""
        root = root_of(self.origin)
        self.origin = root
        return root

    def changed_facts(self, keep: bool = False) -> tuple[StopReason, str] | None:
        """The end-of-run check (`_integrity.changed`): when a fact changed below the API
        since its promotion, how the run ends on it (`INVARIANT_VIOLATED`, naming the fact),
        the built-in `integrity` violation recorded in the last cycle's trace; else `None`.

        `keep`: record the facts as they are checked (`fact_records`), and keep the records
        in `facts` when none changed, for a record saved whole to reuse unchecked.
        """
        if keep:
            # What it builds, the run keeps: the collector neither walks it as it grows nor
            # after, as with a cycle's leftovers (`_collector.settle`). Built at once, a
            # record cost twice its time in the walks.
            with paused_collector():
                facts, problem = fact_records(self.snapshot)
                settle()
            self.facts = facts if problem is None else None
        else:
            problem = changed(self.snapshot, self.witnesses)
        if problem is None:
            return None
        cycles = self.cycles
        if cycles and cycles[-1].cycle == self.cycle:
            last = cycles[-1]
            found = (*last.violations, violation(problem, self.cycle))
            cycles.replace_last(last.model_copy(update={"violations": found}))
        return StopReason.INVARIANT_VIOLATED, ended_on(problem)

    @classmethod
    def start(
        cls,
        context: ContextSnapshot,
        inputs: tuple[ProposedFact, ...],
        *,
        run_id: str | None = None,
    ) -> RunState:
        """The state of a run that has not started, from `context` at cycle 0.

        `context` itself is kept as the origin, not its copy at cycle 0: its root, once
        hashed (by this run, or by a read of the proof of the run that made it), is kept
        on it.
        """
        snapshot = context._at_cycle(0)  # pyright: ignore[reportPrivateUsage]
        return cls(run_id or new_run_id(), snapshot, context, inputs)


Origin = ContextSnapshot | str
"""Where a run started: the context itself, or its Merkle root (a run restored from a
checkpoint or a journal knows only the root)."""


def root_of(origin: Origin) -> str:
    """The Merkle root of a run's origin: hashed now if not known (a context keeps its own)."""
    return origin if isinstance(origin, str) else origin.merkle_root()


def new_run_id() -> str:
    """A new random (version 4) UUID as 32 hex digits, what `uuid.uuid4().hex` gives.

    Written from the random bytes directly: `uuid.UUID`'s checks and conversions touch about
    100 more pages of memory than the bytes need, and a run after a full collection pays
    about half a microsecond for each page it touches first.
    """
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40  # the version, 4
    raw[8] = raw[8] & 0x3F | 0x80  # the variant, RFC 4122
    return raw.hex()


def run_trace(
    fields: dict[str, object], cycles: CycleLog, count: int, ends: tuple[Origin, ContextSnapshot]
) -> RunTrace:
    """The run's trace, built on the result's first read: `fields`, the first `count` of its
    `cycles`, and the roots of where it started and of its last snapshot (`ends`)."""
    origin, last = ends
    roots = {"initial_root": root_of(origin), "final_root": last.merkle_root()}
    return trusted(RunTrace, {**fields, "cycles": cycles[:count], **roots})
