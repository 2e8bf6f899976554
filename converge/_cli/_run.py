"""`converge run`, `demo` and `resume`: the commands that run a formation, save the run and
write its report.

`converge run PATH_OR_MODULE`, `converge demo [NAME]`, `converge resume RUN_ID --approve
GATE... --reject GATE... --by NAME`. Each prints the run's progress, then its summary (or,
with `--json`, its record) and where its report is; the exit status is the run's
(`_output.exit_status`).
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from .._core._error import UsageError
from .._core._escape import VisibleLines, json_visible, visible
from .._core._hitl import GateDecision
from .._core._record import RunRecord
from .._core._result import ConvergeResult
from .._core._store import RunStore
from .._formation import EngineOptions, Formation, command_timeout, load_formation, locate
from .._review import STALE, resume_stored, signing_key
from ._output import FAILURES, Progress, exit_status, program, summary_lines
from ._parser import DEMO_PACKAGE, demo_names
from ._report import new_record, write_report
from ._store import open_store, report_path, store_argument

__all__ = ["cmd_demo", "cmd_resume", "cmd_run"]


def _engine_options(
    args: argparse.Namespace, formation: Formation, out: TextIO, locator: str, store: RunStore
) -> EngineOptions:
    options: EngineOptions = {
        "store": store,
        "formation": locate(locator),
        "lease": args.lease,
        "durability": getattr(args, "durability", "cycle"),
        "suggestor_timeout": command_timeout(formation),
    }
    if getattr(args, "max_cycles", None) is not None:
        options["budget"] = formation.budget.model_copy(update={"max_cycles": args.max_cycles})
    if not getattr(args, "json", False):
        options["observers"] = (Progress(out),)
    key = signing_key()
    if key is not None:
        options["signing_key"] = key
    return options


async def _finish(
    result: ConvergeResult,
    formation: Formation,
    locator: str,
    args: argparse.Namespace,
    out: TextIO,
    label: str,
) -> int:
    """Print the saved run's summary (or JSON) and write its report."""
    record, facts = new_record(result, formation.name, locate(locator), signing_key())
    where = store_argument(args.store)
    path = report_path(label, result.run_id)
    report = write_report(record, path, where, built=True, facts=facts)
    if args.json:
        whole = RunRecord.saved(result) or record
        out.write(json_visible(whole.model_dump_json(indent=2)) + "\n")
        return exit_status(record, allow_failures=args.allow_failures)
    run_id = visible(result.run_id)
    out.write("\n".join(summary_lines(record, facts)) + "\n")
    out.write(f"saved run    {run_id} to {visible(label)}\n")
    if report is not None:
        out.write(f"report       {visible(report)}\n")
    if record.pending:
        gates = " ".join(visible(gate.gate_id) for gate in record.pending)
        where = visible(store_argument(args.store))
        again = visible(program())
        out.write(
            f"next         {again} review {run_id}{where}\n"
            f"             {again} resume {run_id} --approve {gates} --by NAME{where}\n"
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


async def cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    return await _run_formation(args.formation, args, out)


async def cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    demos = demo_names(DEMO_PACKAGE)
    if demos is None:
        raise UsageError(f"the demos package {DEMO_PACKAGE} is not installed")
    if args.name not in demos:
        raise UsageError(f"no demo named {args.name!r}", f"demos: {', '.join(demos)}")
    return await _run_formation(f"{DEMO_PACKAGE}.{args.name}", args, out)


async def cmd_resume(args: argparse.Namespace, out: TextIO) -> int:
    store, _ = open_store(args.store)
    decisions = [GateDecision.approve(gate, by=args.by) for gate in args.approve]
    decisions += [GateDecision.reject(gate, by=args.by, reason=args.reason) for gate in args.reject]
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
