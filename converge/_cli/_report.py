"""`converge report`: a stored run's HTML report, written again anywhere; and `write_report`,
which `run`, `resume` and `fork` call to write a new run's report beside the store.

The renderer (`converge._report._render`) is imported only when a report is written.

`report --json` prints `{"report": PATH}`.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from .._core._checkpoint import AnyFact
from .._core._error import UsageError
from .._core._escape import visible
from .._core._record import RunRecord, saved_facts
from .._core._result import ConvergeResult
from .._review import signing_key
from ._read import json_document, load_record
from ._store import open_store, report_path, store_argument

__all__ = ["cmd_report", "new_record", "write_report"]


def write_report(
    record: RunRecord,
    path: Path,
    where: str,
    *,
    built: bool = False,
    facts: Sequence[AnyFact] | None = None,
) -> Path | None:
    """Write the run's HTML report; `where` (`store_argument`) goes into its commands.

    `built`: `record` was just built by `RunRecord.of` from a live result, so its facts were
    checked then (`render_built_report`; `facts`: the result's own, when the record leaves
    them out); a stored record is checked as it is rendered.
    """
    try:
        report = importlib.import_module("converge._report._render")
    except ImportError:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    if built:
        html: str = report.render_built_report(record, store_argument=where, facts=facts)
    else:
        html = report.render_report(record, store_argument=where)
    path.write_text(html, encoding="utf-8")
    return path


def new_record(
    result: ConvergeResult, name: str | None, formation: str, key: bytes | None
) -> tuple[RunRecord, Sequence[AnyFact]]:
    """The record of a run `run`, `resume` or `fork` just ran, and its facts, for its summary
    and report: the record its engine saved (`saved_facts`: less its facts, when they were
    saved as rows), else one built now."""
    saved = saved_facts(result)
    if saved is not None:
        return saved
    record = RunRecord.of(result, name=name, formation=formation, key=key)
    return record, record.facts


async def cmd_report(args: argparse.Namespace, out: TextIO) -> int:
    """`converge report`: write a stored run's HTML report again, anywhere."""
    _, label = open_store(args.store, read_only=True)
    record = await load_record(args, args.run_id)
    record.verify_signature(signing_key())
    path = Path(args.output) if args.output else report_path(label, record.run_id)
    written = write_report(record, path, store_argument(args.store))
    if written is None:
        raise UsageError("this converge has no HTML report module")
    if args.json:
        out.write(json_document({"report": str(written)}))
    else:
        out.write(f"report written to {visible(written)}\n")
    return 0
