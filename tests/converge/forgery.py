"""What an attacker with write access to a run store does to a stored record, for the tests.

Each store keeps a finished or paused run saved after every cycle as a head in
`converge_runs.record` plus its journal rows, and any other record whole there; these
helpers read a record (put together from its rows) and write it back whole by hand (SQLite
file or PostgreSQL URL), and recompute digests, root and count by the public hashing rules
(docs/concepts/integrity.md), without converge, as anyone could.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from contextlib import closing
from typing import LiteralString

from converge._core._canonical import merkle_root
from converge.stores import assemble_final

__all__ = ["Record", "fact_digest", "rehash", "stored_json", "write_json"]

Record = dict[str, object]


def _postgres(target: str) -> bool:
    return target.startswith(("postgresql://", "postgres://"))


def _sql(target: str, statement: LiteralString, *values: object) -> list[tuple[object, ...]]:
    """Run one statement behind the store's back (`?` placeholders); the rows it returns."""
    if _postgres(target):
        import psycopg

        with psycopg.connect(target, autocommit=True) as connection:
            cursor = connection.execute(statement.replace("?", "%s"), values)
            return [tuple(row) for row in cursor.fetchall()] if cursor.description else []
    with closing(sqlite3.connect(target)) as connection, connection:
        return [tuple(row) for row in connection.execute(statement, values).fetchall()]


def stored_json(target: str, run_id: str) -> Record:
    """The record of `run_id` as stored, parsed; a finished or paused run stored as rows (its
    head and its journal) is put together first, as an attacker would."""
    rows = _sql(target, "SELECT record, layout, status FROM converge_runs WHERE run_id = ?", run_id)
    assert rows, run_id
    [(text, layout, status)] = rows
    if layout == "rows" and status in ("finished", "paused"):
        entries = _sql(
            target, "SELECT entry FROM converge_journal WHERE run_id = ? ORDER BY seq", run_id
        )
        whole = assemble_final(str(text), [str(e) for (e,) in entries], run_id=run_id, version=1)
        return json.loads(whole.model_dump_json())
    record: Record = json.loads(str(text))
    return record


def write_json(target: str, run_id: str, record: Record) -> None:
    """Replace the stored record of `run_id` by `record`. A whole record (with `facts`) is
    written as the run's whole record in place of any rows; a head, in place of the head."""
    _sql(target, "UPDATE converge_runs SET record = ? WHERE run_id = ?", json.dumps(record), run_id)
    if "facts" in record:
        _sql(target, "UPDATE converge_runs SET layout = 'whole' WHERE run_id = ?", run_id)
        _sql(
            target,
            "DELETE FROM converge_journal WHERE run_id IN (SELECT run_id FROM converge_runs "
            "WHERE run_id = ? AND status IN ('finished', 'paused'))",
            run_id,
        )


def fact_digest(fact: dict[str, object]) -> str:
    """A stored fact's leaf digest, from its fields, by the public rule."""
    body = {name: value for name, value in fact.items() if name != "digest"}
    text = json.dumps(
        body, ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(b"\x00" + text.encode()).hexdigest()


def rehash(record: Record) -> None:
    """Recompute every fact's digest, the Merkle root (the proof's and the trace's) and the
    fact count in place.

    The record is consistent again: only a signature can tell it from a real one.
    """
    facts = record["facts"]
    assert isinstance(facts, list)
    digests: list[str] = []
    for fact in facts:  # pyright: ignore[reportUnknownVariableType]
        assert isinstance(fact, dict)
        digest = fact_digest(fact)  # pyright: ignore[reportUnknownArgumentType]
        fact["digest"] = digest
        digests.append(digest)
    integrity = record["integrity"]
    assert isinstance(integrity, dict)
    root = merkle_root(bytes.fromhex(digest) for digest in digests)
    integrity["merkle_root"] = root
    integrity["fact_count"] = len(digests)
    trace = record["trace"]
    assert isinstance(trace, dict)
    if trace.get("final_root") is not None:  # pyright: ignore[reportUnknownMemberType]
        trace["final_root"] = root
