"""The `converge` command line's arguments: global options, then each command's.

Every command's `--help` has a description, its options (`--store`, `--key-file` and
`--debug` too, which work before or after the command) and the exit statuses it can return.
Numeric options are checked by their argparse type (`_types`), so a bad value is a usage error
(status 2). The arguments of the commands that read stored runs are in `_read_args`.
"""

from __future__ import annotations

import argparse
import importlib
import textwrap
from collections.abc import Sequence
from typing import Final, NoReturn

from .._review import STALE
from .._scale._defaults import DEFAULT_RUNS_PER_WORKER, DEFAULT_WORKER_TIMEOUT
from .._version import __version__
from ..stores._durable import DEFAULT_LEASE
from ._command import FORMATION_HELP, WIDTH, Commands, command, exit_statuses, json_option
from ._output import BATCH_INCOMPLETE, FAILURES, VERIFY_FAILED, UsageParser, who
from ._read_args import read_commands
from ._types import InputAction, PayloadAction, at_least_one, cycle, port, seconds

__all__ = ["DEFAULT_DEMO", "DEMO_PACKAGE", "demo_names", "parser"]

_STORE_HELP = (
    "run store: a SQLite file or a PostgreSQL DSN (env CONVERGE_STORE; default .converge/runs.db)"
)
_KEY_FILE_HELP = (
    "read the signing key from FILE (else env CONVERGE_SIGNING_KEY_FILE or "
    "CONVERGE_SIGNING_KEY); both variables are dropped from the environment at start"
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

_BATCH_DESCRIPTION: Final = (
    'Run the formation once per line of INPUTS.jsonl (each {"inputs": [...]}), on a local Dask '
    "cluster or an existing one, and store every run; the same command with the same "
    "--batch-id completes an incomplete batch. Needs the dask extra."
)
"""`converge batch --help`'s description."""
_BATCH_STATUSES: Final = (
    (0, "every input ended as a stored run, none converged with failures"),
    (FAILURES, "a run converged with failed calls or rolled-back effects"),
    (BATCH_INCOMPLETE, "an input did not end as a stored run"),
)
"""The exit statuses of `converge batch` (besides 1, 2, 130 and 141)."""
_BATCH_FLAGS: Final = (
    ("--rerun-changed", "run an input line that changed since its run was stored as a new run"),
    ("--allow-failures", "exit 0 when runs converged with failed calls or rolled-back effects"),
)
"""The on/off options of `converge batch`."""


DEMO_PACKAGE: Final = "converge_suggestors.demos"
"""The package `converge demo` runs its demos from."""
DEFAULT_DEMO: Final = "vendor_selection"
"""The demo `converge demo` runs without a name."""


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
        parser.epilog = f"{textwrap.fill(listing, WIDTH)}\n\n{parser.epilog}"
        parser.print_help()
        parser.exit()


def parser(default_demo: str, demo_package: str) -> argparse.ArgumentParser:
    """The `converge` command line: global options and every command."""
    parser = UsageParser(
        prog="converge",
        description="Run converge formations; review, verify, replay and report stored runs.",
        epilog=exit_statuses(_ALL)
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
    read_commands(commands)
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


def _running(commands: Commands, default_demo: str, demo_package: str) -> None:
    """`run` and `demo`: the commands that start runs."""
    run = command(
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
    demo = command(
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
    resume = command(
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
    resume.add_argument("--formation", help=FORMATION_HELP)
    _run_options(resume, "the resumed run's record")


def _run_options(sub: UsageParser, record: str) -> None:
    """The options of the commands that run cycles: `--json`, `--allow-failures`, `--lease`."""
    json_option(sub, record)
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


def _forking(commands: Commands) -> None:
    """`fork` and `diff`: branch a stored run at a cycle, compare two runs."""
    _fork(commands)
    _diff(commands)


def _fork(commands: Commands) -> None:
    """`fork`: a new run from a stored run's context at a cycle, with facts changed there."""
    fork = command(
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
    fork.add_argument("--at", type=cycle, required=True, metavar="CYCLE", help="the cycle")
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
    fork.add_argument("--formation", help=FORMATION_HELP)
    _run_options(fork, "the fork's record")


def _diff(commands: Commands) -> None:
    """`diff`: two stored runs compared fact by fact."""
    diff = command(
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
    json_option(diff, "the comparison")


def _batch(commands: Commands) -> None:
    """`batch`: one run per input line, on a Dask cluster (see `_cli_batch`)."""
    batch = command(
        commands,
        "batch",
        "run a formation once per input line, on Dask",
        (_BATCH_DESCRIPTION,),
        _BATCH_STATUSES,
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
    for flag, text in _BATCH_FLAGS:
        batch.add_argument(flag, action="store_true", help=text)
    _lease(batch, "a run")
    json_option(batch, "the batch result")


def _console(commands: Commands) -> None:
    """`ui`: the review console in the browser (see `_cli_ui`); it has no --json."""
    ui = command(
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
