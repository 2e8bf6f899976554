"""`converge runs`: one page of the stored runs, the most recently saved first, each with what
checking its signature found, which run it forks and how many listed runs fork it.

`runs --json` prints a list of `RunSummary` objects, each with its `"signature_check"` and
`"forks_listed"`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import TextIO

from pydantic import JsonValue

from .._core._escape import visible
from .._review import CheckedRun, check_listed, signing_key
from ._read import SIGNATURE_CHECK, json_document, say
from ._store import open_store

__all__ = ["cmd_runs"]


async def cmd_runs(args: argparse.Namespace, out: TextIO) -> int:
    """`converge runs`: one page of the stored runs the filters take, the most recently
    saved first, selected by the store's query and each checked (`check_listed`)."""
    store, label = open_store(args.store, read_only=True)
    key = signing_key()
    summaries = await store.list_runs(
        limit=args.limit,
        offset=args.offset,
        status=args.status,
        formation=args.formation,
        pending=True if args.pending else None,
        since=args.since,
        search=args.search,
    )
    listed = await check_listed(store, summaries, key)
    _say_listed(listed, key)
    forks = _forks_listed(listed)
    if args.json:
        documents: list[JsonValue] = [
            {
                **run.summary.model_dump(mode="json"),
                SIGNATURE_CHECK: run.check.model_dump(mode="json"),
                "forks_listed": forks.get(run.summary.run_id, 0),
            }
            for run in listed
        ]
        out.write(json_document(documents))
        return 0
    if not listed:
        filtered = any(
            (args.status, args.formation, args.pending, args.since, args.search, args.offset)
        )
        out.write(f"no {'such ' if filtered else ''}runs in {visible(label)}\n")
        return 0
    for checked in listed:
        out.write(_run_line(checked, forks))
    if len(listed) == args.limit:
        sys.stderr.write(f"note: more may follow: --offset {args.offset + args.limit}\n")
    return 0


def _say_listed(listed: Sequence[CheckedRun], key: bytes | None) -> None:
    """Say on standard error which listed runs failed their check, and that none is
    authenticated when no key is set."""
    for run in listed:
        if run.check.failed:
            say(run.check, sys.stderr)
    if listed and key is None:
        sys.stderr.write(
            "note: these runs are not authenticated (no signing key is set); anyone with "
            "write access to the store could have changed them\n"
        )


def _forks_listed(listed: Sequence[CheckedRun]) -> dict[str, int]:
    """How many of the listed runs fork each run, by the id of the run they fork."""
    forks: dict[str, int] = {}
    for run in listed:
        parent = run.summary.parent_run_id
        if parent is not None:
            forks[parent] = forks.get(parent, 0) + 1
    return forks


def _run_line(checked: CheckedRun, forks: Mapping[str, int]) -> str:
    """The line of `converge runs` for one listed run; `forks` as `_forks_listed` counts."""
    run = checked.summary
    mark = "  signature FAILED" if checked.check.failed else ""
    if run.parent_run_id is not None:
        mark += f"  fork of {visible(run.parent_run_id[:12])}@{run.fork_cycle}"
    if run.run_id in forks:
        count = forks[run.run_id]
        mark += f"  {count} fork{'s' if count > 1 else ''} listed"
    if run.pending:
        mark += f"  {run.pending} gate{'s' if run.pending > 1 else ''} waiting"
    reason = run.stop_reason.value if run.stop_reason else "-"
    if run.failures:
        reason += f", {run.failures} failure{'s' if run.failures > 1 else ''}"
    return (
        f"{visible(run.run_id)}  {run.saved_at.isoformat(timespec='seconds')}  "
        f"{run.status.value:<11} {reason:<22} "
        f"{run.cycles:>3} cycles {run.fact_count:>5} facts  {visible(run.name or '')}"
        f"{mark}\n"
    )
