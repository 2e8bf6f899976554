"""The `converge` command line's arguments: global options, then each command's."""

from __future__ import annotations

import argparse

from ._cli_support import UsageParser, who
from ._durable import DEFAULT_LEASE
from .dask import DEFAULT_RUNS_PER_WORKER

__all__ = ["parser"]

_FORMATION_HELP = "the formation to load (default: the one the stored run names)"


def parser(default_demo: str) -> argparse.ArgumentParser:
    """The `converge` command line: global options and every command."""
    parser = UsageParser(
        prog="converge",
        description="Run converge formations; review, verify, replay and report stored runs.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument(
        "--store",
        help="run store: a SQLite file or a PostgreSQL DSN (env CONVERGE_STORE; "
        "default .converge/runs.db)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _running(commands, default_demo)
    _reading(commands)
    _batch(commands)
    _console(commands)
    for sub in commands.choices.values():  # `--store` after the command works too
        sub.add_argument("--store", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        sub.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
        )
    return parser


def _running(
    commands: argparse._SubParsersAction[UsageParser],  # pyright: ignore[reportPrivateUsage]
    default_demo: str,
) -> None:
    """`run`, `demo` and `resume`: the commands that run cycles."""
    run = commands.add_parser("run", help="run a formation file or module")
    run.add_argument("formation", help="path to a .py file, or a module name, with `formation`")
    demo = commands.add_parser("demo", help="run a bundled demo")
    demo.add_argument("name", nargs="?", default=default_demo)
    resume = commands.add_parser(
        "resume", help="decide a paused run's gates, or continue an interrupted run"
    )
    resume.add_argument("run_id")
    resume.add_argument("--approve", nargs="*", default=[], metavar="GATE")
    resume.add_argument("--reject", nargs="*", default=[], metavar="GATE")
    resume.add_argument("--by", type=who, help="who decides (required with decisions)")
    resume.add_argument("--reason", help="why, for rejections")
    resume.add_argument("--formation", help=_FORMATION_HELP)
    for sub in (run, demo):
        sub.add_argument("--max-cycles", type=int, help="override the formation's cycle budget")
        sub.add_argument(
            "--durability",
            choices=("cycle", "exit"),
            default="cycle",
            help="save after every cycle (default) or only when the run stops",
        )
    for sub in (run, demo, resume):
        sub.add_argument("--json", action="store_true", help="print the run record as JSON")
        sub.add_argument(
            "--allow-failures",
            action="store_true",
            help="exit 0 for a run that converged with failed calls or rolled-back effects",
        )
        sub.add_argument(
            "--lease",
            type=float,
            default=DEFAULT_LEASE,
            metavar="SECONDS",
            help=f"how long the run counts as alive without a save (default {DEFAULT_LEASE:g})",
        )


def _reading(
    commands: argparse._SubParsersAction[UsageParser],  # pyright: ignore[reportPrivateUsage]
) -> None:
    """The commands that read stored runs."""
    commands.add_parser("runs", help="list stored runs").add_argument(
        "--limit", type=int, default=20
    )
    commands.add_parser("show", help="show a stored run").add_argument("run_id")
    commands.add_parser("review", help="show the gates a paused run waits on").add_argument(
        "run_id"
    )
    commands.add_parser("verify", help="check a run's facts against its proof").add_argument(
        "target", metavar="RUN_ID|FILE"
    )
    replay = commands.add_parser("replay", help="re-merge a run's recorded effects")
    replay.add_argument("run_id")
    replay.add_argument("--formation", help=_FORMATION_HELP)
    report = commands.add_parser("report", help="write a run's HTML report")
    report.add_argument("run_id")
    report.add_argument("-o", "--output", help="file to write (default .converge/reports/ID.html)")


def _batch(
    commands: argparse._SubParsersAction[UsageParser],  # pyright: ignore[reportPrivateUsage]
) -> None:
    """`batch`: one run per input line, on a Dask cluster (see `_cli_batch`)."""
    batch = commands.add_parser("batch", help="run a formation once per input line, on Dask")
    batch.add_argument("formation", help="path to a .py file, or a module name, with `formation`")
    batch.add_argument("inputs", metavar="INPUTS.jsonl", help='one {"inputs": [...]} per line')
    where = batch.add_mutually_exclusive_group()
    where.add_argument(
        "--workers", type=int, metavar="N", help="worker processes of a local cluster (default 2)"
    )
    where.add_argument("--scheduler", metavar="ADDRESS", help="an existing Dask scheduler")
    batch.add_argument("--batch-id", help="name the batch and its run ids (default: a new id)")
    batch.add_argument(
        "--runs-per-worker",
        type=int,
        default=DEFAULT_RUNS_PER_WORKER,
        metavar="N",
        help=f"runs a worker runs at once (default {DEFAULT_RUNS_PER_WORKER}; 1 for CPU-bound)",
    )
    batch.add_argument(
        "--lease",
        type=float,
        default=DEFAULT_LEASE,
        metavar="SECONDS",
        help=f"how long a run counts as alive without a save (default {DEFAULT_LEASE:g})",
    )
    batch.add_argument("--json", action="store_true", help="print the batch result as JSON")


def _console(
    commands: argparse._SubParsersAction[UsageParser],  # pyright: ignore[reportPrivateUsage]
) -> None:
    """`ui`: the review console in the browser (see `_cli_ui`)."""
    ui = commands.add_parser(
        "ui",
        help="serve the review console in the browser (the 'ui' extra)",
        description="Serve the runs of a store, live, and decide their human gates in the "
        "browser. Every request needs a reviewer's token; by default one reviewer, you, with a "
        "new token in the printed URL.",
    )
    ui.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    ui.add_argument("--port", type=int, default=8765, help="port (default 8765; 0: any free)")
    ui.add_argument("--users", metavar="FILE", help="admit the reviewers in this JSON file")
    ui.add_argument("--add", metavar="NAME", type=who, help="add reviewer NAME to --users FILE")
    ui.add_argument("--reviewer", type=who, help="your name as recorded (default: login name)")
    ui.add_argument("--formation", help="resume every run with this formation")
    ui.add_argument(
        "--poll",
        type=float,
        default=0.5,
        metavar="SECONDS",
        help="how often a live page reads the store (default 0.5)",
    )
