"""A running run on its way to the store: journal entries and the chain they make.

`Journal` follows one run and turns its state after each cycle into a `RunProgress`: a new
`ProgressHead` and one `CycleDelta` holding only what was added since the save before (new
facts, rejections and decisions, and the cycle traces that are new or were rewritten). Each
entry's JSON is chained into the head's `journal_digest`, and the head is signed with the
engine's key; when the run ends or pauses, `Journal.final` ends it with a `RecordHead`. The
way back, from a head and its entries to a `RunRecord`, is `_assembly`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from hashlib import sha256
from typing import TYPE_CHECKING, Final, Literal, TypeAlias, final

from .._core._checkpoint import Checkpoint, FactRecord, fact_records, fact_texts
from .._core._context import ContextSnapshot
from .._core._evidence import cited_facts
from .._core._hitl import GateDecision
from .._core._key import AnyKey, in_key_order
from .._core._model import FrozenModel, trusted
from .._core._progress import EntryCounts, ProgressHead, RunProgress
from .._core._record import RunRecord
from .._core._record_head import SHOWN_REJECTIONS, RecordHead, RunFinal
from .._core._seal import Texts
from .._core._shortfall import cycle_of, invalid_proposals
from .._core._signature import signature_of
from .._core._stop import RunStatus, StopReason
from .._core._trace import CycleTrace, Rejection
from .._core._witness import Witnesses

if TYPE_CHECKING:  # the reads import the journal's chain, and need no kernel
    from .._kernel._state import RunState

__all__ = ["CycleDelta", "Journal", "chain", "counts_genesis", "genesis"]


@final
class CycleDelta(FrozenModel, frozen=True):
    """One journal entry: what a run added since its previous save."""

    facts: tuple[FactRecord, ...] = ()
    """New facts, in key order then insertion order."""
    rejections: tuple[Rejection, ...] = ()
    """New rejections."""
    decisions: tuple[GateDecision, ...] = ()
    """New human decisions."""
    cycles: tuple[CycleTrace, ...] = ()
    """Cycle traces that are new, or rewrote one saved before (same `cycle`)."""


_Marks: TypeAlias = tuple[dict[AnyKey, int], int, int, int, CycleTrace | None]
"""A journal's watermarks after a save: facts per key, rejections, decisions, cycles, the
last cycle's trace."""

_NO_FACTS: Final = '{"facts":[]'
"""How the JSON of a `CycleDelta` without facts begins (`_entry`)."""


def genesis(run_id: str) -> str:
    """The journal digest of a run with no entries."""
    return sha256(f"converge-journal:{run_id}".encode()).hexdigest()


def counts_genesis(run_id: str) -> str:
    """The chain over the counts of a run's entries (`RecordHead.counts_digest`), before any."""
    return sha256(f"converge-counts:{run_id}".encode()).hexdigest()


def chain(digest: str, entry: str) -> str:
    """The journal digest after appending `entry` to a journal at `digest`."""
    return sha256(bytes.fromhex(digest) + entry.encode()).hexdigest()


@final
class Journal:
    """Turns one run's state into per-cycle saves, each holding only what is new.

    The first save of a run, or of a continuation, restarts the journal with everything.
    `commit` moves the watermarks once the store has taken a save.
    """

    __slots__ = (
        "_changed",
        "_counted",
        "_counts",
        "_cycles",
        "_decisions",
        "_digest",
        "_fingerprint",
        "_key",
        "_last",
        "_length",
        "_name",
        "_pending",
        "_rejections",
        "run_id",
    )

    def __init__(
        self,
        run_id: str,
        fingerprint: tuple[tuple[str, ...], tuple[str, ...]],
        *,
        name: str | None,
        formation: str | None,
        key: bytes | None,
    ) -> None:
        self.run_id = run_id
        self._fingerprint = fingerprint
        self._name = (name, formation)
        self._key = key
        self._counts: dict[AnyKey, int] = {}
        self._rejections = 0
        self._decisions = 0
        self._cycles = 0
        self._last: CycleTrace | None = None
        self._length = 0
        self._digest = ""
        self._pending: _Marks | None = None
        self._changed = False
        """A fact this journal recorded was found changed below the API: heads go unsigned."""
        self._counted: str | None = None
        """The chain over the counts of the entries the store took (`None`: one had none)."""

    def progress(
        self,
        state: RunState,
        *,
        elapsed: float,
        status: Literal[RunStatus.RUNNING, RunStatus.INTERRUPTED] = RunStatus.RUNNING,
        lease_seconds: float,
    ) -> RunProgress:
        """The save of `state` as it stands after its last merged cycle.

        The new facts are recorded as their seal wrote them (`state.texts`), each checked to
        give the leaf kept at its promotion; a fact without that text (restored, or with an
        object or array payload) as it reads now, checked against its leaf: once one was
        found changed below the API, no head of the run is signed (the run then ends
        `INVARIANT_VIOLATED`, and its record is not signed either). A fact changed in memory
        after its seal is caught by the run's end check (`RunState.changed_facts`).
        """
        restart = not self._digest
        length, digest = (0, genesis(self.run_id)) if restart else (self._length, self._digest)
        entry, marks = self._entry(
            state.snapshot,
            state.rejections,
            state.decisions,
            state.cycles,
            always=restart,
            promoted=state.texts,
            witnesses=state.witnesses,
        )
        if entry is not None:
            length, digest = length + 1, chain(digest, entry)
        self._pending = marks
        head = self._head(state, elapsed, length, digest)
        counts = None if entry is None else self._added(head.cycle, marks[0])
        return RunProgress(head, entry, status, lease_seconds, restart, counts)

    def _added(self, cycle: int, counts: dict[AnyKey, int]) -> EntryCounts:
        """What an entry saved after `cycle` holds, from the `counts` of each key after it.

        The facts of each key past the watermarks: every fact of a restart (none yet).
        """
        added = ((key, counts[key] - self._counts.get(key, 0)) for key in in_key_order(counts))
        return EntryCounts(cycle=cycle, keys=tuple((key, n) for key, n in added if n))

    def commit(self, progress: RunProgress) -> None:
        """Record that the store took `progress`: the next save starts after it."""
        if not self._digest:  # a restart: the counts chain starts again too
            self._counted = counts_genesis(self.run_id)
        if progress.entry is not None:
            self._counted = _counted(self._counted, progress.counts)
        if self._pending is not None:
            self._counts, self._rejections, self._decisions, self._cycles, self._last = (
                self._pending
            )
            self._pending = None
        self._length = progress.head.journal_length
        self._digest = progress.head.journal_digest

    def _entry(
        self,
        snapshot: ContextSnapshot,
        rejections: Sequence[Rejection],
        decisions: Sequence[GateDecision],
        cycles: Sequence[CycleTrace],
        *,
        always: bool = False,
        promoted: Texts | None = None,
        witnesses: Witnesses | None = None,
    ) -> tuple[str | None, _Marks]:
        """One entry: what was added since the last commit, and the watermarks after it.

        The entry is a `CycleDelta`'s JSON; `None` when nothing was added, unless `always`.

        The new facts are written with the leaves kept at their promotion, from the texts
        their seals wrote (`promoted`) or as they read now, each checked against its leaf
        (`fact_texts`). When one was changed below the API, they are recorded as they read
        now instead (`fact_records`), and the journal is `_changed`.
        """
        facts: tuple[FactRecord, ...] = ()
        texts = fact_texts(snapshot, self._counts, promoted, witnesses)
        if texts is None:
            facts, _ = fact_records(snapshot, self._counts)
            self._changed = True
        counts = {key: snapshot.count(key) for key in snapshot.keys()}
        first = self._cycles
        if first and cycles[first - 1] is not self._last and cycles[first - 1] != self._last:
            first -= 1  # the last saved cycle was rewritten since (decisions, violations)
        delta = trusted(
            CycleDelta,
            {
                "facts": facts,
                "rejections": tuple(rejections[self._rejections :]),
                "decisions": tuple(decisions[self._decisions :]),
                "cycles": tuple(cycles[first:]),
            },
        )
        last = cycles[-1] if cycles else None
        marks = (counts, len(rejections), len(decisions), len(cycles), last)
        if not (always or texts or any(delta.__dict__.values())):
            return None, marks
        entry = delta.model_dump_json()
        if texts:  # the facts' JSON goes where the delta without them has none
            entry = f'{{"facts":[{",".join(texts)}]{entry.removeprefix(_NO_FACTS)}'
        return entry, marks

    def final(self, record: RunRecord, context: ContextSnapshot) -> RunFinal | None:
        """The save that ends or pauses the run as rows: its record's head and the last entry.

        A paused record's checkpoint goes into the head less the facts, rejections and
        cycle traces, which must be the record's own (they are put back from the entries),
        with its signature as it is; the head also keeps the facts the evidence of the
        pending gates cites (`cited_facts`). `None` when the record must be saved whole: its
        checkpoint holds anything else than the record, it ended on a violated invariant or
        unsigned with a key (a fact found changed below the API: the record says what its
        facts read at its end, which the journal did not see), or the journal never started.
        """
        checkpoint = record.checkpoint
        if (
            (checkpoint is not None and not _same_run(record, checkpoint))
            or record.stop_reason is StopReason.INVARIANT_VIOLATED
            or (self._key is not None and record.signature is None)
            or not self._digest
            or self._changed
        ):
            return None
        trace = record.trace
        entry, marks = self._entry(context, record.rejections, trace.decisions, trace.cycles)
        if self._changed:
            return None
        length, digest, counted = self._length, self._digest, self._counted
        counts = None
        if entry is not None:
            length, digest = length + 1, chain(digest, entry)
            counts = self._added(record.cycles, marks[0])
            counted = _counted(counted, counts)
        empty = trace.model_copy(update={"cycles": ()})
        bare = {"facts": (), "rejections": ()}
        head = RecordHead(
            record=record.model_copy(
                update={
                    **bare,
                    "trace": empty,
                    "checkpoint": None
                    if checkpoint is None
                    else checkpoint.model_copy(update={**bare, "cycles": ()}),
                }
            ),
            keys=tuple((key, context.count(key)) for key in in_key_order(context.keys())),
            rejections=len(record.rejections),
            shown_rejections=record.rejections[:SHOWN_REJECTIONS],
            failures=tuple((cycle_of(trace, f), f) for f in trace.failures()),
            rolled_back=trace.rolled_back(),
            invalid=invalid_proposals(record.rejections),
            times=trace.times(),
            journal_length=length,
            journal_digest=digest,
            cited=cited_facts(record.pending, record.facts),
            counts_digest=counted,
        )
        if self._key is not None:
            head = head.model_copy(update={"signature": signature_of(head, self._key)})
        return RunFinal(head, entry, counts)

    def _head(self, state: RunState, elapsed: float, length: int, digest: str) -> ProgressHead:
        snapshot = state.snapshot
        registrations, invariants = self._fingerprint
        name, formation = self._name
        cycles = state.cycles
        cycle = state.cycle
        if cycle and not (cycles and cycles[-1].cycle == cycle):
            cycle -= 1  # cancelled inside a cycle: nothing of it was merged
        head = trusted(
            ProgressHead,
            {
                "run_id": self.run_id,
                "name": name,
                "formation": formation,
                "registrations": registrations,
                "invariants": invariants,
                "inputs": state.inputs,
                "input_violations": state.input_violations,
                "initial_root": state.initial_root,
                "cycle": cycle,
                "clock": snapshot.clock,
                "version": snapshot.version,
                "fact_count": len(snapshot),
                "dirty": in_key_order(state.dirty),
                "tokens": state.tokens,
                "elapsed_seconds": elapsed,
                "refused": tuple(f"{k.value}/{ident}" for k, ident in sorted(state.human_rejected)),
                "continuations": state.continuations,
                "journal_length": length,
                "journal_digest": digest,
                "signature": None,
            },
        )
        if self._key is None or self._changed:
            return head
        return head.model_copy(update={"signature": signature_of(head, self._key)})


def _counted(digest: str | None, counts: EntryCounts | None) -> str | None:
    """The counts chain at `digest` after an entry with `counts` (`None`: either is none)."""
    return None if digest is None or counts is None else chain(digest, counts.model_dump_json())


def _same_run(record: RunRecord, checkpoint: Checkpoint) -> bool:
    """Whether `checkpoint` holds exactly `record`'s facts, rejections and cycle traces.

    A head leaves those out of both, and the entries give them back.
    """
    pairs = (
        (checkpoint.facts, record.facts),
        (checkpoint.rejections, record.rejections),
        (checkpoint.cycles, record.trace.cycles),
    )
    return all(
        len(held) == len(own) and all(a is b or a == b for a, b in zip(held, own, strict=True))
        for held, own in pairs
    )
