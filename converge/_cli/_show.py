"""`converge show`: a stored run's summary, every fact by key with its provenance, then the
rejections; its signature and its facts checked first. Of a large run stored as rows, what its
head says and its first and last facts, never the whole run.

`show --json` prints the `RunRecord`, as `run --json` prints it, and its `"signature_check"`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from typing import TextIO

from pydantic import JsonValue

from .._core._checkpoint import FactRecord
from .._core._escape import json_visible, visible
from .._core._record import RunRecord
from .._core._record_head import RecordHead
from .._core._store import RowStore
from .._core._trace import Rejection
from .._review import SignatureCheck, check_signature, signing_key
from ..stores._rows_read import broken, ends, large
from ._output import decided, program, summary_lines
from ._read import SIGNATURE_CHECK, load_record, say, verified
from ._store import open_store

__all__ = ["cmd_show"]


def _signature_line(check: SignatureCheck) -> str:
    """The `signature` line of `show`'s summary."""
    if check.failed:
        return f"signature    FAILED ({visible(check.message)})"
    if check.state == "unchecked":
        return "signature    not checked: no signing key is set"
    return "signature    verified"


def _with_member(document: str, name: str, value: JsonValue) -> str:
    """The indented JSON object `document` (as pydantic writes it) with one more member."""
    member = json.dumps(value, indent=2, ensure_ascii=False).replace("\n", "\n  ")
    inner = document.rstrip().removesuffix("}").rstrip()
    separator = "," if inner != "{" else ""
    return f"{inner}{separator}\n  {json.dumps(name)}: {member}\n}}"


async def _large_head(args: argparse.Namespace, run_id: str) -> tuple[RowStore, RecordHead] | None:
    """The store and head of `run_id` when it is a finished or paused run stored as rows with
    more than `WHOLE_SHOW` facts (read from its head alone); else `None`."""
    store, _ = open_store(args.store, read_only=True)
    head = await store.load_head(run_id, paused=True)
    return (store, head) if head is not None and large(head) else None


async def cmd_show(args: argparse.Namespace, out: TextIO) -> int:
    """`converge show`: the summary, every fact by key, then the rejections; the record's
    signature and its facts checked first, and a warning when either fails. Of a large run
    stored as rows, the head and its first and last facts (`_show_head`)."""
    large = None if args.json else await _large_head(args, args.run_id)
    if large is not None:
        return await _show_head(*large, out)
    record = await load_record(args, args.run_id)
    check = check_signature(record, signing_key())
    say(check, sys.stderr)
    inconsistent = verified(record)
    if inconsistent is not None:
        sys.stderr.write(f"warning: {visible(inconsistent)}\n")
    if args.json:
        document = _with_member(
            record.model_dump_json(indent=2), SIGNATURE_CHECK, check.model_dump()
        )
        out.write(json_visible(document) + "\n")
        return 0
    name = f" ({visible(record.name)})" if record.name else ""
    out.write(f"run {visible(record.run_id)}{name}\n")
    out.write("\n".join(summary_lines(record)) + "\n")
    out.write(_signature_line(check) + "\n")
    _write_lineage(out, record)
    if inconsistent is not None:
        out.write(f"integrity    FAILED ({visible(inconsistent)})\n")
    _write_facts(out, record.facts)
    _write_rejections(out, record.rejections)
    return 0


def _write_lineage(out: TextIO, record: RunRecord) -> None:
    lineage = record.lineage
    if lineage is not None:
        out.write(
            f"forked from  {visible(lineage.parent_run_id)} at cycle {lineage.at_cycle} "
            f"(root {visible(lineage.parent_root[:12])}, {lineage.kind})\n"
        )


def _write_facts(out: TextIO, facts: Iterable[FactRecord]) -> None:
    """Each fact in two lines, under its key's name whenever the key changes."""
    key = None
    for fact in facts:
        if fact.key is not key:
            key = fact.key
            out.write(f"\n{key.value}:\n")
        promotion = fact.promotion
        out.write(
            f"  {visible(fact.id)}: {visible(fact.content)}\n"
            f"    by {visible(fact.provenance)}, confidence {fact.confidence}, "
            f"cycle {promotion.cycle}, gate {visible(promotion.gate)}{decided(fact)}\n"
        )


def _write_rejections(out: TextIO, rejections: Sequence[Rejection], more: int = 0) -> None:
    if rejections:
        out.write("\nrejections:\n")
        for rejection in rejections:
            out.write(
                f"  {visible(rejection.proposal.ref)} from {visible(rejection.suggestor)} "
                f"(cycle {rejection.cycle}): {visible(rejection.reason)}\n"
            )
    if more:
        out.write(f"  ... and {more} more (`converge show --json` lists them)\n")


async def _show_head(store: RowStore, head: RecordHead, out: TextIO) -> int:
    """`show` of a large run stored as rows: what its head says (its signature checked), the
    first and last `SHOWN_FACTS` facts in promotion order, and the first rejections. The rows
    are not checked here (`converge verify` checks them all, a page at a time)."""
    record = head.record
    check = check_signature(head, signing_key())
    say(check, sys.stderr)
    run_id = visible(record.run_id)
    name = f" ({visible(record.name)})" if record.name else ""
    out.write(f"run {run_id}{name}\n")
    out.write("\n".join(summary_lines(head)) + "\n")
    signature = _signature_line(check)
    if not check.failed and check.state == "verified":
        signature += " (the head's; the rows below are not: `verify` checks them)"
    out.write(signature + "\n")
    _write_lineage(out, record)
    out.write(
        f"rows         {head.journal_length} journal entries, not read by show: "
        f"`{visible(program())} verify {run_id}` checks every fact\n"
    )
    shown = await ends(store, head)
    first, last = shown.first, shown.last
    problem = broken(record.run_id, [*first, *last])
    if problem is not None:
        sys.stderr.write(f"warning: {visible(problem)}\n")
        out.write(f"integrity    FAILED ({visible(problem)})\n")
    out.write(f"\nthe first {len(first)} facts, in promotion order:\n")
    _write_facts(out, first)
    out.write(f"\nthe last {len(last)} facts, in promotion order:\n")
    _write_facts(out, last)
    hidden = record.integrity.fact_count - len(first) - len(last)
    out.write(f"\n... {hidden} facts not shown (`{visible(program())} export {run_id}`)\n")
    _write_rejections(out, head.shown_rejections, head.rejections - len(head.shown_rejections))
    return 0
