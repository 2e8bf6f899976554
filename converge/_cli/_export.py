"""`converge export RUN_ID`: every fact of a stored run, in order, as JSON lines or CSV.

The HTML report lists a bounded page of each key's facts; this is the command for those who
need them all. It checks the run first (its signature, every fact's digest, their order and
the Merkle root, as `verify` does) and writes nothing when the check fails, so an exported
file is never the only copy of a forged run. Then it writes one fact at a time.

- `jsonl`: one `FactRecord` a line, exactly as stored (`key`, `id`, `content`, `payload`,
  `confidence`, `provenance`, `target`, `evidence`, `promotion`, `digest`); invisible and
  control characters written as `\\uXXXX` escapes, which JSON reads back as the same text.
- `csv`: a header row, then one row a fact: the promotion record in its own columns, the
  evidence and payload as JSON. Made to be opened in a spreadsheet: texts are made visible
  as in every other output of the command (`\\x1b`, `\\u202e`), and a text cell beginning
  with `=`, `+`, `-`, `@`, a tab or a carriage return starts with `'` so that no
  spreadsheet runs it as a formula. `jsonl` is the exact form.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Final, TextIO

from .._core._checkpoint import FactRecord
from .._core._escape import json_visible, visible
from .._review import signing_key
from ._output import VERIFY_FAILED
from ._read import checked_facts, json_document, load_record

__all__ = ["CSV_COLUMNS", "cmd_export", "csv_rows", "jsonl_lines"]

CSV_COLUMNS: Final = (
    "key",
    "id",
    "content",
    "confidence",
    "provenance",
    "target",
    "evidence",
    "payload",
    "cycle",
    "clock",
    "suggestor",
    "suggestor_id",
    "gate",
    "approved_by",
    "digest",
)
"""The CSV header, in column order."""

_FORMULA: Final = ("=", "+", "-", "@", "\t", "\r")


def jsonl_lines(facts: Iterable[FactRecord]) -> Iterator[str]:
    """Each fact as one line of JSON, hidden characters escaped (same value)."""
    for fact in facts:
        yield json_visible(fact.model_dump_json()) + "\n"


def _cell(text: str) -> str:
    shown = visible(text, lines=True)
    return "'" + shown if shown.startswith(_FORMULA) else shown


def csv_rows(facts: Iterable[FactRecord]) -> Iterator[list[str]]:
    """The header, then each fact as a row of `CSV_COLUMNS`."""
    yield list(CSV_COLUMNS)
    for fact in facts:
        promotion = fact.promotion
        payload = "" if fact.payload is None else json.dumps(fact.payload, ensure_ascii=False)
        yield [
            fact.key.value,
            _cell(fact.id),
            _cell(fact.content),
            repr(fact.confidence),
            _cell(fact.provenance),
            "" if fact.target is None else fact.target.value,
            _cell(json.dumps(list(fact.evidence), ensure_ascii=False)),
            _cell(payload),
            str(promotion.cycle),
            str(promotion.clock),
            _cell(promotion.suggestor),
            str(promotion.suggestor_id),
            promotion.gate,
            "" if promotion.approved_by is None else _cell(promotion.approved_by),
            fact.digest,
        ]


def _write(facts: Iterable[FactRecord], form: str, out: TextIO) -> int:
    count = 0
    if form == "csv":
        writer = csv.writer(out, lineterminator="\n")
        for row in csv_rows(facts):
            writer.writerow(row)
            count += 1
        return count - 1
    for line in jsonl_lines(facts):
        out.write(line)
        count += 1
    return count


def _write_file(facts: Iterable[FactRecord], form: str, path: Path) -> int:
    """Write the facts to a temporary file beside `path`, then put it in its place: an
    interrupted export leaves the file as it was. How many facts were written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as file:
            count = _write(facts, form, file)
        Path(temporary).replace(path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return count


async def cmd_export(args: argparse.Namespace, out: TextIO) -> int:
    """`converge export`: check a stored run, then write every fact, in order."""
    record = await load_record(args, args.run_id)
    record.verify_signature(signing_key())
    facts, problem = checked_facts(record)
    if problem is not None:
        print(f"error: not exported: {visible(problem)}", file=sys.stderr)
        return VERIFY_FAILED
    if args.output is None:
        _write(facts, args.format, out)
        return 0
    path = Path(args.output)
    count = _write_file(facts, args.format, path)
    if args.json:
        out.write(json_document({"exported": str(path), "format": args.format, "facts": count}))
    else:
        out.write(f"{count} fact(s) exported to {visible(path)}\n")
    return 0
