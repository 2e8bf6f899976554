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
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Final, TextIO

from .._core._checkpoint import FactRecord
from .._core._escape import json_visible, visible
from .._core._key import AnyKey, key_rank
from .._core._record_head import RecordHead
from .._core._store import RowStore
from .._review import signing_key
from ..stores._rows_check import RowsCheck
from ._output import VERIFY_FAILED
from ._read import checked_facts, json_document, load_record
from ._store import open_store

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
        yield _csv_row(fact)


def _csv_row(fact: FactRecord) -> list[str]:
    promotion = fact.promotion
    payload = "" if fact.payload is None else json.dumps(fact.payload, ensure_ascii=False)
    return [
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


def _write_file(write: Callable[[TextIO], int], path: Path) -> int:
    """`write` into a temporary file beside `path`, then put it in its place: an interrupted
    export leaves the file as it was. How many facts were written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as file:
            count = write(file)
        Path(temporary).replace(path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return count


class _Spools:
    """Each key's facts, as the export writes them, in a temporary file of the key's own:
    a run stored as rows is read once, in the order of its entries, and written in key
    order once all of it checked."""

    def __init__(self, folder: str, form: str) -> None:
        self._folder = folder
        self._form = form
        self._files: dict[AnyKey, TextIO] = {}
        self._writers: dict[AnyKey, Callable[[FactRecord], object]] = {}

    def add(self, facts: Iterable[FactRecord]) -> None:
        for fact in facts:
            write = self._writers.get(fact.key)
            if write is None:
                write = self._writers[fact.key] = self._open(fact.key)
            write(fact)

    def _open(self, key: AnyKey) -> Callable[[FactRecord], object]:
        """A new spool for `key`'s facts, and what writes one fact into it."""
        name = os.path.join(self._folder, str(len(self._files)))
        spool = self._files[key] = open(
            name, "w+", encoding="utf-8", newline=""
        )  # closed by `close`
        if self._form == "csv":
            writer = csv.writer(spool, lineterminator="\n")
            return lambda fact: writer.writerow(_csv_row(fact))
        return lambda fact: spool.write(json_visible(fact.model_dump_json()) + "\n")

    def write(self, out: TextIO, count: int) -> int:
        """Write the header (CSV) and every key's facts, in key order; `count`."""
        if self._form == "csv":
            csv.writer(out, lineterminator="\n").writerow(CSV_COLUMNS)
        for key in sorted(self._files, key=key_rank):
            spool = self._files[key]
            spool.seek(0)
            shutil.copyfileobj(spool, out)
        return count

    def close(self) -> None:
        for spool in self._files.values():
            spool.close()


async def _export_rows(
    args: argparse.Namespace, store: RowStore, head: RecordHead, out: TextIO
) -> int:
    """Export a finished run stored as rows: its head's signature checked, then one pass over
    its rows, each checked as `verify` does and its facts spooled by key; nothing is written
    where the export goes unless the whole run checked."""
    head.verify_signature(signing_key())
    check = RowsCheck(head)
    with tempfile.TemporaryDirectory(prefix="converge-export-") as folder:
        spools = _Spools(folder, args.format)
        try:
            after = 0
            while entries := await store.journal(head.record.run_id, after=after, limit=16):
                spools.add(check.add(entry for _, entry in entries))
                after = entries[-1][0]
            problem = check.problem()
            if problem is not None:
                print(f"error: not exported: {visible(problem)}", file=sys.stderr)
                return VERIFY_FAILED
            if args.output is None:
                spools.write(out, check.facts)
                return 0
            path = Path(args.output)
            count = _write_file(lambda file: spools.write(file, check.facts), path)
        finally:
            spools.close()
    _said(args, out, path, count)
    return 0


async def cmd_export(args: argparse.Namespace, out: TextIO) -> int:
    """`converge export`: check a stored run, then write every fact, in order (of a finished
    run stored as rows, without holding it: `_export_rows`)."""
    store, _ = open_store(args.store, read_only=True)
    head = await store.load_head(args.run_id)
    if head is not None:
        return await _export_rows(args, store, head, out)
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
    count = _write_file(lambda file: _write(facts, args.format, file), path)
    _said(args, out, path, count)
    return 0


def _said(args: argparse.Namespace, out: TextIO, path: Path, count: int) -> None:
    if args.json:
        out.write(json_document({"exported": str(path), "format": args.format, "facts": count}))
    else:
        out.write(f"{count} fact(s) exported to {visible(path)}\n")
