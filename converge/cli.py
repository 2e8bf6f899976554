"""The `converge` command: run formations, watch them converge, review, verify, replay, report.

```
converge run PATH_OR_MODULE [--max-cycles N] [--store PATH] [--json]
converge demo [NAME]
converge runs | show RUN_ID | review RUN_ID
converge resume RUN_ID --approve GATE... --reject GATE... --by NAME [--reason TEXT]
converge verify RUN_ID|FILE | replay RUN_ID | report RUN_ID [-o FILE]
converge batch PATH_OR_MODULE INPUTS.jsonl [--workers N | --scheduler ADDRESS] [--json]
```

Exit status: 0 converged (or verified); 1 error; 2 usage; 3 a budget ran out; 4 an invariant
was violated; 5 a conflict; 6 awaiting a human; 7 verification or replay failed; 8 someone
else decided or saved the run first (nothing was saved); 10 a batch input not stored;
130 interrupted.

Everything printed that the command did not write itself (model output, stored records,
exception messages) has its control characters escaped (`_cli_support.visible`), and
every error is one line.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TextIO

import anyio
from pydantic import ValidationError

from ._cli_batch import cmd_batch
from ._cli_parser import parser
from ._cli_records import STALE, formation_locator, paused_checkpoint, resume_stored, signing_key
from ._cli_store import close_stores, open_store, report_path, store_argument
from ._cli_support import (
    EXIT_CODES,
    FAILURES,
    INTERRUPTED,
    CliError,
    Progress,
    VisibleLines,
    engine_warnings,
    error_text,
    exit_status,
    json_visible,
    load_formation,
    locate,
    summary_lines,
    visible,
)
from ._cli_ui import cmd_ui
from ._exceptions import (
    ConvergeError,
    ReplayError,
    RunNotFoundError,
    StoreError,
)
from ._formation import EngineOptions, Formation
from ._hitl import GateDecision
from ._integrity import verify
from ._result import ConvergeResult
from ._stop import StopReason
from ._store import RunRecord, RunStore

__all__ = ["main"]

DEMO_PACKAGE = "converge_suggestors.demos"
DEFAULT_DEMO = "vendor_selection"
VERIFY_FAILED = 7
BROKEN_PIPE = 141
"""Exit status when the reader of the output went away (128 + SIGPIPE, as a shell reports)."""


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    """Run the command line; return the exit status."""
    stream = out or sys.stdout
    args = parser(DEFAULT_DEMO).parse_args(argv)
    command: Callable[[argparse.Namespace, TextIO], Awaitable[int]] = _COMMANDS[args.command]
    try:
        with engine_warnings(sys.stderr):
            return _main(command, args, stream)
    finally:
        close_stores()


def _main(
    command: Callable[[argparse.Namespace, TextIO], Awaitable[int]],
    args: argparse.Namespace,
    stream: TextIO,
) -> int:
    try:
        return anyio.run(command, args, stream)
    except BrokenPipeError:  # the reader went away (`converge runs | head -1`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE
    except KeyboardInterrupt:
        if args.debug:
            traceback.print_exc()
        print("interrupted", file=sys.stderr)
        return INTERRUPTED
    except CliError as error:
        return _fail(error_text(error), error.hint, args.debug)
    except RunNotFoundError as error:
        return _fail(error_text(error), "`converge runs` lists the stored runs", args.debug)
    except ConvergeError as error:
        return _fail(f"{type(error).__name__}: {error_text(error)}", None, args.debug)
    except Exception as error:
        return _fail(
            f"{type(error).__name__}: {error_text(error)}",
            "rerun with --debug for a traceback",
            args.debug,
        )


def _fail(message: str, hint: str | None, debug: bool) -> int:
    """Report an error: one line (`message` is already visible), and a hint line."""
    if debug:
        traceback.print_exc()
    print(f"error: {message}", file=sys.stderr)
    if hint:
        print(f"hint: {visible(hint)}", file=sys.stderr)
    return 1


def _engine_options(
    args: argparse.Namespace, formation: Formation, out: TextIO, locator: str, store: RunStore
) -> EngineOptions:
    if not args.lease > 0:
        raise CliError(f"--lease must be positive, got {args.lease}")
    options: EngineOptions = {
        "store": store,
        "formation": locate(locator),
        "lease": args.lease,
        "durability": getattr(args, "durability", "cycle"),
    }
    if getattr(args, "max_cycles", None) is not None:
        if args.max_cycles < 1:
            raise CliError("--max-cycles must be at least 1")
        options["budget"] = formation.budget.model_copy(update={"max_cycles": args.max_cycles})
    if not getattr(args, "json", False):
        options["observers"] = (Progress(out),)
    key = os.environ.get("CONVERGE_SIGNING_KEY")
    if key:
        options["signing_key"] = key
    return options


def _write_report(record: RunRecord, path: Path, where: str) -> Path | None:
    """Write the run's HTML report; `where` (`store_argument`) goes into its commands."""
    try:
        report = importlib.import_module("converge._report")
    except ImportError:
        return None
    render: Callable[..., str] = report.render_report
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(record, store_argument=where), encoding="utf-8")
    return path


async def _finish(
    result: ConvergeResult,
    formation: Formation,
    locator: str,
    args: argparse.Namespace,
    out: TextIO,
    label: str,
) -> int:
    """Print the saved run's summary (or JSON) and write its report."""
    record = RunRecord.of(result, name=formation.name, formation=locate(locator), key=signing_key())
    report = _write_report(record, report_path(label, result.run_id), store_argument(args.store))
    if args.json:
        out.write(json_visible(record.model_dump_json(indent=2)) + "\n")
        return exit_status(record, allow_failures=args.allow_failures)
    run_id = visible(result.run_id)
    out.write("\n".join(summary_lines(record)) + "\n")
    out.write(f"saved run    {run_id} to {visible(label)}\n")
    if report is not None:
        out.write(f"report       {visible(report)}\n")
    if record.pending:
        gates = " ".join(visible(gate.gate_id) for gate in record.pending)
        where = visible(store_argument(args.store))
        out.write(
            f"next         converge review {run_id}{where}\n"
            f"             converge resume {run_id} --approve {gates} --by NAME{where}\n"
        )
    status = exit_status(record, allow_failures=args.allow_failures)
    if status == FAILURES:
        out.write(
            f"converged, but with failures: exit status {FAILURES} (--allow-failures exits 0)\n"
        )
    return status


async def _run_formation(locator: str, args: argparse.Namespace, out: TextIO) -> int:
    formation = load_formation(locator)
    store, label = open_store(args.store)
    engine = formation.engine(**_engine_options(args, formation, out, locator, store))
    if not args.json:
        out.write(f"converge: running {visible(formation.name)}")
        description = formation.description
        out.write(f" ({visible(description)})\n" if description else "\n")
    result = await engine.run(inputs=formation.inputs)
    return await _finish(result, formation, locator, args, out, label)


async def _cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    return await _run_formation(args.formation, args, out)


async def _cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    try:
        demos: tuple[str, ...] = importlib.import_module(DEMO_PACKAGE).DEMOS
    except ImportError:
        raise CliError(f"the demos package {DEMO_PACKAGE} is not installed") from None
    if args.name not in demos:
        raise CliError(f"no demo named {args.name!r}", f"demos: {', '.join(demos)}")
    return await _run_formation(f"{DEMO_PACKAGE}.{args.name}", args, out)


async def _load(
    args: argparse.Namespace, run_id: str, *, read_only: bool = True
) -> tuple[RunStore, RunRecord]:
    store, _ = open_store(args.store, read_only=read_only)
    return store, await store.load(run_id)


async def _cmd_runs(args: argparse.Namespace, out: TextIO) -> int:
    store, label = open_store(args.store, read_only=True)
    runs = await store.list_runs(limit=args.limit)
    if not runs:
        out.write(f"no runs in {visible(label)}\n")
        return 0
    for run in runs:
        out.write(
            f"{visible(run.run_id)}  {run.saved_at.isoformat(timespec='seconds')}  "
            f"{run.status.value:<11} {run.stop_reason.value if run.stop_reason else '-':<22} "
            f"{run.cycles:>3} cycles {run.fact_count:>5} facts  {visible(run.name or '')}\n"
        )
    return 0


async def _cmd_show(args: argparse.Namespace, out: TextIO) -> int:
    _, record = await _load(args, args.run_id)
    name = f" ({visible(record.name)})" if record.name else ""
    out.write(f"run {visible(record.run_id)}{name}\n")
    out.write("\n".join(summary_lines(record)) + "\n")
    key = None
    for fact in record.facts:
        if fact.key is not key:
            key = fact.key
            out.write(f"\n{key.value}:\n")
        promotion = fact.promotion
        by = promotion.approved_by
        approved = f", approved by {visible(by)}" if by else ""
        out.write(
            f"  {visible(fact.id)}: {visible(fact.content)}\n"
            f"    by {visible(fact.provenance)}, confidence {fact.confidence}, "
            f"cycle {promotion.cycle}, gate {visible(promotion.gate)}{approved}\n"
        )
    if record.rejections:
        out.write("\nrejections:\n")
        for rejection in record.rejections:
            out.write(
                f"  {visible(rejection.proposal.ref)} from {visible(rejection.suggestor)} "
                f"(cycle {rejection.cycle}): {visible(rejection.reason)}\n"
            )
    return 0


async def _cmd_review(args: argparse.Namespace, out: TextIO) -> int:
    _, record = await _load(args, args.run_id)
    if not record.pending:
        out.write(
            f"run {visible(record.run_id)} is not waiting for anyone "
            f"({record.outcome}){visible(record.decided_by())}\n"
        )
        return 0
    checkpoint = paused_checkpoint(record, args.run_id, signing_key())
    for gate in checkpoint.pending:
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
    gates = " ".join(visible(gate.gate_id) for gate in checkpoint.pending)
    run_id = visible(record.run_id)
    where = visible(store_argument(args.store))
    out.write(f"decide with: converge resume {run_id} --approve {gates} --by NAME{where}\n")
    return EXIT_CODES[StopReason.AWAITING_HUMAN]


async def _cmd_resume(args: argparse.Namespace, out: TextIO) -> int:
    store, _ = open_store(args.store)
    decisions = [GateDecision.approve(gate, by=args.by) for gate in args.approve]
    decisions += [GateDecision.reject(gate, by=args.by, reason=args.reason) for gate in args.reject]
    if decisions and args.by is None:
        raise CliError("--by is required with --approve or --reject")
    resumed = await resume_stored(
        store,
        args.run_id,
        decisions,
        formation=args.formation,
        options=lambda formation, locator: _engine_options(args, formation, out, locator, store),
        err=VisibleLines(sys.stderr),
    )
    if isinstance(resumed, str):
        print(f"error: {visible(resumed)}", file=sys.stderr)
        return STALE
    result, formation, locator = resumed
    return await _finish(result, formation, locator, args, out, open_store(args.store)[1])


async def _record_for(args: argparse.Namespace, target: str) -> RunRecord:
    path = anyio.Path(target)
    if await path.is_file():
        try:
            return RunRecord.model_validate_json(await path.read_text(encoding="utf-8"))
        except ValidationError as error:
            raise CliError(f"{target} is not a run record: {error_text(error)}") from None
    return (await _load(args, target))[1]


async def _cmd_verify(args: argparse.Namespace, out: TextIO) -> int:
    record = await _record_for(args, args.target)
    try:
        context = record.restore_context()
    except StoreError as error:
        out.write(f"FAILED: {error_text(error)}\n")
        return VERIFY_FAILED
    if not verify(context, record.integrity):
        out.write(f"FAILED: run {visible(record.run_id)} does not match its integrity proof\n")
        return VERIFY_FAILED
    proof = record.integrity
    out.write(
        f"verified: run {visible(record.run_id)}, {proof.fact_count} facts, "
        f"clock {proof.clock}, root {visible(proof.merkle_root)}\n"
    )
    return 0


async def _cmd_replay(args: argparse.Namespace, out: TextIO) -> int:
    _, record = await _load(args, args.run_id)
    if record.stop_reason is None:
        raise CliError(
            f"run {record.run_id} is {record.status.value}: only a stopped run can be replayed",
            f"continue it first: converge resume {record.run_id}",
        )
    locator = formation_locator(record, args.formation, signing_key(), VisibleLines(sys.stderr))
    engine = load_formation(locator).engine()
    try:
        replayed = await engine.replay(record.trace)
    except ReplayError as error:
        out.write(f"FAILED: {error_text(error)}\n")
        return VERIFY_FAILED
    if replayed.integrity != record.integrity:
        out.write(
            f"FAILED: replay gives root {visible(replayed.integrity.merkle_root)}, "
            f"the run recorded {visible(record.integrity.merkle_root)}\n"
        )
        return VERIFY_FAILED
    out.write(
        f"replayed: run {visible(record.run_id)}, {replayed.cycles} cycles, "
        f"no suggestor called, same root {visible(replayed.integrity.merkle_root)}\n"
    )
    return 0


async def _cmd_report(args: argparse.Namespace, out: TextIO) -> int:
    _, label = open_store(args.store, read_only=True)
    _, record = await _load(args, args.run_id)
    record.verify_signature(signing_key())
    path = Path(args.output) if args.output else report_path(label, record.run_id)
    written = _write_report(record, path, store_argument(args.store))
    if written is None:
        raise CliError("this converge has no HTML report module")
    out.write(f"report written to {visible(written)}\n")
    return 0


_COMMANDS: dict[str, Callable[[argparse.Namespace, TextIO], Awaitable[int]]] = {
    "run": _cmd_run,
    "demo": _cmd_demo,
    "runs": _cmd_runs,
    "show": _cmd_show,
    "review": _cmd_review,
    "resume": _cmd_resume,
    "verify": _cmd_verify,
    "replay": _cmd_replay,
    "report": _cmd_report,
    "batch": cmd_batch,
    "ui": cmd_ui,
}


if __name__ == "__main__":
    raise SystemExit(main())
