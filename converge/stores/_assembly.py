"""A stored run on its way back: its head and journal entries checked and assembled.

`assemble` builds the `RunRecord` of a running or interrupted run from its `ProgressHead`
and entries, whose `checkpoint` (with no pending gates) is where it continues;
`assemble_final` puts back the record of a finished or paused run stored as rows. Both
check the entries against the head first: they must chain to its `journal_digest` and hold
what it says. Those checks (`read_head`, `unchained`, `mismatch`, `said`) serve the readers
that take a run's rows a page at a time too (`_rows_check`, `_rows_replay`, `_db`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError

from .._core._canonical import merkle_root
from .._core._checkpoint import Checkpoint, FactRecord
from .._core._evidence import cited_facts
from .._core._exceptions import StoreError
from .._core._hitl import GateDecision
from .._core._integrity import IntegrityProof
from .._core._key import STORED, key_rank
from .._core._progress import ProgressHead
from .._core._record import Interruption, RunRecord
from .._core._record_head import RecordHead
from .._core._stop import RunStatus
from .._core._trace import CycleTrace, Rejection, RunTrace
from ._journal import CycleDelta, chain, genesis

__all__ = ["assemble", "assemble_final", "mismatch", "read_head", "said", "unchained"]


def assemble(
    head_text: str,
    entries: Sequence[str],
    *,
    run_id: str,
    status: RunStatus,
    interruption: Interruption | None,
    version: int,
) -> RunRecord:
    """The record of a running or interrupted run, from its stored head and journal.

    Raises:
        StoreError: The head is invalid or another run's, or the journal does not chain to
            the head's digest (an entry was changed, dropped, added or reordered).
    """
    try:
        head = ProgressHead.model_validate_json(head_text, context=STORED)
    except ValueError as error:
        raise StoreError(f"run {run_id}: the stored progress head is invalid ({error})") from None
    if head.run_id != run_id:
        raise StoreError(f"the row of run {run_id} holds the progress of run {head.run_id}")
    deltas = _deltas(run_id, entries, head.journal_length, head.journal_digest)
    facts = sum(len(delta.facts) for delta in deltas)
    if facts != head.fact_count:
        raise StoreError(
            f"run {run_id}: its journal holds {facts} facts, its head says {head.fact_count}"
        )
    return _record(head, deltas, status=status, interruption=interruption, version=version)


def assemble_final(
    head_text: str, entries: Sequence[str], *, run_id: str, version: int
) -> RunRecord:
    """The record of a finished or paused run stored as rows, from its head and journal.

    It is the record saved: its own signature (and a paused run's checkpoint's) and Merkle
    root verify as if it had been saved whole.

    Raises:
        StoreError: The head is invalid or another run's, or the journal does not chain to
            the head's digest, or holds another number of facts, rejections or decisions,
            or other facts than those the head cites.
    """
    head = read_head(head_text, run_id)
    deltas = _deltas(run_id, entries, head.journal_length, head.journal_digest)
    record = head.record
    facts = tuple(
        sorted((f for delta in deltas for f in delta.facts), key=lambda f: key_rank(f.key))
    )
    rejections = tuple(r for delta in deltas for r in delta.rejections)
    decisions = tuple(d for delta in deltas for d in delta.decisions)
    problem = mismatch(head, len(facts), len(rejections), decisions) or _miscited(head, facts)
    if problem is not None:
        raise StoreError(problem)
    cycles = _cycles(deltas)
    trace = record.trace.model_copy(update={"cycles": cycles})
    checkpoint = record.checkpoint
    if checkpoint is not None:
        checkpoint = checkpoint.model_copy(
            update={"facts": facts, "rejections": rejections, "cycles": cycles}
        )
    return record.model_copy(
        update={
            "facts": facts,
            "rejections": rejections,
            "trace": trace,
            "checkpoint": checkpoint,
            "version": version,
        }
    )


def _miscited(head: RecordHead, facts: Sequence[FactRecord]) -> str | None:
    """Why the facts `head` cites are not those its gates cite in its journal (`None`: same)."""
    record = head.record
    if record.checkpoint is None or cited_facts(record.pending, facts) == head.cited:
        return None
    return f"run {record.run_id}: the facts its head cites differ from its journal's"


def mismatch(
    head: RecordHead, facts: int, rejections: int, decisions: Sequence[GateDecision]
) -> str | None:
    """Why a journal of `facts` facts, `rejections` rejections and `decisions` is not `head`'s.

    `None` when it is.
    """
    record = head.record
    said = (record.integrity.fact_count, head.rejections, len(record.trace.decisions))
    held = (facts, rejections, len(decisions))
    if held != said:
        return (
            f"run {record.run_id}: its journal holds {held[0]} facts, {held[1]} rejections "
            f"and {held[2]} decisions; its head says {said[0]}, {said[1]} and {said[2]}"
        )
    if tuple(decisions) != record.trace.decisions:
        return f"run {record.run_id}: its journal's human decisions differ from its head's"
    return None


def read_head(head_text: str, run_id: str) -> RecordHead:
    """The head of a finished run stored as rows, checked to be that run's.

    Raises:
        StoreError: The head is invalid or another run's.
    """
    try:
        head = RecordHead.model_validate_json(head_text, context=STORED)
    except ValidationError as error:
        raise StoreError(f"run {run_id}: the stored record is invalid ({said(error)})") from None
    if head.record.run_id != run_id:
        raise StoreError(f"the row of run {run_id} holds the record of run {head.record.run_id}")
    return head


def said(error: ValidationError) -> str:
    """A validation error in one line: how many errors, and where and what the first is."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "record"
    return f"{error.error_count()} error(s); {where}: {first['msg']}"


def _deltas(run_id: str, entries: Sequence[str], length: int, digest: str) -> list[CycleDelta]:
    """The journal's entries, checked against the head's `length` and chained `digest`."""
    running = genesis(run_id)
    deltas: list[CycleDelta] = []
    for index, entry in enumerate(entries):
        running = chain(running, entry)
        try:
            deltas.append(CycleDelta.model_validate_json(entry, context=STORED))
        except ValueError as error:
            raise StoreError(
                f"run {run_id}: journal entry {index + 1} is invalid ({error})"
            ) from None
    problem = unchained(run_id, (len(entries), running), (length, digest))
    if problem is not None:
        raise StoreError(problem)
    return deltas


def unchained(run_id: str, read: tuple[int, str], head: tuple[int, str]) -> str | None:
    """Why a journal read as `read` (entries, digest) is not the one `head` commits to.

    `head` is the head's length and digest; `None` when they are the same.
    """
    if read == head:
        return None
    return (
        f"run {run_id}: its journal ({read[0]} entries) does not match its head "
        f"({head[0]} entries): an entry was changed, dropped or added"
    )


def _cycles(deltas: Sequence[CycleDelta]) -> tuple[CycleTrace, ...]:
    """The cycle traces of the entries in cycle order, each as its last entry has it."""
    by_cycle: dict[int, CycleTrace] = {}
    for delta in deltas:
        for cycle in delta.cycles:
            by_cycle[cycle.cycle] = cycle
    return tuple(by_cycle[number] for number in sorted(by_cycle))


def _record(
    head: ProgressHead,
    deltas: Sequence[CycleDelta],
    *,
    status: RunStatus,
    interruption: Interruption | None,
    version: int,
) -> RunRecord:
    facts = sorted(
        (fact for delta in deltas for fact in delta.facts), key=lambda f: key_rank(f.key)
    )
    cycles = _cycles(deltas)
    checkpoint = _continuation_point(
        head,
        tuple(facts),
        cycles,
        rejections=tuple(r for delta in deltas for r in delta.rejections),
        decisions=tuple(d for delta in deltas for d in delta.decisions),
    )
    root = checkpoint.merkle_root
    said = {"cancelled": "its caller cancelled it", "lost": "its process stopped saving"}
    detail = f"saved after cycle {head.cycle}" + (
        f"; interrupted: {said[interruption]}" if interruption is not None else ""
    )
    trace = RunTrace(
        run_id=head.run_id,
        inputs=head.inputs,
        initial_root=head.initial_root,
        cycles=cycles,
        decisions=checkpoint.decisions,
        input_violations=head.input_violations,
        detail=detail,
        continuations=head.continuations,
    )
    return RunRecord(
        run_id=head.run_id,
        stop_reason=None,
        detail=detail,
        cycles=head.cycle,
        tokens=head.tokens,
        integrity=IntegrityProof(merkle_root=root, clock=head.clock, fact_count=len(facts)),
        trace=trace,
        facts=checkpoint.facts,
        rejections=checkpoint.rejections,
        checkpoint=checkpoint,
        name=head.name,
        formation=head.formation,
        progress=head,
        status=status,
        interruption=interruption,
        version=version,
    )


def _continuation_point(
    head: ProgressHead,
    facts: tuple[FactRecord, ...],
    cycles: tuple[CycleTrace, ...],
    *,
    rejections: tuple[Rejection, ...],
    decisions: tuple[GateDecision, ...],
) -> Checkpoint:
    """The checkpoint (no pending gates) an interrupted run continues from."""
    return Checkpoint(
        run_id=head.run_id,
        registrations=head.registrations,
        invariants=head.invariants,
        facts=facts,
        merkle_root=merkle_root(bytes.fromhex(fact.digest) for fact in facts),
        clock=head.clock,
        version=head.version,
        cycle=head.cycle,
        dirty=head.dirty,
        tokens=head.tokens,
        elapsed_seconds=head.elapsed_seconds,
        refused=head.refused,
        pending=(),
        decisions=decisions,
        rejections=rejections,
        cycles=cycles,
        inputs=head.inputs,
        input_violations=head.input_violations,
        initial_root=head.initial_root,
        continuations=head.continuations,
    )
