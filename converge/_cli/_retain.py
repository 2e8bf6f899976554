"""`converge prune`: delete old stored runs, with everything stored about them."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import TextIO

from .._core._escape import visible
from .._core._stop import RunStatus, StopReason
from ._read import json_document
from ._store import open_store

__all__ = ["cmd_prune"]


async def cmd_prune(args: argparse.Namespace, out: TextIO) -> int:
    """`converge prune`: delete the runs last saved more than `--older-than` ago in one
    transaction; never a running run, and a paused one only when `--status` names it and
    `--keep-paused` is not given; then, with `--vacuum`, give the space back."""
    store, label = open_store(args.store)
    status: RunStatus | StopReason | None = args.status
    paused = status in (RunStatus.PAUSED, StopReason.AWAITING_HUMAN) and not args.keep_paused
    cutoff = datetime.now(UTC) - args.older_than
    deleted = await store.prune(
        older_than=cutoff,
        status=status,
        formation=args.formation,
        paused=paused,
        dry_run=args.dry_run,
    )
    if args.vacuum and not args.dry_run:
        await store.vacuum()
    if args.json:
        out.write(json_document({"deleted": list(deleted), "dry_run": args.dry_run}))
        return 0
    verb = "would delete" if args.dry_run else "deleted"
    for run_id in deleted:
        out.write(f"{verb} {visible(run_id)}\n")
    out.write(
        f"{verb} {len(deleted)} run{'' if len(deleted) == 1 else 's'} saved before "
        f"{cutoff.isoformat(timespec='seconds')} from {visible(label)}\n"
    )
    return 0
