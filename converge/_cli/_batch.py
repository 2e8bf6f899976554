"""`converge batch FORMATION INPUTS.jsonl`: one run per input line, on a Dask cluster.

The cluster is a `LocalCluster` of `--workers` processes on this machine, or an existing one
(`--scheduler ADDRESS`). Workers import the formation and open the store themselves, so the
store is passed on as its URL or as the absolute path of its SQLite file. `distributed` is
imported here, inside the command, never when `converge` is imported.
"""

from __future__ import annotations

import argparse
import math
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Final, TextIO, cast, final

import anyio
import anyio.to_thread
from pydantic import ValidationError

from .._core._error import UsageError
from .._core._escape import error_text, json_visible, visible
from .._core._model import FrozenModel
from .._core._proposal import ProposedFact
from .._formation import load_formation, locate
from .._review import signing_key
from .._scale._batch import BatchResult, run_id_of
from ._output import BATCH_INCOMPLETE, FAILURES
from ._store import given_store, open_store

if TYPE_CHECKING:
    from distributed import Client

__all__ = [
    "DEFAULT_WORKERS",
    "batch_status",
    "cmd_batch",
    "read_inputs",
    "read_lines",
    "store_target",
    "summary",
]

DEFAULT_WORKERS: Final = 2
"""Worker processes of the local cluster when neither --workers nor --scheduler is given."""
PLAIN_LINES: Final = 10
"""About how many progress lines a batch prints when standard output is not a terminal."""
LISTED: Final = 20
"""Runs or inputs the summary lists under each heading (`--json` has them all)."""
_WITH_FAILURES: Final = "converged_with_failures"


@final
class _Line(FrozenModel, frozen=True):
    """One line of INPUTS.jsonl: the facts one run starts from."""

    inputs: tuple[ProposedFact, ...]


def read_inputs(path: str) -> list[tuple[ProposedFact, ...]]:
    """The input sets of INPUTS.jsonl, one per non-blank line.

    Raises:
        UsageError: The file cannot be read, has no input, or a line is not `{"inputs": [...]}`.
    """
    return [facts for _, facts in read_lines(path)]


def read_lines(path: str) -> list[tuple[int, tuple[ProposedFact, ...]]]:
    """`(line number, input set)` of each non-blank line of INPUTS.jsonl.

    Raises:
        UsageError: The file cannot be read, has no input, or a line is not `{"inputs": [...]}`.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"cannot read {path}: {error_text(error)}") from None
    found: list[tuple[int, tuple[ProposedFact, ...]]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            found.append((number, _Line.model_validate_json(line).inputs))
        except ValidationError as error:
            raise UsageError(
                f"{path} line {number}: {error_text(error)}",
                'each line is one JSON object {"inputs": [ProposedFact, ...]}',
            ) from None
    if not found:
        raise UsageError(f"{path} has no input lines")
    return found


def store_target(option: str | None) -> str:
    """The store the workers open: a PostgreSQL URL, or a SQLite file's absolute path."""
    target = given_store(option)
    if target.startswith(("postgresql://", "postgres://")):
        return target
    return str(Path(target).expanduser().resolve())


def _load(locator: str) -> None:
    """Import the formation here first: one clear error before any cluster starts."""
    try:
        load_formation(locator)
    except UsageError:
        raise
    except Exception as error:
        raise UsageError(
            f"formation {locator} failed to load: {type(error).__name__}: {error_text(error)}",
            "rerun with --debug for a traceback",
        ) from error


def _client(args: argparse.Namespace) -> AbstractContextManager[Client]:
    """A synchronous client of the cluster the options name (in a thread: it blocks).

    Raises:
        UsageError: `--scheduler` cannot be reached within `--connect-timeout`.
    """
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise UsageError(
            "converge batch needs Dask distributed, which is not installed",
            "install the `dask` extra: pip install 'converge-engine[dask]'",
        ) from None
    if args.scheduler:
        try:
            return _Owned(Client(args.scheduler, timeout=args.connect_timeout), None)
        except (OSError, TimeoutError) as error:
            raise UsageError(
                f"cannot reach the scheduler at {args.scheduler} within "
                f"{args.connect_timeout:g} s: {type(error).__name__}: {error_text(error)}",
                "check the address, or raise --connect-timeout",
            ) from None
    cluster = LocalCluster(
        n_workers=args.workers or DEFAULT_WORKERS,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=cast("str", None),  # None: no dashboard (the stubs say str)
        # the scheduler's HTTP server (health, metrics) on a free port, not 8787 or a warning
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
    )
    return _Owned(Client(cluster), cluster)


@final
class _Owned(AbstractContextManager["Client"]):
    """A client, and the cluster it owns if any: closing it closes the cluster too."""

    def __init__(self, client: Client, cluster: AbstractContextManager[object] | None) -> None:
        self._client = client
        self._cluster = cluster

    def __enter__(self) -> Client:
        return self._client

    def __exit__(self, *exc: object) -> None:
        try:
            self._client.close()  # pyright: ignore[reportUnknownMemberType]
        finally:
            if self._cluster is not None:
                self._cluster.__exit__(None, None, None)


@final
class BatchProgress:
    """`batch: STORED/TOTAL runs stored`: rewritten in place on a terminal, else ~10 lines.

    Only runs the store holds count, never inputs merely submitted or given up on.
    """

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._tty = out.isatty()
        self._next = 0
        self._open = False
        self._lock = threading.Lock()

    def __call__(self, stored: int, total: int) -> None:
        """Show that `stored` of `total` inputs are stored runs (called from any thread)."""
        with self._lock:
            line = f"batch: {stored}/{total} runs stored"
            if self._tty:
                self._out.write(f"\r{line}")
                self._open = True
            elif stored >= self._next or stored >= total:
                self._out.write(line + "\n")
                self._next = stored + math.ceil(total / PLAIN_LINES)
            self._out.flush()

    def close(self) -> None:
        """End the line rewritten in place, if any."""
        with self._lock:
            if self._open:
                self._out.write("\n")
                self._open = False


async def cmd_batch(args: argparse.Namespace, out: TextIO) -> int:
    """`converge batch`: run every input line, print the summary; exit 0 if all are stored
    and none converged with failures (9, unless `--allow-failures`; 10 if one is not stored).

    The parser's types have checked `--workers`, `--runs-per-worker`, `--lease` and
    `--connect-timeout`.
    """
    from ..dask import run_batch

    lines = read_lines(args.inputs)
    locator = locate(args.formation)
    _load(locator)
    target = store_target(args.store)
    open_store(target)  # creates the file and its tables once, before the workers race
    if not args.json:
        where = f"scheduler {args.scheduler}" if args.scheduler else "a local cluster"
        out.write(f"converge: batch of {len(lines)} runs of {visible(locator)} on {where}\n")
        out.flush()
    client = await anyio.to_thread.run_sync(_client, args)
    progress = None if args.json else BatchProgress(out)
    try:
        result = await run_batch(
            locator,
            [facts for _, facts in lines],
            client.__enter__(),
            target,
            batch_id=args.batch_id,
            runs_per_worker=args.runs_per_worker,
            lease=args.lease,
            progress=progress,
            rerun_changed=args.rerun_changed,
            worker_timeout=args.connect_timeout,
            signing_key=signing_key(),
        )
    except TimeoutError as error:
        raise UsageError(error_text(error), "start workers, or raise --connect-timeout") from None
    finally:
        if progress is not None:
            progress.close()
        await anyio.to_thread.run_sync(client.__exit__, None, None, None)
    if args.json:
        out.write(json_visible(result.model_dump_json(indent=2)) + "\n")
    else:
        numbers = [number for number, _ in lines]
        out.write("\n".join(summary(result, target, numbers, args.allow_failures)) + "\n")
    return batch_status(result, allow_failures=args.allow_failures)


def batch_status(result: BatchResult, *, allow_failures: bool = False) -> int:
    """10 when an input is not stored, else 9 when a run converged with failures (unless
    `allow_failures`), else 0."""
    if not result.complete:
        return BATCH_INCOMPLETE
    if result.with_failures and not allow_failures:
        return FAILURES
    return 0


def _listed(entries: list[str], more: str) -> list[str]:
    """At most `LISTED` entries, and a line saying how many more there are."""
    shown = entries[:LISTED]
    if len(entries) > LISTED:
        shown.append(f"  ... and {len(entries) - LISTED} more {more} (--json lists every one)")
    return shown


def _run_lines(result: BatchResult, line: Callable[[int], str]) -> list[str]:
    """The runs that converged with failures, those that did not converge, and the changed
    inputs that ran as new runs, each under its heading (none when there is none)."""
    lines: list[str] = []
    failed = result.with_failures
    if failed:
        lines.append(
            f"with failures {len(failed)} run(s) converged with failed calls or rolled-back "
            "effects:"
        )
        entries = [
            f"  {line(run.index)} ({visible(run.run_id)}): {run.failures} failure(s), first "
            f"{visible(run.first_failure or 'not recorded')}"
            for run in failed
        ]
        lines.extend(_listed(entries, "runs with failures"))
    stopped = [run for run in result.runs if run.outcome not in ("converged", _WITH_FAILURES)]
    if stopped:
        lines.append(f"not converged {len(stopped)} run(s) stopped for another reason:")
        entries = [f"  {line(run.index)} ({visible(run.run_id)}): {run.outcome}" for run in stopped]
        lines.extend(_listed(entries, "runs"))
    changed = [run for run in result.runs if run.run_id != run_id_of(result.batch_id, run.index)]
    if changed:
        lines.append(f"changed      {len(changed)} changed input(s) ran as new runs:")
        entries = [f"  {line(run.index)}: {visible(run.run_id)}" for run in changed]
        lines.extend(_listed(entries, "changed inputs"))
    return lines


def summary(
    result: BatchResult,
    target: str,
    numbers: Sequence[int] = (),
    allow_failures: bool = False,
) -> list[str]:
    """The batch's summary: counts per outcome, where the runs are, the runs that converged
    with failures (each with its first failure), those that did not converge, the inputs
    that changed and each input not stored. `numbers` are the inputs' line numbers."""

    def line(index: int) -> str:
        return f"line {numbers[index]}" if index < len(numbers) else f"input {index}"

    batch = visible(result.batch_id)
    total = len(result.runs) + len(result.failures)
    counts = ", ".join(
        f"{reason.replace('_with_', ' with ')} {count}" for reason, count in result.counts().items()
    )
    postgres = target.startswith(("postgresql://", "postgres://"))
    store = "the PostgreSQL store" if postgres else visible(target)
    listing = "converge --store URL runs" if postgres else f"converge --store {store} runs"
    lines = [
        f"batch        {batch}: {len(result.runs)} of {total} inputs stored as runs",
        f"stop reasons {counts or 'none'}",
        f"runs         {batch}-0 to {batch}-{total - 1} in {store} ({listing})",
    ]
    lines.extend(_run_lines(result, line))
    if result.failures:
        lines.append(f"failures     {len(result.failures)} input(s) did not end as a stored run:")
        entries = [
            f"  {line(failure.index)} ({visible(failure.run_id)}): {visible(failure.error)}"
            for failure in result.failures
        ]
        lines.extend(_listed(entries, "inputs"))
        lines.append(
            f"incomplete: exit status {BATCH_INCOMPLETE}; "
            "run the same command with --batch-id to complete the batch"
        )
    elif result.with_failures and not allow_failures:
        lines.append(
            f"converged, but with failures: exit status {FAILURES} (--allow-failures exits 0)"
        )
    return lines
