"""`CycleLog`: a run's cycle traces, each built the first time something reads it.

A cycle hands the log what it produced (its tuples, and the lists of the cycle's merger,
which nothing changes once the cycle is over), kept as one tuple (`PendingCycle`). The
`CycleTrace`, with its `"key/id"` references, names and ordered keys, is built the first
time anything reads that cycle (a save, a pause, a human's decisions, the result's `trace`)
and kept in its place, so every later read returns the same object. A run whose trace
nobody reads never builds it: about 8 % of a one-fact cycle's instructions (benchmark W4),
and the references' memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Protocol, final, overload

from ._calls import Executions, Returned, records
from ._fact import Fact
from ._hitl import GateRequest
from ._invariant import Violation
from ._key import AnyKey, in_key_order
from ._model import trusted
from ._trace import CycleTrace, Execution, Rejection

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


PendingCycle = tuple[
    int,
    frozenset[AnyKey],
    Sequence[_Named],
    Sequence[Execution | Returned],
    Sequence[Fact],
    Sequence[Rejection],
    Sequence[GateRequest],
    tuple[Violation, ...],
    bool,
    _Clock | None,
    float,
]
"""One cycle's record before its trace is built, references only, in `CycleLog.record`'s
order: one tuple, so a cycle keeps as few containers alive as it can (each one kept is
walked by every collection of its generation)."""


def _built(pending: PendingCycle) -> CycleTrace:
    """The trace of a cycle's record."""
    (
        cycle,
        dirty,
        eligible,
        executions,
        promoted,
        rejected,
        held,
        violations,
        merged,
        clock,
        read,
    ) = pending
    at, run = (None, None) if clock is None else clock.at(read)
    return trusted(
        CycleTrace,
        {
            "cycle": cycle,
            "dirty": in_key_order(dirty),
            "eligible": tuple([reg.name for reg in eligible]),
            "executions": records(executions),
            "promoted": tuple([fact.ref for fact in promoted]),
            "rejected": tuple(rejected),
            "held": tuple([request.gate_id for request in held]),
            "violations": violations,
            "merged": merged,
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
        executions: Sequence[Execution],
        promoted: Sequence[Fact],
        rejected: Sequence[Rejection],
        held: Sequence[GateRequest],
        violations: tuple[Violation, ...],
        merged: bool,
        clock: _Clock | None,
        started: float,
    ) -> None:
        """Add the next cycle, its trace to be built when first read.

        The sequences are kept as they are (nothing changes them once the cycle is over),
        but an empty one is kept as `()`, the promoted facts as a tuple (a list the cycle
        no longer needs is freed now), and `Executions` by what it holds. `started` is the
        `perf_counter()` reading taken when the cycle started, which `clock` turns into its
        times when the trace is built (no times without a clock).
        """
        self._entries.append(
            (
                cycle,
                dirty,
                eligible,
                executions.kept if type(executions) is Executions else executions,
                tuple(promoted) if promoted else (),
                rejected or (),
                held or (),
                violations,
                merged,
                clock,
                started,
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
