"""`converge review`: the gates a paused run waits on, and the command that decides them; without
a run id, the inbox of every gate waiting in the store.

`review RUN --json` prints `{"run_id", "outcome", "pending": [GateRequest...], "decisions":
[GateDecision...], "commands": [str...], "signature_check"}`; the inbox's, a list of the
waiting gates, each with the `"command"` that reviews it.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from .._core._escape import visible
from .._core._record_head import RecordHead
from .._core._stop import StopReason
from .._review import check_signature, paused_checkpoint, signing_key
from ..stores._rows_read import large
from ._output import EXIT_CODES, program
from ._read import SIGNATURE_CHECK, json_document, load_record, say
from ._store import open_store, store_argument

__all__ = ["cmd_review"]


async def cmd_review(args: argparse.Namespace, out: TextIO) -> int:
    """`converge review`: the gates a paused run waits on, and the command to decide them.

    A paused run's record must verify (with a key) before anything of it is shown; of any
    other run, what it says is shown with a warning when its signature fails. Without a run
    id, the inbox (`_inbox`).
    """
    if args.run_id is None:
        return await _inbox(args, out)
    head = await _review_head(args, args.run_id)  # its head says all review needs
    record = head.record if head is not None else await load_record(args, args.run_id)
    source = record if head is None else head
    key = signing_key()
    pending = paused_checkpoint(source, args.run_id, key).pending if record.pending else ()
    check = check_signature(source, key)
    say(check, sys.stderr)
    gates = " ".join(gate.gate_id for gate in pending)
    where = store_argument(args.store)
    commands = [f"{program()} resume {record.run_id} --approve {gates} --by NAME{where}"]
    status = EXIT_CODES[StopReason.AWAITING_HUMAN] if pending else 0
    if args.json:
        out.write(
            json_document(
                {
                    "run_id": record.run_id,
                    "outcome": record.outcome,
                    "pending": [gate.model_dump(mode="json") for gate in pending],
                    "decisions": [d.model_dump(mode="json") for d in record.trace.decisions],
                    "commands": commands if pending else [],
                    SIGNATURE_CHECK: check.model_dump(),
                }
            )
        )
        return status
    if not pending:
        unverified = " (not authenticated: its signature check failed)" if check.failed else ""
        out.write(
            f"run {visible(record.run_id)} is not waiting for anyone "
            f"({record.outcome}){visible(record.decided_by())}{unverified}\n"
        )
        return status
    for gate in pending:
        proposal = gate.proposal
        deadline = gate.deadline.isoformat() if gate.deadline else "none"
        payload = proposal.payload
        out.write(
            f"gate {visible(gate.gate_id)}\n"
            f"  proposal   {visible(proposal.ref)}: {visible(gate.summary)}\n"
            f"  from       {visible(gate.suggestor)} (cycle {gate.cycle}), "
            f"confidence {proposal.confidence}\n"
            f"  evidence   {visible(', '.join(proposal.evidence) or 'none')}\n"
            f"  payload    {visible(payload if payload is not None else 'none')}\n"
            f"  deadline   {deadline}\n"
        )
    if head is not None and check.state == "verified":
        out.write(f"signature  {visible(check.message)}\n")
    out.write(f"decide with: {visible(commands[0])}\n")
    return status


async def _review_head(args: argparse.Namespace, run_id: str) -> RecordHead | None:
    """The head of `run_id` when it says all `review` shows: a paused run stored as rows
    (its gates and decisions are in its head), or a large finished one (as `_show`'s
    `_large_head` reads it)."""
    store, _ = open_store(args.store, read_only=True)
    head = await store.load_head(run_id, paused=True)
    if head is None:
        return None
    if head.record.checkpoint is None and not large(head):
        return None
    return head


async def _inbox(args: argparse.Namespace, out: TextIO) -> int:
    """`converge review` without a run id: one page of every gate waiting in the store, the
    longest waiting first, read from the store's index of its paused runs (what `review
    RUN` checks before it shows a gate to decide). Status 6 when any gate waits."""
    store, label = open_store(args.store, read_only=True)
    gates = await store.pending_gates(limit=args.limit, offset=args.offset)
    where = store_argument(args.store)
    if args.json:
        out.write(
            json_document(
                [
                    {
                        **gate.model_dump(mode="json"),
                        "command": f"{program()} review {gate.run_id}{where}",
                    }
                    for gate in gates
                ]
            )
        )
    elif not gates:
        out.write(
            f"no gates waiting in {visible(label)}"
            + (f" past the first {args.offset}" if args.offset else "")
            + "\n"
        )
    else:
        for gate in gates:
            deadline = f", deadline {gate.deadline.isoformat()}" if gate.deadline else ""
            out.write(
                f"{visible(gate.run_id)}  {gate.saved_at.isoformat(timespec='seconds')}  "
                f"{visible(gate.gate_id)}  {visible(gate.name or '')}\n"
                f"  {visible(gate.ref)} from {visible(gate.suggestor)} (cycle {gate.cycle})"
                f"{deadline}: {visible(_short(gate.summary))}\n"
            )
        out.write(f"review one with: {program()} review RUN_ID{where}\n")
        if len(gates) == args.limit:
            sys.stderr.write(f"note: more may follow: --offset {args.offset + args.limit}\n")
    return EXIT_CODES[StopReason.AWAITING_HUMAN] if gates else 0


def _short(text: str, width: int = 120) -> str:
    """`text` on one line, cut to `width` characters."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"
