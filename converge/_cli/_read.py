"""What the `converge` commands that read stored runs share: a run loaded from the command's
store (opened read-only), its facts checked against its integrity proof, what checking its
signature found said on standard error, and a JSON document printed.

Each of `runs`, `show`, `review` and `verify` checks the signature of what it shows
(`check_signature`, `check_listed`) and says what it found: on standard error (a `warning:`
line when the check failed, a `note:` line when no key is set, `say`), in its text, and as
`"signature_check"` (`SignatureCheck`: `run_id`, `state`, `message`) in its JSON. The
commands are in `_runs`, `_show`, `_review`, `_verify`, `_replay` and `_report`; their JSON
shapes are documented there and in `docs/cli.md`.
"""

from __future__ import annotations

import argparse
import json
from typing import Final, TextIO

from .._core._checkpoint import FactRecord
from .._core._collector import paused_collector
from .._core._escape import json_visible, visible
from .._core._exceptions import StoreError
from .._core._record import RunRecord
from .._core._store import RunStore
from .._review import SignatureCheck
from ._store import open_store

__all__ = ["SIGNATURE_CHECK", "checked_facts", "json_document", "load_record", "say", "verified"]


def json_document(value: object) -> str:
    """`value` as one indented JSON document and a newline, made visible (`json_visible`)."""
    return json_visible(json.dumps(value, indent=2, ensure_ascii=False)) + "\n"


async def _load(args: argparse.Namespace, run_id: str) -> tuple[RunStore, RunRecord]:
    store, _ = open_store(args.store, read_only=True)
    return store, await store.load(run_id)


async def load_record(args: argparse.Namespace, run_id: str) -> RunRecord:
    """The stored run `run_id`, from the command's store opened read-only."""
    return (await _load(args, run_id))[1]


SIGNATURE_CHECK: Final = "signature_check"
"""The JSON member that says what checking the record's signature found."""


def say(check: SignatureCheck, err: TextIO) -> None:
    """Say on `err` what `check` found, in one line: a warning when it failed, a note when
    no key is set (nothing when the signature verified)."""
    if check.failed:
        err.write(f"warning: {visible(check.message)}; what is shown is not authenticated\n")
    elif check.state == "unchecked":
        err.write(f"note: {visible(check.message)}\n")


def checked_facts(record: RunRecord) -> tuple[tuple[FactRecord, ...], str | None]:
    """`record`'s facts, and why they do not match its integrity proof (`None`: they do)."""
    return record.facts, verified(record)


def verified(record: RunRecord) -> str | None:
    """Why `record`'s facts do not match its integrity proof; `None` when they do.

    Every fact's digest is computed again from its stored fields (the stored digests are
    only compared), the root from those digests; the trace's final root, when it has one,
    must be that root too.
    """
    try:
        with paused_collector():
            context = record.restore_context()
    except StoreError as error:
        return str(error).strip()
    # The restore recomputed every digest from the stored fields, checked the order and the
    # root: `verify` on the facts it just built would do all that again. What is left of it
    # is the count and the clock.
    proof = record.integrity
    if len(context) != proof.fact_count or context.clock != proof.clock:
        return f"run {record.run_id} does not match its integrity proof"
    final = record.trace.final_root
    if final is not None and final != record.integrity.merkle_root:
        return (
            f"run {record.run_id}: its trace ends at root {final}, its integrity proof says "
            f"{record.integrity.merkle_root}"
        )
    return None
