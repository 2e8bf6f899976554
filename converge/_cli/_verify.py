"""`converge verify`: a run's facts checked against its integrity proof and, with a key, its
signature; a fork's lineage against its parent when the store has it. The run is a stored one
(a finished run stored as rows checked a page of rows at a time) or a record in a JSON file.

`verify --json` prints `{"verified", "run_id", "merkle_root", "clock", "fact_count",
"signature_check"}`, `"lineage"` for a fork, and `"error"` when it failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

import anyio
from pydantic import JsonValue, ValidationError

from .._core._error import UsageError
from .._core._escape import error_text, visible
from .._core._exceptions import RunNotFoundError, StoreError
from .._core._key import STORED
from .._core._record import RunRecord
from .._kernel._fork import lineage_problem
from .._review import SignatureCheck, check_signature, signing_key
from ..stores._rows_check import rows_problem
from ._output import VERIFY_FAILED
from ._read import SIGNATURE_CHECK, json_document, load_record, say, verified
from ._store import open_store

__all__ = ["cmd_verify"]


async def _record_for(args: argparse.Namespace, target: str) -> RunRecord:
    path = anyio.Path(target)
    if await path.is_file():
        try:
            text = await path.read_text(encoding="utf-8")
            return RunRecord.model_validate_json(_without_check(text), context=STORED)
        except ValidationError as error:
            raise UsageError(f"{target} is not a run record: {error_text(error)}") from None
    return await load_record(args, target)


def _without_check(text: str) -> str:
    """A record's JSON without the `"signature_check"` that `show --json` adds: a file's own
    say about its signature counts for nothing, `verify` checks it again."""
    try:
        document: object = json.loads(text)
    except ValueError:
        return text  # not JSON: validation says so
    if not isinstance(document, dict) or SIGNATURE_CHECK not in document:
        return text
    del document[SIGNATURE_CHECK]
    return json.dumps(document)


async def _checked(
    args: argparse.Namespace, target: str
) -> tuple[RunRecord, SignatureCheck, str | None]:
    """The run `target` names (its head alone, for a finished run stored as rows), what
    checking its signature found, and why its facts do not verify (`None`: they do).

    A finished run stored as rows (not a fork, whose lineage needs its facts) is checked a
    page of rows at a time (`rows_problem`), never held whole.
    """
    key = signing_key()
    if not await anyio.Path(target).is_file():
        store, _ = open_store(args.store, read_only=True)
        head = await store.load_head(target)
        if head is not None and head.record.lineage is None:
            check = check_signature(head, key)
            error = await rows_problem(store, head)
            return head.record, check, check.message if error is None and check.failed else error
    record = await _record_for(args, target)
    check = check_signature(record, key)
    error = verified(record)
    return record, check, check.message if error is None and check.failed else error


async def cmd_verify(args: argparse.Namespace, out: TextIO) -> int:
    """`converge verify`: check a run's facts against its integrity proof, and with a key
    its signature; status 7 when either fails."""
    record, check, error = await _checked(args, args.target)
    error, parent_checked = await _lineage_checked(args, record, error)
    if error is None:
        say(check, sys.stderr)
    if args.json:
        out.write(json_document(_verify_document(record, check, error, parent_checked)))
    elif error is not None:
        out.write(f"FAILED: {visible(error)}\n")
    else:
        out.write(_verified_text(record, check, parent_checked))
    return 0 if error is None else VERIFY_FAILED


async def _lineage_checked(
    args: argparse.Namespace, record: RunRecord, error: str | None
) -> tuple[str | None, bool]:
    """`error`, or when it is `None` and the run is a fork, what fails in its lineage; and
    whether the fork's parent was in the store to check the lineage against."""
    parent_checked = False
    if error is None and record.lineage is not None:
        parent = await _parent_of(args, record.lineage.parent_run_id)
        if isinstance(parent, str):
            error = parent
        else:
            parent_checked = parent is not None
            error = lineage_problem(record, parent)
    return error, parent_checked


def _verify_document(
    record: RunRecord, check: SignatureCheck, error: str | None, parent_checked: bool
) -> dict[str, JsonValue]:
    """`verify --json`'s document (see the module docstring)."""
    proof = record.integrity
    document: dict[str, JsonValue] = {
        "verified": error is None,
        "run_id": record.run_id,
        "merkle_root": proof.merkle_root,
        "clock": proof.clock,
        "fact_count": proof.fact_count,
        SIGNATURE_CHECK: check.model_dump(),
    }
    lineage = record.lineage
    if lineage is not None:
        document["lineage"] = {
            "parent_run_id": lineage.parent_run_id,
            "at_cycle": lineage.at_cycle,
            "parent_root": lineage.parent_root,
            "parent_checked": parent_checked,
        }
    if error is not None:
        document["error"] = error
    return document


def _verified_text(record: RunRecord, check: SignatureCheck, parent_checked: bool) -> str:
    """What `verify` prints for a run that verified: the proof, and a fork's lineage."""
    proof = record.integrity
    said = (
        "not authenticated (no signing key is set)"
        if check.state == "unchecked"
        else "signature verified"
    )
    text = (
        f"verified: run {visible(record.run_id)}, {proof.fact_count} facts, "
        f"clock {proof.clock}, root {visible(proof.merkle_root)}; {said}\n"
    )
    lineage = record.lineage
    if lineage is not None:
        where = (
            "the parent's record has that root there too"
            if parent_checked
            else "the parent is not in this store: checked against the fork alone"
        )
        text += (
            f"lineage: forked from {visible(lineage.parent_run_id)} at cycle "
            f"{lineage.at_cycle}, root {visible(lineage.parent_root)}; {where}\n"
        )
    return text


async def _parent_of(args: argparse.Namespace, run_id: str) -> RunRecord | str | None:
    """A fork's parent from the store, its signature checked (with a key); `None` when the
    store does not have it; why not, when it does not verify."""
    try:
        store, _ = open_store(args.store, read_only=True)
        parent = await store.load(run_id)
    except RunNotFoundError:
        return None
    except StoreError as error:
        return f"parent run {run_id}: {str(error).strip()}"
    check = check_signature(parent, signing_key())
    if check.failed:
        return f"parent run {run_id}: {check.message}"
    return parent
