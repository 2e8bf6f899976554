"""The `converge` command line's arguments: global options, then each command's.

Every command's `--help` has a description, its options (`--store`, `--key-file` and
`--debug` too, which work before or after the command) and the exit statuses it can return.
Numeric options are checked by their argparse type, so a bad value is a usage error (status 2).
"""

from __future__ import annotations

import argparse
import importlib
import math
import re
import textwrap
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Final, NoReturn, TypeAlias

from .._core._stop import RunStatus, StopReason
from .._review import STALE
from .._version import __version__
from ..dask import DEFAULT_RUNS_PER_WORKER, DEFAULT_WORKER_TIMEOUT
from ..stores._durable import DEFAULT_LEASE
from ._batch import BATCH_DESCRIPTION, BATCH_FLAGS, BATCH_STATUSES
from ._fork import InputAction, PayloadAction
from ._output import (
    BATCH_INCOMPLETE,
    BROKEN_PIPE,
    FAILURES,
    INTERRUPTED,
    VERIFY_FAILED,
    UsageParser,
    who,
)

__all__ = ["MAX_COUNT", "at_least_one", "demo_names", "parser", "port", "seconds"]

Commands: TypeAlias = "argparse._SubParsersAction[UsageParser]"  # pyright: ignore[reportPrivateUsage]

_FORMATION_HELP = "the formation to load (default: the one the stored run names)"
_STORE_HELP = (
    "run store: a SQLite file or a PostgreSQL DSN (env CONVERGE_STORE; default .converge/runs.db)"
)
_KEY_FILE_HELP = (
    "read the signing key from FILE (else env CONVERGE_SIGNING_KEY_FILE or "
    "CONVERGE_SIGNING_KEY); both variables are dropped from the environment at start"
)
_WIDTH: Final = 78

_ALWAYS: Final = (
    (1, "an error: one line on standard error, often with a hint line"),
    (2, "a usage error (an unknown option, a missing argument, a bad value)"),
    (INTERRUPTED, "interrupted (Ctrl-C, or a suggestor raised KeyboardInterrupt)"),
    (BROKEN_PIPE, "the reader of the output went away (`| head`): nothing more is written"),
)
_RUN: Final = (
    (0, "the run converged"),
    (3, "a budget ran out (cycles, facts, tokens or time)"),
    (4, "an invariant was violated"),
    (5, "a conflict stopped the run"),
    (6, "the run awaits a human"),
    (FAILURES, "converged, with failed calls or invalid proposals (--allow-failures: 0)"),
)
_STALE: Final = ((STALE, "someone else decided or continued the run first (or it runs elsewhere)"),)
_TAKEN: Final = ((STALE, "the run was taken over while it ran (its lease ran out): not saved"),)
_ALL: Final = (
    (0, "converged, or the command succeeded"),
    *_RUN[1:],
    (VERIFY_FAILED, "verify or replay failed"),
    *_STALE,
    (BATCH_INCOMPLETE, "batch: an input did not end as a stored run"),
)


def _text(*paragraphs: str) -> str:
    return "\n\n".join(textwrap.fill(paragraph, _WIDTH) for paragraph in paragraphs)


def _statuses(own: Sequence[tuple[int, str]]) -> str:
    """The epilog listing the exit statuses a command returns: its `own`, then the usual."""
    rows = sorted((*own, *_ALWAYS))
    return "exit status:\n" + "\n".join(f"  {code:<5}{meaning}" for code, meaning in rows)


MAX_COUNT: Final = 1_000_000_000
"""The largest count an option takes (cycles, runs listed, workers): more is a usage error,
not an overflow where the number meets a store or a cluster."""


def at_least_one(value: str) -> int:
    """A whole number from 1 to `MAX_COUNT` (an argparse type: anything else is a usage
    error)."""
    shown = value if len(value) <= 40 else f"{value[:40]}..."
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {shown!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {shown.strip()}")
    if number > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_COUNT:_}, got {shown.strip()}")
    return number


def seconds(value: str) -> float:
    """A positive, finite number of seconds (an argparse type)."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {value!r}") from None
    if not (math.isfinite(number) and number > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {value!r}")
    return number


def port(value: str) -> int:
    """A TCP port, 0 to 65535; 0 lets the system choose (an argparse type)."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a port number, got {value!r}") from None
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"must be from 0 to 65535, got {number}")
    return number


def demo_names(package: str) -> tuple[str, ...] | None:
    """The demos of `package` (its `DEMOS`), imported now; `None` if it is not installed."""
    try:
        names: tuple[str, ...] = importlib.import_module(package).DEMOS
    except ImportError:
        return None
    return names


class _DemoHelp(argparse.Action):
    """`converge demo --help`: the help, with the demos (their package imported only then)."""

    def __init__(self, option_strings: Sequence[str], dest: str, package: str, help: str) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)
        self._package = package

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> NoReturn:
        names = demo_names(self._package)
        listing = (
            f"the demos package {self._package} is not installed"
            if names is None
            else f"demos: {', '.join(names)}"
        )
        parser.epilog = f"{textwrap.fill(listing, _WIDTH)}\n\n{parser.epilog}"
        parser.print_help()
        parser.exit()


def parser(default_demo: str, demo_package: str) -> argparse.ArgumentParser:
    """The `converge` command line: global options and every command."""
    parser = UsageParser(
        prog="converge",
        description="Run converge formations; review, verify, replay and report stored runs.",
        epilog=_statuses(_ALL)
        + "\n\n`converge COMMAND --help` describes a command, its options and the\n"
        "statuses it returns.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--store", help=_STORE_HELP)
    parser.add_argument("--key-file", metavar="FILE", help=_KEY_FILE_HELP)
    parser.add_argument(
        "--version",
        action="version",
        version=f"converge-engine {__version__}",
        help="print the installed distribution and version, then exit",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _running(commands, default_demo, demo_package)
    _resume(commands)
    _listing(commands)
    _checking(commands)
    _forking(commands)
    _batch(commands)
    _console(commands)
    for sub in commands.choices.values():  # `--store` after the command works too
        own = sub.add_argument_group("options of converge itself (also before the command)")
        own.add_argument("--store", default=argparse.SUPPRESS, help=_STORE_HELP)
        own.add_argument(
            "--debug",
            action="store_true",
            default=argparse.SUPPRESS,
            help="show tracebacks on errors",
        )
        own.add_argument(
            "--key-file", metavar="FILE", default=argparse.SUPPRESS, help=_KEY_FILE_HELP
        )
    return parser


def _command(
    commands: Commands,
    name: str,
    summary: str,
    description: Sequence[str],
    statuses: Sequence[tuple[int, str]],
    *,
    add_help: bool = True,
) -> UsageParser:
    """Add the command `name`: `summary` in `converge --help`, the rest in its own."""
    return commands.add_parser(
        name,
        help=summary,
        description=_text(*description),
        epilog=_statuses(statuses),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=add_help,
    )


def _running(commands: Commands, default_demo: str, demo_package: str) -> None:
    """`run` and `demo`: the commands that start runs."""
    run = _command(
        commands,
        "run",
        "run a formation file or module",
        (
            "Load the module-level `formation` of a Python file or an importable module, run "
            "it to a stop while printing one line per cycle, then print the summary. The run "
            "is saved to the store (after every cycle by default) and its HTML report is "
            "written beside the store.",
            "--json prints the run record as one JSON document instead.",
        ),
        (*_RUN, *_TAKEN),
    )
    run.add_argument("formation", help="path to a .py file, or a module name, with `formation`")
    demo = _command(
        commands,
        "demo",
        "run a bundled demo",
        (
            f"Run one of the demos of {demo_package} (offline, the same every time), as "
            f"`run` would; without NAME, {default_demo}.",
        ),
        (*_RUN, *_TAKEN),
        add_help=False,
    )
    demo.add_argument(
        "-h",
        "--help",
        action=_DemoHelp,
        package=demo_package,
        help="show this help message and exit",
    )
    demo.add_argument("name", nargs="?", default=default_demo, help="the demo to run")
    for sub in (run, demo):
        sub.add_argument(
            "--max-cycles",
            type=at_least_one,
            metavar="N",
            help="override the formation's cycle budget (at least 1)",
        )
        sub.add_argument(
            "--durability",
            choices=("cycle", "exit"),
            default="cycle",
            help="save after every cycle (default) or only when the run stops",
        )
        _run_options(sub, "the run record")


def _resume(commands: Commands) -> None:
    """`resume`: decide a paused run, or continue an interrupted one."""
    resume = _command(
        commands,
        "resume",
        "decide a paused run's gates, or continue an interrupted run",
        (
            "Decide the gates a paused run waits on (every gate needs --approve or --reject, "
            "and --by names who decides) and run it on; without decisions, continue an "
            "interrupted run from its last saved cycle. The formation is the one the run "
            "names, or --formation.",
            "--json prints the resumed run's record as one JSON document.",
        ),
        (*_RUN, *_STALE),
    )
    resume.add_argument("run_id")
    resume.add_argument(
        "--approve", nargs="*", default=[], metavar="GATE", help="gates to let through"
    )
    resume.add_argument("--reject", nargs="*", default=[], metavar="GATE", help="gates to refuse")
    resume.add_argument("--by", type=who, help="who decides (required with decisions)")
    resume.add_argument("--reason", help="why, for rejections")
    resume.add_argument("--formation", help=_FORMATION_HELP)
    _run_options(resume, "the resumed run's record")


def _run_options(sub: UsageParser, record: str) -> None:
    """The options of the commands that run cycles: `--json`, `--allow-failures`, `--lease`."""
    _json(sub, record)
    sub.add_argument(
        "--allow-failures",
        action="store_true",
        help="exit 0 for a run that converged with failed calls, invalid proposals or "
        "rolled-back effects",
    )
    _lease(sub, "the run")


def _lease(sub: UsageParser, what: str) -> None:
    sub.add_argument(
        "--lease",
        type=seconds,
        default=DEFAULT_LEASE,
        metavar="SECONDS",
        help=f"how long {what} counts as alive without a save (default {DEFAULT_LEASE:g})",
    )


def _json(sub: UsageParser, what: str) -> None:
    sub.add_argument("--json", action="store_true", help=f"print {what} as one JSON document")


def _listing(commands: Commands) -> None:
    """`runs`, `show` and `review`: read stored runs (the store is opened read-only)."""
    runs = _command(
        commands,
        "runs",
        "list stored runs",
        (
            "List the stored runs, the most recently saved first: id, when it was last saved "
            "(UTC), status, stop reason, cycles, facts and formation name.",
        ),
        ((0, "listed (also when there are none)"),),
    )
    _page(runs, "runs")
    runs.add_argument(
        "--status",
        type=status_or_reason,
        metavar="STATUS",
        help="only runs with this status (running, paused, finished, interrupted) or stop "
        "reason (converged, awaiting_human, ...)",
    )
    runs.add_argument("--formation", metavar="NAME", help="only runs of this formation name")
    runs.add_argument("--pending", action="store_true", help="only runs waiting on a human gate")
    runs.add_argument(
        "--since",
        type=moment,
        metavar="WHEN",
        help="only runs saved since WHEN: an ISO 8601 time (UTC unless it says) or an age "
        "such as 90m, 12h or 7d",
    )
    runs.add_argument(
        "--search", metavar="TEXT", help="only runs whose id or formation name holds TEXT"
    )
    _json(runs, "a list of run summaries")
    show = _command(
        commands,
        "show",
        "show a stored run",
        (
            "Print a stored run's summary, then every fact by key with its provenance, "
            "confidence, cycle, gate and approver, then the rejections.",
        ),
        ((0, "shown"),),
    )
    show.add_argument("run_id")
    _json(show, "the run record")
    review = _command(
        commands,
        "review",
        "show the gates a paused run waits on",
        (
            "For each gate a paused run waits on: the proposal, who proposed it in which "
            "cycle, its confidence, evidence, payload and deadline; then the command that "
            "decides them.",
        ),
        ((0, "the run waits for no one"), (6, "the run awaits a human")),
    )
    review.add_argument(
        "run_id",
        nargs="?",
        help="the paused run; without it, the inbox: every gate waiting in the store, the "
        "longest waiting first",
    )
    _page(review, "gates (the inbox)")
    _json(review, "the pending gates and the commands")
    prune = _command(
        commands,
        "prune",
        "delete old stored runs",
        (
            "Delete the runs last saved more than AGE ago, with everything stored about them, "
            "in one transaction. A running run is never deleted, nor a paused one (waiting "
            "for a human) unless --status names it (paused or awaiting_human) and "
            "--keep-paused is not given.",
        ),
        ((0, "pruned (also when nothing was old enough)"),),
    )
    prune.add_argument(
        "--older-than", type=age, required=True, metavar="AGE", help="e.g. 30d, 12h or 90m"
    )
    prune.add_argument(
        "--status",
        type=status_or_reason,
        metavar="STATUS",
        help="only runs with this status or stop reason",
    )
    prune.add_argument("--formation", metavar="NAME", help="only runs of this formation")
    prune.add_argument("--keep-paused", action="store_true", help="never delete a paused run")
    prune.add_argument(
        "--dry-run", action="store_true", help="list what would be deleted, delete nothing"
    )
    prune.add_argument(
        "--vacuum", action="store_true", help="then give the freed space back (SQLite: VACUUM)"
    )
    _json(prune, '{"deleted": [RUN_ID...], "dry_run": BOOL}')


def _page(sub: UsageParser, what: str) -> None:
    sub.add_argument(
        "--limit", type=at_least_one, default=20, metavar="N", help=f"at most N {what} (default 20)"
    )
    sub.add_argument(
        "--offset", type=_offset, default=0, metavar="K", help=f"skip the first K {what}"
    )


_AGE: Final = re.compile(r"(\d{1,9})([smhdw])")
_UNIT: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def age(value: str) -> timedelta:
    """An age such as `30d`, `12h`, `90m`, `45s` or `2w` (an argparse type)."""
    found = _AGE.fullmatch(value.strip())
    if found is None:
        shown = value if len(value) <= 40 else f"{value[:40]}..."
        raise argparse.ArgumentTypeError(
            f"must be a number and a unit (s, m, h, d or w), e.g. 30d; got {shown!r}"
        )
    return timedelta(seconds=int(found[1]) * _UNIT[found[2]])


def moment(value: str) -> datetime:
    """An ISO 8601 time (UTC unless it names its zone) or an age before now (an argparse
    type)."""
    if _AGE.fullmatch(value.strip()):
        return datetime.now(UTC) - age(value)
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        shown = value if len(value) <= 40 else f"{value[:40]}..."
        raise argparse.ArgumentTypeError(
            f"must be an ISO 8601 time (2026-01-31T12:00) or an age (7d); got {shown!r}"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def status_or_reason(value: str) -> RunStatus | StopReason:
    """A run status or a stop reason, by its value (an argparse type)."""
    for kind in (RunStatus, StopReason):
        try:
            return kind(value)
        except ValueError:
            continue
    known = ", ".join([*(s.value for s in RunStatus), *(r.value for r in StopReason)])
    shown = value if len(value) <= 40 else f"{value[:40]}..."
    raise argparse.ArgumentTypeError(f"must be one of {known}; got {shown!r}")


def _checking(commands: Commands) -> None:
    """`verify`, `replay` and `report`: check or report stored runs (read-only too)."""
    verify = _command(
        commands,
        "verify",
        "check a run's facts against its proof",
        (
            "Recompute every fact's digest and the Merkle root of a stored run, or of a run "
            "record in a JSON file (what --json prints), and check them against the run's "
            "integrity proof.",
        ),
        ((0, "verified"), (VERIFY_FAILED, "the facts do not match the proof")),
    )
    verify.add_argument("target", metavar="RUN_ID|FILE")
    _json(verify, "the outcome")
    replay = _command(
        commands,
        "replay",
        "re-merge a run's recorded effects",
        (
            "Merge a stopped run's recorded effects and decisions again with its formation's "
            "engine, calling no suggestor; the result must have the stored integrity proof.",
        ),
        ((0, "the replay gave the recorded run"), (VERIFY_FAILED, "it did not")),
    )
    replay.add_argument("run_id")
    replay.add_argument("--formation", help=_FORMATION_HELP)
    replay.add_argument(
        "--live-from",
        type=_cycle,
        metavar="CYCLE",
        help="replay up to CYCLE (the root checked), then run the current suggestors live "
        "as a new run linked to this one (a fork)",
    )
    _json(replay, "the outcome (with --live-from: the new run's record)")
    report = _command(
        commands,
        "report",
        "write a run's HTML report",
        ("Write a stored run's self-contained HTML report.",),
        ((0, "written"),),
    )
    report.add_argument("run_id")
    report.add_argument("-o", "--output", help="file to write (default .converge/reports/ID.html)")
    _json(report, '{"report": PATH}')
    export = _command(
        commands,
        "export",
        "write every fact of a run as JSON lines or CSV",
        (
            "Check a stored run as verify does, then write every fact, in order: one JSON "
            "object a line (--format jsonl, exactly as stored) or a CSV table (--format csv, "
            "for spreadsheets). Nothing is written when the check fails.",
        ),
        ((0, "written"), (VERIFY_FAILED, "the facts do not match the proof: nothing written")),
    )
    export.add_argument("run_id")
    export.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")
    export.add_argument(
        "-o", "--output", help="file to write (default: standard output); replaced whole"
    )
    _json(export, '{"exported": PATH, "format": FORMAT, "facts": N} (with -o)')


def _whole(value: str, what: str) -> int:
    """`value` as a whole number from 0 to `MAX_COUNT`, or an argparse error naming `what`."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {value[:40]!r}") from None
    if not 0 <= number <= MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be from 0 to {MAX_COUNT:_}, got {number}")
    return number


def _offset(value: str) -> int:
    """How many to skip, 0 or more (an argparse type)."""
    return _whole(value, "a whole number")


def _cycle(value: str) -> int:
    """A cycle number, 0 or more (an argparse type)."""
    return _whole(value, "a cycle number")


def _forking(commands: Commands) -> None:
    """`fork` and `diff`: branch a stored run at a cycle, compare two runs."""
    _fork(commands)
    _diff(commands)


def _fork(commands: Commands) -> None:
    """`fork`: a new run from a stored run's context at a cycle, with facts changed there."""
    fork = _command(
        commands,
        "fork",
        "start a new run from a stored run's context at a cycle",
        (
            "Rebuild a stored run's context at the end of CYCLE (0: its inputs only) from its "
            "facts, checked, without calling any suggestor; remove --retract facts and add "
            "--input facts; then run the formation as it is now from there, as a new run "
            "that names its parent, the cycle and the parent's root there. The parent's "
            "human decisions after CYCLE are not carried over.",
            "--json prints the fork's record as one JSON document.",
        ),
        (
            *_RUN,
            (2, "also: no such cycle, no such fact to retract, an input that does not fit"),
            (VERIFY_FAILED, "the parent's signature fails: nothing was forked"),
        ),
    )
    fork.add_argument("run_id", metavar="RUN")
    fork.add_argument("--at", type=_cycle, required=True, metavar="CYCLE", help="the cycle")
    fork.add_argument(
        "--input",
        action=InputAction,
        nargs=3,
        metavar=("KEY", "ID", "CONTENT"),
        help="add a fact at the fork (repeatable); --payload JSON right after gives its payload",
    )
    fork.add_argument(
        "--payload", action=PayloadAction, metavar="JSON", help="the payload of the --input before"
    )
    fork.add_argument("--inputs", metavar="FILE", help="a JSON list of proposed facts to add")
    fork.add_argument(
        "--retract",
        action="append",
        metavar="FACT_ID",
        help="remove a fact (KEY/ID, or an ID that names one fact; repeatable)",
    )
    fork.add_argument(
        "--cascade", action="store_true", help="also remove every fact whose evidence reaches it"
    )
    fork.add_argument(
        "--max-cycles",
        type=at_least_one,
        metavar="N",
        help="override the formation's cycle budget (counted from the parent's first cycle)",
    )
    fork.add_argument("--formation", help=_FORMATION_HELP)
    _run_options(fork, "the fork's record")


def _diff(commands: Commands) -> None:
    """`diff`: two stored runs compared fact by fact."""
    diff = _command(
        commands,
        "diff",
        "compare two stored runs fact by fact",
        (
            "Print the first cycle at whose end the two runs' contexts differ (by Merkle "
            "root), then per key the facts only in A, only in B, and in both with different "
            "content, payload or provenance, each with the suggestor and cycle that made it, "
            "and both stop reasons.",
        ),
        ((0, "compared"), (VERIFY_FAILED, "a run's signature or facts do not verify")),
    )
    diff.add_argument("run_a", metavar="RUN_A")
    diff.add_argument("run_b", metavar="RUN_B")
    diff.add_argument("--key", metavar="K", help="only the facts under key K")
    diff.add_argument(
        "--limit",
        type=at_least_one,
        default=1000,
        metavar="N",
        help="at most N facts per list (default 1000; the counts are whole)",
    )
    _json(diff, "the comparison")


def _batch(commands: Commands) -> None:
    """`batch`: one run per input line, on a Dask cluster (see `_cli_batch`)."""
    batch = _command(
        commands,
        "batch",
        "run a formation once per input line, on Dask",
        (BATCH_DESCRIPTION,),
        BATCH_STATUSES,
    )
    batch.add_argument("formation", help="path to a .py file, or a module name, with `formation`")
    batch.add_argument("inputs", metavar="INPUTS.jsonl", help='one {"inputs": [...]} per line')
    where = batch.add_mutually_exclusive_group()
    where.add_argument(
        "--workers",
        type=at_least_one,
        metavar="N",
        help="worker processes of a local cluster (default 2)",
    )
    where.add_argument("--scheduler", metavar="ADDRESS", help="an existing Dask scheduler")
    batch.add_argument("--batch-id", help="name the batch and its run ids (default: a new id)")
    batch.add_argument(
        "--runs-per-worker",
        type=at_least_one,
        default=DEFAULT_RUNS_PER_WORKER,
        metavar="N",
        help=f"runs a worker runs at once (default {DEFAULT_RUNS_PER_WORKER}; 1 for CPU-bound)",
    )
    batch.add_argument(
        "--connect-timeout",
        type=seconds,
        default=DEFAULT_WORKER_TIMEOUT,
        metavar="SECONDS",
        help="give up on a --scheduler that cannot be reached, or has no worker, after "
        f"this long (default {DEFAULT_WORKER_TIMEOUT:g})",
    )
    for flag, text in BATCH_FLAGS:
        batch.add_argument(flag, action="store_true", help=text)
    _lease(batch, "a run")
    _json(batch, "the batch result")


def _console(commands: Commands) -> None:
    """`ui`: the review console in the browser (see `_cli_ui`); it has no --json."""
    ui = _command(
        commands,
        "ui",
        "serve the review console in the browser (the 'ui' extra)",
        (
            "Serve the runs of a store, live, and decide their human gates in the browser. "
            "Every request needs a reviewer's session or token; by default one reviewer, you, "
            "with a new token and a one-time sign-in link printed. It serves until Ctrl-C, "
            "and has no --json.",
        ),
        ((0, "--add added a reviewer, or --remove removed one"),),
    )
    ui.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    ui.add_argument("--port", type=port, default=8765, help="port (default 8765; 0: any free)")
    ui.add_argument("--users", metavar="FILE", help="admit the reviewers in this JSON file")
    ui.add_argument("--add", metavar="NAME", type=who, help="add reviewer NAME to --users FILE")
    ui.add_argument("--remove", metavar="NAME", type=who, help="remove NAME from --users FILE")
    ui.add_argument("--reviewer", type=who, help="your name as recorded (default: login name)")
    ui.add_argument("--formation", help="resume every run with this formation")
    ui.add_argument("--trust-unsigned", action="store_true", help="import what unsigned runs name")
    ui.add_argument("--origin", metavar="URL", help="public origin behind TLS (https://...)")
    ui.add_argument(
        "--poll",
        type=seconds,
        default=0.5,
        metavar="SECONDS",
        help="how often a live page reads the store (default 0.5)",
    )
