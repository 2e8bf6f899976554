"""`CycleLog`: a run's cycle traces, each built the first time something reads it.

A cycle hands the log what it produced (its tuples, and the lists of the cycle's merger,
which nothing changes once the cycle is over), kept in one flat tuple (`PendingCycle`). The
`CycleTrace`, with its `"key/id"` references, names and ordered keys, is built the first
time anything reads that cycle (a save, a pause, a human's decisions, the result's `trace`)
and kept in its place, so every later read returns the same object. A run whose trace
nobody reads never builds it: about 8 % of a one-fact cycle's instructions (benchmark W4),
and the references' memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Final, NamedTuple, Protocol, cast, final, overload

from .._core._fact import Fact
from .._core._hitl import GateRequest
from .._core._invariant import Violation
from .._core._key import AnyKey, in_key_order
from .._core._model import trusted
from .._core._trace import CycleTrace, Execution, Rejection
from ._calls import Returned, records

__all__ = ["CycleLog", "PendingCycle"]


class _Clock(Protocol):
    """What turns a cycle's `perf_counter()` reading into its times (`Stopwatch.at`)."""

    def at(self, reading: float, /) -> tuple[float, float]:
        """The wall clock and the run's own time at `reading`."""
        ...


class _Named(Protocol):
    """What the log reads of an eligible suggestor's registration."""

    @property
    def name(self) -> str:
        """The suggestor's name."""
        ...


PendingCycle = tuple[object, ...]
"""One cycle's record before its trace is built, references only, in one flat plain tuple.

A cycle keeps one container alive for its record, not one per sequence in it (each
container kept is walked by every collection of its generation: W1 keeps 5 a cycle with its
fact, not 9, and runs one young collection a run instead of three). A plain tuple, not a
NamedTuple: `tuple.__new__` of a subclass costs 0.35 µs a cycle more here (W4 +2 %). Its
layout is `CycleLog.record`'s, and `Recorded.of` alone reads it back."""

_HEAD: Final = 10
"""How many fields of a `PendingCycle` come before its references."""


class Recorded(NamedTuple):
    """A `PendingCycle` read back with its fields named (built only when a trace is)."""

    cycle: int
    dirty: frozenset[AnyKey]
    rejected: Sequence[Rejection]
    held: Sequence[GateRequest]
    violations: tuple[Violation, ...]
    merged: bool
    clock: _Clock | None
    started: float
    """The `perf_counter()` reading when the cycle started, which `clock` turns into times."""
    eligible: Sequence[_Named]
    calls: tuple[Execution | Returned, ...]
    promoted: Sequence[Fact]

    @classmethod
    def of(cls, pending: PendingCycle) -> Recorded:
        """Read `pending` as `CycleLog.record` laid it out: ten fields, the last two the
        counts of eligible registrations and calls; then those registrations, those calls
        and the promoted facts. Their types are erased in the flat tuple and restated here,
        the one place that reads it."""
        head = pending[: _HEAD - 2]
        eligible, calls = cast("tuple[int, int]", pending[_HEAD - 2 : _HEAD])
        calls_at = _HEAD + eligible
        facts_at = calls_at + calls
        return cls._make(
            (*head, pending[_HEAD:calls_at], pending[calls_at:facts_at], pending[facts_at:])
        )


def _built(pending: PendingCycle) -> CycleTrace:
    """The trace of a cycle's record."""
    record = Recorded.of(pending)
    clock = record.clock
    at, run = (None, None) if clock is None else clock.at(record.started)
    return trusted(
        CycleTrace,
        {
            "cycle": record.cycle,
            "dirty": in_key_order(record.dirty),
            "eligible": tuple([reg.name for reg in record.eligible]),
            "executions": records(record.calls),
            "promoted": tuple([fact.ref for fact in record.promoted]),
            "rejected": tuple(record.rejected),
            "held": tuple([request.gate_id for request in record.held]),
            "violations": record.violations,
            "merged": record.merged,
            "started_at": None if at is None else datetime.fromtimestamp(at, UTC),
            "at_seconds": run,
        },
    )


@final
class CycleLog(Sequence[CycleTrace]):
    """The traces of a run's cycles, in order; each built on its first read, then kept."""

    __slots__ = ("_entries",)

    def __init__(self, traces: Iterable[CycleTrace] = ()) -> None:
        self._entries: list[CycleTrace | PendingCycle] = list(traces)

    def record(
        self,
        cycle: int,
        dirty: frozenset[AnyKey],
        eligible: Sequence[_Named],
        calls: Sequence[Execution | Returned],
        promoted: Sequence[Fact],
        rejected: Sequence[Rejection],
        held: Sequence[GateRequest],
        violations: tuple[Violation, ...],
        merged: bool,
        clock: _Clock | None,
        started: float,
    ) -> None:
        """Add the next cycle, its trace to be built when first read.

        The eligible registrations, the calls (`Execution`s, or `Returned`) and the
        promoted facts are copied into the record's one tuple; the other sequences are kept
        as they are (nothing changes them once the cycle is over), an empty one as `()`.
        `started` is the `perf_counter()` reading taken when the cycle started, which
        `clock` turns into its times when the trace is built (no times without a clock).
        """
        self._entries.append(
            (
                cycle,
                dirty,
                rejected or (),
                held or (),
                violations,
                merged,
                clock,
                started,
                len(eligible),
                len(calls),
                *eligible,
                *calls,
                *promoted,
            )
        )

    def replace_last(self, trace: CycleTrace) -> None:
        """Put `trace` in place of the last cycle's (decisions or violations added to it)."""
        self._entries[-1] = trace

    def __len__(self) -> int:
        return len(self._entries)

    @overload
    def __getitem__(self, index: int) -> CycleTrace: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[CycleTrace, ...]: ...
    def __getitem__(self, index: int | slice) -> CycleTrace | tuple[CycleTrace, ...]:
        if isinstance(index, slice):
            return tuple([self._built(i) for i in range(*index.indices(len(self._entries)))])
        return self._built(index)

    def _built(self, index: int) -> CycleTrace:
        entries = self._entries
        entry = entries[index]
        if isinstance(entry, tuple):
            entry = entries[index] = _built(entry)
        return entry

    def __repr__(self) -> str:
        return f"CycleLog({len(self._entries)} cycles)"
