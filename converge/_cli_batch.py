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
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Final, TextIO, cast, final

import anyio
import anyio.to_thread
from pydantic import ValidationError

from ._batch import BatchResult
from ._cli_store import given_store, open_store
from ._cli_support import (
    BATCH_INCOMPLETE,
    CliError,
    error_text,
    json_visible,
    load_formation,
    locate,
    visible,
)
from ._model import FrozenModel
from ._proposal import ProposedFact

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["DEFAULT_WORKERS", "cmd_batch", "read_inputs", "store_target"]

DEFAULT_WORKERS: Final = 2
"""Worker processes of the local cluster when neither --workers nor --scheduler is given."""
PLAIN_LINES: Final = 10
"""About how many progress lines a batch prints when standard output is not a terminal."""


@final
class _Line(FrozenModel, frozen=True):
    """One line of INPUTS.jsonl: the facts one run starts from."""

    inputs: tuple[ProposedFact, ...]


def read_inputs(path: str) -> list[tuple[ProposedFact, ...]]:
    """The input sets of INPUTS.jsonl, one per non-blank line.

    Raises:
        CliError: The file cannot be read, has no input, or a line is not `{"inputs": [...]}`.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise CliError(f"cannot read {path}: {error_text(error)}") from None
    found: list[tuple[ProposedFact, ...]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            found.append(_Line.model_validate_json(line).inputs)
        except ValidationError as error:
            raise CliError(
                f"{path} line {number}: {error_text(error)}",
                'each line is one JSON object {"inputs": [ProposedFact, ...]}',
            ) from None
    if not found:
        raise CliError(f"{path} has no input lines")
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
    except CliError:
        raise
    except Exception as error:
        raise CliError(
            f"formation {locator} failed to load: {type(error).__name__}: {error_text(error)}",
            "rerun with --debug for a traceback",
        ) from error


def _client(args: argparse.Namespace) -> AbstractContextManager[Client]:
    """A synchronous client of the cluster the options name (in a thread: it blocks)."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise CliError(
            "converge batch needs Dask distributed, which is not installed",
            "install the `dask` extra: pip install 'converge-engine[dask]'",
        ) from None
    if args.scheduler:
        return _Owned(Client(args.scheduler), None)
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
    """`batch: DONE/TOTAL runs stored`: rewritten in place on a terminal, else ~10 lines."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._tty = out.isatty()
        self._next = 0
        self._lock = threading.Lock()

    def __call__(self, done: int, total: int) -> None:
        """Show that `done` of `total` inputs have ended (called from any thread)."""
        with self._lock:
            line = f"batch: {done}/{total} runs stored"
            if self._tty:
                self._out.write(f"\r{line}" + ("\n" if done >= total else ""))
            elif done >= self._next or done >= total:
                self._out.write(line + "\n")
                self._next = done + math.ceil(total / PLAIN_LINES)
            self._out.flush()


async def cmd_batch(args: argparse.Namespace, out: TextIO) -> int:
    """`converge batch`: run every input line, print the summary; exit 0 if all are stored.

    The parser's types have checked `--workers`, `--runs-per-worker` and `--lease`.
    """
    from .dask import run_batch

    inputs = read_inputs(args.inputs)
    locator = locate(args.formation)
    _load(locator)
    target = store_target(args.store)
    open_store(target)  # creates the file and its tables once, before the workers race
    if not args.json:
        where = f"scheduler {args.scheduler}" if args.scheduler else "a local cluster"
        out.write(f"converge: batch of {len(inputs)} runs of {visible(locator)} on {where}\n")
        out.flush()
    client = await anyio.to_thread.run_sync(_client, args)
    try:
        result = await run_batch(
            locator,
            inputs,
            client.__enter__(),
            target,
            batch_id=args.batch_id,
            runs_per_worker=args.runs_per_worker,
            lease=args.lease,
            progress=None if args.json else BatchProgress(out),
        )
    finally:
        await anyio.to_thread.run_sync(client.__exit__, None, None, None)
    if args.json:
        out.write(json_visible(result.model_dump_json(indent=2)) + "\n")
    else:
        out.write("\n".join(summary(result, target)) + "\n")
    return 0 if result.ok else BATCH_INCOMPLETE


def summary(result: BatchResult, target: str) -> list[str]:
    """The batch's summary: counts per stop reason, where the runs are, each failure."""
    batch = visible(result.batch_id)
    total = len(result.runs) + len(result.failures)
    counts = ", ".join(f"{reason} {count}" for reason, count in result.counts().items())
    postgres = target.startswith(("postgresql://", "postgres://"))
    store = "the PostgreSQL store" if postgres else visible(target)
    listing = "converge --store URL runs" if postgres else f"converge --store {store} runs"
    lines = [
        f"batch        {batch}: {len(result.runs)} of {total} inputs stored as runs",
        f"stop reasons {counts or 'none'}",
        f"runs         {batch}-0 to {batch}-{total - 1} in {store} ({listing})",
    ]
    if result.failures:
        lines.append(f"failures     {len(result.failures)} input(s) did not end as a stored run:")
        lines.extend(
            f"  input {failure.index} ({visible(failure.run_id)}): {visible(failure.error)}"
            for failure in result.failures
        )
        lines.append(
            f"incomplete: exit status {BATCH_INCOMPLETE}; "
            "run the same command with --batch-id to complete the batch"
        )
    return lines
