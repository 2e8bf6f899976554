"""`converge replay`: a stopped run's recorded effects and decisions merged again with its
formation's engine, calling no suggestor; the result must have the stored integrity proof.

`replay --json` prints `{"replayed", "run_id", "cycles", "merkle_root",
"replay_merkle_root"}`, and `"error"` when it failed.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from pydantic import JsonValue

from .._core._error import UsageError
from .._core._escape import VisibleLines, visible
from .._core._exceptions import ReplayError
from .._core._record import RunRecord
from .._core._record_head import RecordHead
from .._core._result import ConvergeResult
from .._core._store import RowStore
from .._core._trace import RunTrace
from .._formation import load_formation
from .._review import formation_locator, signing_key
from ..stores._rows_replay import JournalCycles
from ._output import VERIFY_FAILED
from ._read import json_document
from ._store import open_store

__all__ = ["cmd_replay"]


async def _replay(
    args: argparse.Namespace, record: RunRecord, rows: tuple[RowStore, RecordHead] | None
) -> tuple[ConvergeResult | None, str | None]:
    """Replay `record`'s trace, or with `rows` that of the run stored as rows, its cycles
    read from its entries as the replay reaches them: the result, and why it is not the run
    (`None` when it is)."""
    named = record if rows is None else rows[1]
    locator = formation_locator(named, args.formation, signing_key(), VisibleLines(sys.stderr))
    engine = load_formation(locator).engine()
    # read the trace again now that the formation has declared its keys (a store keeps a name
    # it did not know as an undeclared key, and replay refuses those); the entries' cycles
    # are read so as they come
    trace = RunTrace.model_validate(record.trace.model_dump())
    cycles = None if rows is None else JournalCycles(*rows)
    try:
        replayed = await engine._replay_cycles(trace, cycles)  # pyright: ignore[reportPrivateUsage]
    except ReplayError as error:
        return None, str(error).strip()
    if replayed.integrity != record.integrity:
        return replayed, (
            f"replay gives root {replayed.integrity.merkle_root}, "
            f"the run recorded {record.integrity.merkle_root}"
        )
    return replayed, None


async def cmd_replay(args: argparse.Namespace, out: TextIO) -> int:
    """`converge replay`: merge a stopped run's recorded effects again; same proof or fail.

    With a key, the record's signature (a run stored as rows: its head's) is checked first,
    whichever formation replays it. A finished run stored as rows (not a fork) is replayed
    from its head and its entries, a page at a time, never loaded whole.
    """
    store, _ = open_store(args.store, read_only=True)
    head = await store.load_head(args.run_id)
    rows = None
    if head is not None and head.record.lineage is None:
        head.verify_signature(signing_key())
        record, rows = head.record, (store, head)
    else:
        record = await store.load(args.run_id)
        record.verify_signature(signing_key())
    if record.stop_reason is None:
        raise UsageError(
            f"run {record.run_id} is {record.status.value}: only a stopped run can be replayed",
            f"continue it first: converge resume {record.run_id}",
        )
    replayed, error = await _replay(args, record, rows)
    if args.json:
        document: dict[str, JsonValue] = {
            "replayed": error is None,
            "run_id": record.run_id,
            "cycles": None if replayed is None else replayed.cycles,
            "merkle_root": record.integrity.merkle_root,
            "replay_merkle_root": None if replayed is None else replayed.integrity.merkle_root,
        }
        if error is not None:
            document["error"] = error
        out.write(json_document(document))
    elif error is not None or replayed is None:
        out.write(f"FAILED: {visible(error)}\n")
    else:
        out.write(
            f"replayed: run {visible(record.run_id)}, {replayed.cycles} cycles, "
            f"no suggestor called, same root {visible(replayed.integrity.merkle_root)}\n"
        )
    return 0 if error is None else VERIFY_FAILED
