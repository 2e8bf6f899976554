"""What the `converge` command needs besides argument parsing: loading, stores, output.

Everything the command prints that it did not write itself (a model's text, a stored
record, an exception's message, a path) goes through `visible` first, so that no control
sequence reaches the terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NoReturn, TextIO, TypeVar, final

from .._core._checkpoint import AnyFact, FactRecord, key_spans
from .._core._escape import hidden_character, visible
from .._core._events import CycleFinished, EngineEvent
from .._core._invariant import Violation
from .._core._record import RunRecord
from .._core._record_head import SHOWN_REJECTIONS, RecordHead
from .._core._shortfall import Shortfall, cycle_of
from .._core._stop import StopReason
from .._core._trace import Execution, Rejection
from .._kernel._log import LOGGER_NAME, LogLine
from .._kernel._verdict import verdict

__all__ = [
    "BATCH_INCOMPLETE",
    "BROKEN_PIPE",
    "EXIT_CODES",
    "FAILURES",
    "INTERRUPTED",
    "SHOWN_REJECTIONS",
    "VERIFY_FAILED",
    "Progress",
    "UsageParser",
    "decided",
    "engine_warnings",
    "exit_status",
    "failure_lines",
    "program",
    "rejection_lines",
    "summary_lines",
    "who",
]

T = TypeVar("T")


FAILURES: Final = 9
"""Exit status of a run that converged with failed calls or rolled-back effects."""

EXIT_CODES: Final[dict[StopReason, int]] = {
    StopReason.CONVERGED: 0,
    StopReason.CYCLE_BUDGET_EXHAUSTED: 3,
    StopReason.FACT_BUDGET_EXHAUSTED: 3,
    StopReason.TOKEN_BUDGET_EXHAUSTED: 3,
    StopReason.TIME_BUDGET_EXHAUSTED: 3,
    StopReason.INVARIANT_VIOLATED: 4,
    StopReason.CONFLICT: 5,
    StopReason.AWAITING_HUMAN: 6,
}
"""Exit status per stop reason; 1 is an error, 2 a usage error (see `cli` for the others)."""

BATCH_INCOMPLETE: Final = 10
"""Exit status of `converge batch` when an input did not end as a stored run."""

VERIFY_FAILED: Final = 7
"""Exit status of a `verify` or `replay` that failed."""

INTERRUPTED: Final = 130
"""Exit status after Ctrl-C (128 + SIGINT), as shells report it."""

BROKEN_PIPE: Final = 141
"""Exit status when the reader of the output went away (128 + SIGPIPE, as a shell reports)."""


class UsageParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (made visible) and a hint."""

    def error(self, message: str) -> NoReturn:
        """Print `PROG: error: MESSAGE` and a hint naming `--help`; exit with status 2."""
        hint = f"`{self.prog} --help` shows the usage"
        self.exit(2, f"{self.prog}: error: {visible(message)}\nhint: {hint}\n")


def who(value: str) -> str:
    """The `--by` argument: who decides (an argparse type).

    Not empty, not only blanks, and only visible characters: a control character (ESC, a
    newline), a bidirectional override (U+202E) or an invisible one would make the recorded
    name read differently from what was typed, or rewrite the terminal that shows it.
    """
    if not value.strip():
        raise argparse.ArgumentTypeError("must name who decides (it is empty or blank)")
    bad = hidden_character(value)
    if bad is not None:
        raise argparse.ArgumentTypeError(
            f"must name who decides in visible characters, not {visible(value)} "
            f"(U+{ord(bad):04X} is a control, invisible or bidirectional character)"
        )
    return value


def program(argv0: str | None = None) -> str:
    """How to start this command again, as printed in a command to run next.

    `converge` when that is what a shell finds on the path; else the script as it was
    started (`.venv/bin/converge` after `make demo`, relative to the same directory);
    `PYTHON -m converge.cli` when started so; `converge` when called from other code.
    """
    started = sys.argv[0] if argv0 is None else argv0
    path = Path(started)
    if path.stem == "converge" and path.is_file():
        found = shutil.which("converge")
        if found is not None and Path(found).resolve() == path.resolve():
            return "converge"
        return shlex.quote(started)
    if path.name == "cli.py" and path.parent.name == "converge":
        return f"{shlex.quote(sys.executable)} -m converge.cli"
    return "converge"


@contextlib.contextmanager
def engine_warnings(err: TextIO) -> Generator[None]:
    """Print the engine's warnings (failed calls, scheduled retries) on `err` meanwhile."""
    logger = logging.getLogger(LOGGER_NAME)
    handler = logging.StreamHandler(err)
    handler.setFormatter(LogLine())
    handler.setLevel(logging.WARNING)
    level = logger.level
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.WARNING or level == logging.NOTSET:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@final
class Progress:
    """An observer printing one line per cycle: eligible, facts per key, rejections, elapsed.

    It receives `cycle_finished` alone: nothing is built for it per fact or per call.
    """

    event_types: Final = frozenset({"cycle_finished"})

    def __init__(self, out: TextIO, clock: Callable[[], float] = time.perf_counter) -> None:
        self._out = out
        self._clock = clock
        self._started = clock()
        self._gone = False

    def on_event(self, event: EngineEvent, /) -> None:
        """Print the cycle's line when it finishes."""
        if not isinstance(event, CycleFinished) or self._gone:
            return
        elapsed = (self._clock() - self._started) * 1000.0
        held = f", {event.held} held" if event.held else ""
        gained = ", ".join(f"{key.value} {count}" for key, count in event.by_key) or "none"
        try:
            self._out.write(
                f"  cycle {event.cycle:>3}: {event.eligible} eligible, "
                f"+{event.promoted} facts ({gained}), "
                f"{event.rejected} rejected{held}; {event.facts} facts in all; "
                f"{elapsed:.0f} ms\n"
            )
            self._out.flush()
        except BrokenPipeError:  # the reader went away: the run goes on, quietly
            self._gone = True


@final
@dataclass(frozen=True, slots=True)
class _Summary:
    """What a summary shows of a run, from its record or from the head of a run stored as
    rows (which holds the counts and the few lists a summary needs)."""

    record: RunRecord
    """Its outcome, detail, cycles, tokens, root, pending gates and human decisions."""
    keys: Sequence[tuple[str, int]]
    """How many facts each key has, in key order."""
    facts: int
    """How many facts."""
    rejections: Sequence[Rejection]
    """The rejections to list (the first `SHOWN_REJECTIONS` at least)."""
    rejected: int
    """How many rejections."""
    failures: Sequence[tuple[int, Execution]]
    """Calls that failed and were not made good, each with its cycle."""
    invalid: Sequence[Rejection]
    """Rejections of broken proposals."""
    rolled_back: Sequence[Violation]
    """Effects a structural invariant rolled back."""

    @classmethod
    def of(cls, source: RunRecord | RecordHead, facts: Sequence[AnyFact] | None) -> _Summary:
        if isinstance(source, RecordHead):
            return cls(
                source.record,
                [(key.value, count) for key, count in source.keys],
                source.record.integrity.fact_count,
                source.shown_rejections,
                source.rejections,
                source.failures,
                source.invalid,
                source.rolled_back,
            )
        shown = source.facts if facts is None else facts
        keys: dict[str, int] = {}
        for key, start, end in key_spans(shown):  # one run per key, unless altered
            keys[key.value] = keys.get(key.value, 0) + end - start
        shortfall = Shortfall.of(source.trace, source.rejections)
        return cls(
            source,
            list(keys.items()),
            len(shown),
            source.rejections,
            len(source.rejections),
            [(cycle_of(source.trace, f), f) for f in shortfall.failures],
            shortfall.invalid,
            shortfall.rolled_back,
        )


def summary_lines(
    source: RunRecord | RecordHead, facts: Sequence[AnyFact] | None = None
) -> list[str]:
    """The end-of-run summary of a record (or of a stored head), its values made visible;
    `facts`: the run's, when the record leaves them out (`_record.saved_facts`)."""
    shown = _Summary.of(source, facts)
    record = shown.record
    by_key = ", ".join(f"{key} {count}" for key, count in shown.keys)
    lines = [
        (
            f"stop reason  {record.outcome}"
            if record.stop_reason
            else f"status       {record.outcome}"
        )
        + f" ({visible(record.detail)})",
        f"cycles       {record.cycles}",
        f"facts        {shown.facts}" + (f" ({by_key})" if by_key else ""),
        *_rejection_lines(shown),
        f"tokens       {record.tokens}",
        f"merkle root  {visible(record.integrity.merkle_root)}",
    ]
    if record.pending:
        lines.append(f"pending      {len(record.pending)} gate(s) awaiting a human:")
        lines.extend(
            f"  {visible(gate.gate_id)}: {visible(gate.summary)}" for gate in record.pending
        )
    return lines + _failure_lines(shown)


def rejection_lines(record: RunRecord) -> list[str]:
    """`rejections   N`, then each rejection with its reason (by the gate, then by a human;
    at most `SHOWN_REJECTIONS`), one line each."""
    return _rejection_lines(_Summary.of(record, None))


def _rejection_lines(shown: _Summary) -> list[str]:
    refused = [
        f"  {visible(r.proposal.ref)} from {visible(r.suggestor)} (cycle {r.cycle}): "
        f"{visible(r.reason)}"
        for r in shown.rejections[:SHOWN_REJECTIONS]
    ]
    by_human = [
        f"  {visible(d.gate_id)} rejected by {visible(d.by)}: "
        f"{visible(d.reason or 'no reason given')}"
        for d in shown.record.trace.decisions
        if not d.approved
    ]
    count = shown.rejected + len(by_human)
    lines = [f"rejections   {count}", *(refused + by_human)[:SHOWN_REJECTIONS]]
    if count > SHOWN_REJECTIONS:
        lines.append(f"  ... and {count - SHOWN_REJECTIONS} more (`converge show` lists them)")
    return lines


def decided(fact: FactRecord) -> str:
    """What a human decided of `fact`: `", approved by NAME"` for a proposal a human let
    through, `", rejected by NAME"` for the note a human's rejection left; else `""`."""
    decision = verdict(fact)
    if decision is None:
        return ""
    said, by = decision
    return f", {said} by {visible(by)}"


def failure_lines(record: RunRecord) -> list[str]:
    """Each failure not made good, each invalid proposal and each rolled-back effect."""
    return _failure_lines(_Summary.of(record, None))


def _failure_lines(shown: _Summary) -> list[str]:
    lines: list[str] = []
    if shown.failures:
        lines.append(f"failures     {len(shown.failures)} call(s) failed and were not made good:")
        lines.extend(
            f"  {visible(f.suggestor)} ({f.phase}, cycle {cycle}, "
            f"attempt {f.attempt}, {f.outcome}): {visible(f.error or 'no error text')}"
            for cycle, f in shown.failures
        )
    if shown.invalid:
        lines.append(
            f"invalid      {len(shown.invalid)} proposal(s) were broken, not refused by a policy:"
        )
        lines.extend(
            f"  {visible(r.proposal.ref)} from {visible(r.suggestor)} (cycle {r.cycle}): "
            f"{visible(r.reason)}"
            for r in shown.invalid
        )
    if shown.rolled_back:
        lines.append(
            f"rolled back  {len(shown.rolled_back)} effect(s) broke a structural invariant:"
        )
        lines.extend(
            f"  {visible(v.invariant)} (cycle {v.cycle}): {visible(v.reason)}"
            for v in shown.rolled_back
        )
    return lines


def exit_status(record: RunRecord, *, allow_failures: bool = False) -> int:
    """The command's exit status for a run: its stop reason's, or `FAILURES` for a run that
    converged with failures (`Shortfall`: failed calls, invalid proposals, rolled-back
    effects), as `ConvergeResult.raise_for_status` raises for them (unless
    `allow_failures`); `INTERRUPTED` for a run with no stop reason."""
    stop = record.stop_reason
    if stop is None:
        return INTERRUPTED
    if stop is StopReason.CONVERGED and not allow_failures:
        if Shortfall.of(record.trace, record.rejections):
            return FAILURES
    return EXIT_CODES[stop]
