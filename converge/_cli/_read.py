"""The `converge` commands that read stored runs: `runs`, `show`, `review`, `verify`,
`replay` and `report`, each as text or, with `--json`, as one JSON document.

Each of `runs`, `show`, `review` and `verify` checks the signature of what it shows
(`check_signature`, `check_listed`) and says what it found: on standard error (a `warning:`
line when the check failed, a `note:` line when no key is set), in its text, and as
`"signature_check"` (`SignatureCheck`: `run_id`, `state`, `message`) in its JSON.

The JSON shapes (documented in `docs/cli.md`):

- `runs`: a list of `RunSummary` objects, the most recently saved first, each with its
  `"signature_check"`;
- `show`: the `RunRecord`, as `run --json` prints it, and its `"signature_check"`;
- `review`: `{"run_id", "outcome", "pending": [GateRequest...], "decisions":
  [GateDecision...], "commands": [str...], "signature_check"}`;
- `verify`: `{"verified", "run_id", "merkle_root", "clock", "fact_count",
  "signature_check"}`, and `"error"` when it failed;
- `replay`: `{"replayed", "run_id", "cycles", "merkle_root", "replay_merkle_root"}`, and
  `"error"` when it failed;
- `report`: `{"report": PATH}`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final, TextIO

import anyio
from pydantic import JsonValue, ValidationError

from .._core._checkpoint import FactRecord
from .._core._collector import paused_collector
from .._core._error import UsageError
from .._core._escape import VisibleLines, error_text, json_visible, visible
from .._core._exceptions import ReplayError, RunNotFoundError, StoreError
from .._core._key import STORED
from .._core._record import RunRecord
from .._core._record_head import RecordHead
from .._core._result import ConvergeResult
from .._core._stop import StopReason
from .._core._store import RowStore, RunStore
from .._core._trace import Rejection, RunTrace
from .._formation import load_formation
from .._kernel._fork import lineage_problem
from .._review import (
    CheckedRun,
    SignatureCheck,
    check_listed,
    check_signature,
    formation_locator,
    paused_checkpoint,
    signing_key,
)
from ..stores._rows_check import rows_problem
from ..stores._rows_read import broken, ends, large
from ..stores._rows_replay import JournalCycles
from ._output import EXIT_CODES, VERIFY_FAILED, decided, program, summary_lines
from ._store import open_store, report_path, store_argument

__all__ = [
    "checked_facts",
    "cmd_replay",
    "cmd_report",
    "cmd_review",
    "cmd_runs",
    "cmd_show",
    "cmd_verify",
    "json_document",
    "load_record",
    "write_report",
]


def json_document(value: object) -> str:
    """`value` as one indented JSON document and a newline, made visible (`json_visible`)."""
    return json_visible(json.dumps(value, indent=2, ensure_ascii=False)) + "\n"


def write_report(record: RunRecord, path: Path, where: str, *, built: bool = False) -> Path | None:
    """Write the run's HTML report; `where` (`store_argument`) goes into its commands.

    `built`: `record` was just built by `RunRecord.of` from a live result, so its facts were
    checked then (`render_built_report`); a stored record is checked as it is rendered.
    """
    try:
        report = importlib.import_module("converge._report._render")
    except ImportError:
        return None
    render: Callable[..., str] = report.render_built_report if built else report.render_report
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(record, store_argument=where), encoding="utf-8")
    return path


async def _load(args: argparse.Namespace, run_id: str) -> tuple[RunStore, RunRecord]:
    store, _ = open_store(args.store, read_only=True)
    return store, await store.load(run_id)


async def load_record(args: argparse.Namespace, run_id: str) -> RunRecord:
    """The stored run `run_id`, from the command's store opened read-only."""
    return (await _load(args, run_id))[1]


_SIGNATURE_CHECK: Final = "signature_check"
"""The JSON member that says what checking the record's signature found."""


def _say(check: SignatureCheck, err: TextIO) -> None:
    """Say on `err` what `check` found, in one line: a warning when it failed, a note when
    no key is set (nothing when the signature verified)."""
    if check.failed:
        err.write(f"warning: {visible(check.message)}; what is shown is not authenticated\n")
    elif check.state == "unchecked":
        err.write(f"note: {visible(check.message)}\n")


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


async def cmd_runs(args: argparse.Namespace, out: TextIO) -> int:
    """`converge runs`: one page of the stored runs the filters take, the most recently
    saved first, selected by the store's query and each checked (`check_listed`)."""
    store, label = open_store(args.store, read_only=True)
    key = signing_key()
    summaries = await store.list_runs(
        limit=args.limit,
        offset=args.offset,
        status=args.status,
        formation=args.formation,
        pending=True if args.pending else None,
        since=args.since,
        search=args.search,
    )
    listed = await check_listed(store, summaries, key)
    _say_listed(listed, key)
    forks = _forks_listed(listed)
    if args.json:
        documents: list[JsonValue] = [
            {
                **run.summary.model_dump(mode="json"),
                _SIGNATURE_CHECK: run.check.model_dump(mode="json"),
                "forks_listed": forks.get(run.summary.run_id, 0),
            }
            for run in listed
        ]
        out.write(json_document(documents))
        return 0
    if not listed:
        filtered = any(
            (args.status, args.formation, args.pending, args.since, args.search, args.offset)
        )
        out.write(f"no {'such ' if filtered else ''}runs in {visible(label)}\n")
        return 0
    for checked in listed:
        out.write(_run_line(checked, forks))
    if len(listed) == args.limit:
        sys.stderr.write(f"note: more may follow: --offset {args.offset + args.limit}\n")
    return 0


def _say_listed(listed: Sequence[CheckedRun], key: bytes | None) -> None:
    """Say on standard error which listed runs failed their check, and that none is
    authenticated when no key is set."""
    for run in listed:
        if run.check.failed:
            _say(run.check, sys.stderr)
    if listed and key is None:
        sys.stderr.write(
            "note: these runs are not authenticated (no signing key is set); anyone with "
            "write access to the store could have changed them\n"
        )


def _forks_listed(listed: Sequence[CheckedRun]) -> dict[str, int]:
    """How many of the listed runs fork each run, by the id of the run they fork."""
    forks: dict[str, int] = {}
    for run in listed:
        parent = run.summary.parent_run_id
        if parent is not None:
            forks[parent] = forks.get(parent, 0) + 1
    return forks


def _run_line(checked: CheckedRun, forks: Mapping[str, int]) -> str:
    """The line of `converge runs` for one listed run; `forks` as `_forks_listed` counts."""
    run = checked.summary
    mark = "  signature FAILED" if checked.check.failed else ""
    if run.parent_run_id is not None:
        mark += f"  fork of {visible(run.parent_run_id[:12])}@{run.fork_cycle}"
    if run.run_id in forks:
        count = forks[run.run_id]
        mark += f"  {count} fork{'s' if count > 1 else ''} listed"
    if run.pending:
        mark += f"  {run.pending} gate{'s' if run.pending > 1 else ''} waiting"
    reason = run.stop_reason.value if run.stop_reason else "-"
    if run.failures:
        reason += f", {run.failures} failure{'s' if run.failures > 1 else ''}"
    return (
        f"{visible(run.run_id)}  {run.saved_at.isoformat(timespec='seconds')}  "
        f"{run.status.value:<11} {reason:<22} "
        f"{run.cycles:>3} cycles {run.fact_count:>5} facts  {visible(run.name or '')}"
        f"{mark}\n"
    )


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
    _, record = await _load(args, args.run_id)
    check = check_signature(record, signing_key())
    _say(check, sys.stderr)
    inconsistent = _verified(record)
    if inconsistent is not None:
        sys.stderr.write(f"warning: {visible(inconsistent)}\n")
    if args.json:
        document = _with_member(
            record.model_dump_json(indent=2), _SIGNATURE_CHECK, check.model_dump()
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
    _say(check, sys.stderr)
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
    _say(check, sys.stderr)
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
                    _SIGNATURE_CHECK: check.model_dump(),
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
    (its gates and decisions are in its head), or a large finished one (`_large_head`)."""
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


async def _record_for(args: argparse.Namespace, target: str) -> RunRecord:
    path = anyio.Path(target)
    if await path.is_file():
        try:
            text = await path.read_text(encoding="utf-8")
            return RunRecord.model_validate_json(_without_check(text), context=STORED)
        except ValidationError as error:
            raise UsageError(f"{target} is not a run record: {error_text(error)}") from None
    return (await _load(args, target))[1]


def _without_check(text: str) -> str:
    """A record's JSON without the `"signature_check"` that `show --json` adds: a file's own
    say about its signature counts for nothing, `verify` checks it again."""
    try:
        document: object = json.loads(text)
    except ValueError:
        return text  # not JSON: validation says so
    if not isinstance(document, dict) or _SIGNATURE_CHECK not in document:
        return text
    del document[_SIGNATURE_CHECK]
    return json.dumps(document)


def checked_facts(record: RunRecord) -> tuple[tuple[FactRecord, ...], str | None]:
    """`record`'s facts, and why they do not match its integrity proof (`None`: they do)."""
    return record.facts, _verified(record)


def _verified(record: RunRecord) -> str | None:
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
    error = _verified(record)
    return record, check, check.message if error is None and check.failed else error


async def cmd_verify(args: argparse.Namespace, out: TextIO) -> int:
    """`converge verify`: check a run's facts against its integrity proof, and with a key
    its signature; status 7 when either fails."""
    record, check, error = await _checked(args, args.target)
    error, parent_checked = await _lineage_checked(args, record, error)
    if error is None:
        _say(check, sys.stderr)
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
        _SIGNATURE_CHECK: check.model_dump(),
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


async def cmd_report(args: argparse.Namespace, out: TextIO) -> int:
    """`converge report`: write a stored run's HTML report again, anywhere."""
    _, label = open_store(args.store, read_only=True)
    _, record = await _load(args, args.run_id)
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
