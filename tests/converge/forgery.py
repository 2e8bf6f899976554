"""What an attacker with write access to a run store does to a stored record, for the tests.

Each store keeps a finished or paused run's whole record as JSON in `converge_runs.record`;
these helpers read and rewrite that column by hand (SQLite file or PostgreSQL URL), and
recompute digests, root and count by the public hashing rules (docs/concepts/integrity.md),
without converge, as anyone could.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from contextlib import closing

from converge._core._canonical import merkle_root

__all__ = ["Record", "rehash", "stored_json", "write_json"]

Record = dict[str, object]


def _postgres(target: str) -> bool:
    return target.startswith(("postgresql://", "postgres://"))


def stored_json(target: str, run_id: str) -> Record:
    """The record of `run_id` as stored, parsed."""
    if _postgres(target):
        import psycopg

        with psycopg.connect(target) as connection:
            row = connection.execute(
                "SELECT record FROM converge_runs WHERE run_id = %s", (run_id,)
            ).fetchone()
    else:
        with closing(sqlite3.connect(target)) as connection, connection:
            row = connection.execute(
                "SELECT record FROM converge_runs WHERE run_id = ?", (run_id,)
            ).fetchone()
        connection.close()
    assert row is not None, run_id
    record: Record = json.loads(str(row[0]))
    return record


def write_json(target: str, run_id: str, record: Record) -> None:
    """Replace the stored record of `run_id` by `record` (nothing else in the row changes)."""
    body = json.dumps(record)
    if _postgres(target):
        import psycopg

        with psycopg.connect(target) as connection:
            connection.execute(
                "UPDATE converge_runs SET record = %s WHERE run_id = %s", (body, run_id)
            )
        return
    with closing(sqlite3.connect(target)) as connection, connection:
        connection.execute("UPDATE converge_runs SET record = ? WHERE run_id = ?", (body, run_id))
    connection.close()


def _digest(fact: dict[str, object]) -> str:
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
        digest = _digest(fact)  # pyright: ignore[reportUnknownArgumentType]
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
