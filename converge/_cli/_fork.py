"""`converge fork`, `converge diff` and `converge replay --live-from`.

- `fork RUN --at CYCLE`: a new run from a stored run's context at the end of `CYCLE`, with
  `--input`/`--inputs` added and `--retract`ed facts removed, run live with the formation
  as it is now (`Engine.fork`); printed and saved as `run` does.
- `diff RUN_A RUN_B`: where two runs part, and their facts key by key (`diff_runs`).
- `replay RUN --live-from CYCLE`: the same fork, with the recorded effects up to `CYCLE`
  merged again first (the root checked).

A bad cycle, a retracted id that does not exist or an input that does not fit is a usage
error (status 2); a parent whose signature fails is refused with status 7; nothing is
written in either case.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO, cast

import anyio
from pydantic import JsonValue

from .._core._error import UsageError
from .._core._escape import VisibleLines, error_text, json_visible, visible
from .._core._exceptions import ForkError, ReplayError, StoreError
from .._core._key import key_named
from .._core._proposal import ProposedFact
from .._core._record import RunRecord
from .._diff import RunDiff, diff_runs
from .._formation import EngineOptions, command_timeout, load_formation, locate
from .._kernel._fork import records_root
from .._kernel._fork_changes import proposed_inputs
from .._review import formation_locator, signing_key
from ._output import VERIFY_FAILED, Progress, exit_status, program, summary_lines
from ._read import json_document
from ._replay import cmd_replay
from ._report import new_record, write_report
from ._store import open_store, report_path, store_argument

__all__ = ["cmd_diff", "cmd_fork", "cmd_replay_or_live"]

USAGE = 2
"""The exit status of a fork that cannot be made as asked."""


def _inputs(args: argparse.Namespace) -> tuple[ProposedFact, ...]:
    """The fork's inputs: `--input`s, then the `--inputs` file's."""
    given: list[dict[str, object]] = list(args.input or [])
    documents: list[JsonValue] = []
    for item in given:
        documents.append(cast("JsonValue", item))
    if args.inputs is not None:
        try:
            with open(args.inputs, encoding="utf-8") as file:
                loaded: JsonValue = json.load(file)
        except (OSError, ValueError) as error:
            raise UsageError(f"--inputs {args.inputs}: {error_text(error)}") from None
        if isinstance(loaded, dict) and "inputs" in loaded:
            loaded = loaded["inputs"]
        if not isinstance(loaded, list):
            raise UsageError(f"--inputs {args.inputs}: expected a JSON list of proposed facts")
        documents.extend(loaded)
    return proposed_inputs(documents)


def _options(args: argparse.Namespace, locator: str, out: TextIO) -> EngineOptions:
    store, _ = open_store(args.store)
    formation = load_formation(locator)
    options: EngineOptions = {
        "store": store,
        "formation": locate(locator),
        "suggestor_timeout": command_timeout(formation),
    }
    if args.max_cycles is not None:
        options["budget"] = formation.budget.model_copy(update={"max_cycles": args.max_cycles})
    if not args.json:
        options["observers"] = (Progress(out),)
    key = signing_key()
    if key is not None:
        options["signing_key"] = key
    return options


async def _fork(args: argparse.Namespace, out: TextIO, *, cycle: int, replay: bool) -> int:
    store, label = open_store(args.store)
    parent = await store.load(args.run_id)
    key = signing_key()
    try:
        parent.verify_signature(key)
    except StoreError as error:
        print(f"error: {visible(str(error).strip())}; nothing was forked", file=sys.stderr)
        return VERIFY_FAILED
    locator = formation_locator(parent, args.formation, key, VisibleLines(sys.stderr))
    formation = load_formation(locator)
    engine = formation.engine(**_options(args, locator, out))
    retract: list[str] = list(getattr(args, "retract", None) or [])
    try:
        inputs = _inputs(args) if not replay else ()
        if not args.json:
            out.write(
                f"converge: forking run {visible(parent.run_id)} at cycle {cycle} "
                f"({visible(formation.name)})\n"
            )
        result = await engine.fork(
            parent,
            at_cycle=cycle,
            inputs=inputs,
            retract=retract,
            cascade=bool(getattr(args, "cascade", False)),
            replay=replay,
        )
    except ForkError as error:
        print(f"error: {visible(str(error).strip())}; nothing was forked", file=sys.stderr)
        return USAGE
    except ReplayError as error:
        print(f"error: {visible(str(error).strip())}; nothing was forked", file=sys.stderr)
        return VERIFY_FAILED
    record, facts = new_record(result, formation.name, locate(locator), key)
    where = store_argument(args.store)
    report = write_report(record, report_path(label, record.run_id), where, built=True, facts=facts)
    if args.json:
        whole = RunRecord.saved(result) or record
        out.write(json_visible(whole.model_dump_json(indent=2)) + "\n")
        return exit_status(record, allow_failures=args.allow_failures)
    out.write("\n".join(summary_lines(record, facts)) + "\n")
    lineage = result.lineage
    if lineage is not None:
        removed = f", retracted {', '.join(lineage.retracted_refs)}" if lineage.retracted else ""
        out.write(
            f"forked from  {visible(lineage.parent_run_id)} at cycle {lineage.at_cycle} "
            f"(root {lineage.parent_root[:12]}){visible(removed)}\n"
        )
    out.write(f"saved run    {visible(record.run_id)} to {visible(label)}\n")
    if report is not None:
        out.write(f"report       {visible(report)}\n")
    out.write(
        f"compare      {visible(program())} diff {visible(parent.run_id)} "
        f"{visible(record.run_id)}{visible(where)}\n"
    )
    return exit_status(record, allow_failures=args.allow_failures)


async def cmd_fork(args: argparse.Namespace, out: TextIO) -> int:
    """`converge fork RUN --at CYCLE`: a new run from a stored run's cycle, run live."""
    return await _fork(args, out, cycle=args.at, replay=False)


async def cmd_replay_or_live(args: argparse.Namespace, out: TextIO) -> int:
    """`converge replay RUN`, or with `--live-from CYCLE` a replayed fork run live."""
    if args.live_from is None:
        return await cmd_replay(args, out)
    args.max_cycles = getattr(args, "max_cycles", None)
    args.allow_failures = getattr(args, "allow_failures", False)
    return await _fork(args, out, cycle=args.live_from, replay=True)


async def _checked(run_id: str, args: argparse.Namespace) -> RunRecord | str:
    """The stored run, its signature (with a key) and its facts' digests against its
    proof checked; or why not."""
    store, _ = open_store(args.store, read_only=True)
    record = await store.load(run_id)
    try:
        record.verify_signature(signing_key())
    except StoreError as error:
        return str(error).strip()
    if records_root(record.facts) != record.integrity.merkle_root:
        return f"run {run_id}: its stored facts do not hash to its integrity proof's root"
    return record


async def cmd_diff(args: argparse.Namespace, out: TextIO) -> int:
    """`converge diff RUN_A RUN_B`: where the runs part and how their facts differ."""
    key = None
    if args.key is not None:
        try:
            key = key_named(args.key)
        except ValueError as error:
            raise UsageError(f"--key {args.key}: {error_text(error)}") from None
    checked = [await _checked(run_id, args) for run_id in (args.run_a, args.run_b)]
    for each in checked:
        if isinstance(each, str):
            print(f"error: {visible(each)}", file=sys.stderr)
            return VERIFY_FAILED
    a, b = (each for each in checked if isinstance(each, RunRecord))
    diff = await anyio.to_thread.run_sync(lambda: diff_runs(a, b, key=key, limit=args.limit))
    if args.json:
        document: JsonValue = diff.model_dump(mode="json")
        out.write(json_document(document))
        return 0
    out.write("\n".join(_diff_lines(diff)) + "\n")
    return 0


def _diff_lines(diff: RunDiff) -> list[str]:
    lines = [
        f"A {visible(diff.run_a)}  {visible(_stop(diff.stop_a))}: {visible(diff.detail_a)}",
        f"B {visible(diff.run_b)}  {visible(_stop(diff.stop_b))}: {visible(diff.detail_b)}",
    ]
    if diff.first_difference is None:
        lines.append("same context at the end of every cycle" if diff.same else "same history")
    else:
        lines.append(
            f"first difference at the end of cycle {diff.first_difference}: "
            f"A root {(diff.root_a or '')[:12]}, B root {(diff.root_b or '')[:12]}"
        )
    for key_diff in diff.keys:
        lines.append(f"\n{key_diff.key}:")
        for side, mark, count in (
            (key_diff.only_a, "only in A", key_diff.only_a_count),
            (key_diff.only_b, "only in B", key_diff.only_b_count),
        ):
            for fact in side:
                lines.append(
                    f"  {mark}: {visible(fact.id)}: {visible(fact.content)} "
                    f"(by {visible(fact.suggestor)}, cycle {fact.cycle})"
                )
            if count > len(side):
                lines.append(f"  ... {count - len(side)} more {mark}")
        for change in key_diff.changed:
            lines.append(
                f"  changed {visible(change.id)} ({', '.join(change.fields)}):\n"
                f"    A: {visible(change.a.content)} (by {visible(change.a.suggestor)}, "
                f"cycle {change.a.cycle}, provenance {visible(change.a.provenance)})\n"
                f"    B: {visible(change.b.content)} (by {visible(change.b.suggestor)}, "
                f"cycle {change.b.cycle}, provenance {visible(change.b.provenance)})"
            )
        if key_diff.changed_count > len(key_diff.changed):
            lines.append(f"  ... {key_diff.changed_count - len(key_diff.changed)} more changed")
    if not diff.keys:
        lines.append("no fact differs")
    return lines


def _stop(reason: object) -> str:
    value = getattr(reason, "value", None)
    return "running" if value is None else str(value)
