"""What the `converge` command needs besides argument parsing: loading, stores, output."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final, TextIO, final

from ._events import CycleFinished, CycleStarted, EngineEvent, FactPromoted, ProposalRejected
from ._formation import Formation
from ._key import ContextKey
from ._stop import StopReason
from ._store import RunRecord, RunStore
from .stores import PostgresRunStore, SqliteRunStore

__all__ = [
    "DEFAULT_STORE",
    "EXIT_CODES",
    "CliError",
    "Progress",
    "load_formation",
    "locate",
    "open_store",
    "summary_lines",
]

DEFAULT_STORE: Final = Path(".converge") / "runs.db"

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
"""Exit status per stop reason; 1 is an error, 2 a usage error, 7 a failed verify/replay."""


class CliError(Exception):
    """A problem to report as one line plus a hint, without a traceback."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


def locate(locator: str) -> str:
    """The locator to store: an absolute path for a file, the module name otherwise."""
    path = Path(locator)
    return str(path.resolve()) if locator.endswith(".py") or path.exists() else locator


def load_formation(locator: str) -> Formation:
    """The `formation` of a Python file (a path) or of an importable module (a dotted name)."""
    path = Path(locator)
    if locator.endswith(".py") or path.exists():
        if not path.is_file():
            raise CliError(f"no formation file at {locator}", "give a .py file or a module name")
        path = path.resolve()
        folder = str(path.parent)
        if folder not in sys.path:  # as `python file.py` would, so its sibling imports work
            sys.path.insert(0, folder)
        name = f"converge_formation_{abs(hash(path))}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise CliError(f"cannot load {locator} as Python")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    else:
        if "" not in sys.path and os.getcwd() not in sys.path:  # as `python -m` would
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(locator)
        except ModuleNotFoundError as error:
            raise CliError(
                f"cannot import {locator!r}: {error}",
                "give a path to a .py file, or a module on the Python path",
            ) from None
    formation: object = getattr(module, "formation", None)
    if not isinstance(formation, Formation):
        raise CliError(
            f"{locator} has no module-level `formation` (a converge.Formation)",
            "define `formation = Formation(name=..., suggestors=(...))` in it",
        )
    return formation


def open_store(option: str | None) -> tuple[RunStore, str]:
    """The store named by `--store`, `CONVERGE_STORE`, or the default SQLite file."""
    target = option or os.environ.get("CONVERGE_STORE") or str(DEFAULT_STORE)
    if target.startswith(("postgresql://", "postgres://")):
        return PostgresRunStore(target), "PostgreSQL store"
    return SqliteRunStore(target), target


def _counts(keys: dict[ContextKey, int]) -> str:
    return ", ".join(f"{key.value} {count}" for key, count in keys.items() if count) or "none"


@final
class Progress:
    """An observer printing one line per cycle: eligible, facts per key, rejections, elapsed."""

    def __init__(self, out: TextIO, clock: Callable[[], float] = time.perf_counter) -> None:
        self._out = out
        self._clock = clock
        self._started = clock()
        self._cycle_added: dict[ContextKey, int] = {}
        self._rejected = 0

    def on_event(self, event: EngineEvent, /) -> None:
        """Track promotions and rejections; print at the end of each cycle."""
        if isinstance(event, CycleStarted):
            self._cycle_added = {}
            self._rejected = 0
        elif isinstance(event, FactPromoted):
            key = ContextKey(event.ref.partition("/")[0])
            self._cycle_added[key] = self._cycle_added.get(key, 0) + 1
        elif isinstance(event, ProposalRejected):
            self._rejected += 1
        elif isinstance(event, CycleFinished):
            elapsed = (self._clock() - self._started) * 1000.0
            held = f", {event.held} held" if event.held else ""
            self._out.write(
                f"  cycle {event.cycle:>3}: {event.eligible} eligible, "
                f"+{event.promoted} facts ({_counts(self._cycle_added)}), "
                f"{event.rejected} rejected{held}; {event.facts} facts in all; "
                f"{elapsed:.0f} ms\n"
            )
            self._out.flush()


def summary_lines(record: RunRecord) -> list[str]:
    """The end-of-run summary."""
    by_key: dict[str, int] = {}
    for fact in record.facts:
        by_key[fact.key.value] = by_key.get(fact.key.value, 0) + 1
    lines = [
        f"stop reason  {record.stop_reason.value} ({record.detail})",
        f"cycles       {record.cycles}",
        f"facts        {len(record.facts)}"
        + (f" ({', '.join(f'{k} {n}' for k, n in by_key.items())})" if by_key else ""),
        f"rejections   {len(record.rejections)}",
        f"tokens       {record.tokens}",
        f"merkle root  {record.integrity.merkle_root}",
    ]
    if record.pending:
        lines.append(f"pending      {len(record.pending)} gate(s) awaiting a human:")
        lines.extend(f"  {gate.gate_id}: {gate.summary}" for gate in record.pending)
    return lines
