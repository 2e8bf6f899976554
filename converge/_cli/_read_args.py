"""The arguments of the commands that read stored runs: `runs`, `show`, `review`, `prune`,
`verify`, `replay`, `report` and `export`.

They open the store read-only (but `prune`, which deletes old runs), and run no formation
(but `replay`, which merges a run's recorded effects again with its formation's engine).
"""

from __future__ import annotations

from ._command import FORMATION_HELP, Commands, command, json_option
from ._output import VERIFY_FAILED, UsageParser
from ._types import age, at_least_one, cycle, moment, offset, status_or_reason

__all__ = ["read_commands"]


def read_commands(commands: Commands) -> None:
    """`runs`, `show` and `review`: read stored runs (the store is opened read-only);
    `verify`, `replay` and `report`: check or report stored runs (read-only too)."""
    _runs(commands)
    _show(commands)
    _review(commands)
    _prune(commands)
    _verify(commands)
    _replay(commands)
    _report(commands)
    _export(commands)


def _runs(commands: Commands) -> None:
    """`runs`: one page of the stored runs, filtered."""
    runs = command(
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
    json_option(runs, "a list of run summaries")


def _show(commands: Commands) -> None:
    """`show`: one stored run, every fact."""
    show = command(
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
    json_option(show, "the run record")


def _review(commands: Commands) -> None:
    """`review`: the gates a paused run waits on, or the inbox of them all."""
    review = command(
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
    json_option(review, "the pending gates and the commands")


def _prune(commands: Commands) -> None:
    """`prune`: delete the runs last saved long ago."""
    prune = command(
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
    json_option(prune, '{"deleted": [RUN_ID...], "dry_run": BOOL}')


def _page(sub: UsageParser, what: str) -> None:
    sub.add_argument(
        "--limit", type=at_least_one, default=20, metavar="N", help=f"at most N {what} (default 20)"
    )
    sub.add_argument(
        "--offset", type=offset, default=0, metavar="K", help=f"skip the first K {what}"
    )


def _verify(commands: Commands) -> None:
    """`verify`: a run's facts against its proof."""
    verify = command(
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
    json_option(verify, "the outcome")


def _replay(commands: Commands) -> None:
    """`replay`: a run's recorded effects merged again, or forked live from a cycle."""
    replay = command(
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
    replay.add_argument("--formation", help=FORMATION_HELP)
    replay.add_argument(
        "--live-from",
        type=cycle,
        metavar="CYCLE",
        help="replay up to CYCLE (the root checked), then run the current suggestors live "
        "as a new run linked to this one (a fork)",
    )
    json_option(replay, "the outcome (with --live-from: the new run's record)")


def _report(commands: Commands) -> None:
    """`report`: a run's HTML report."""
    report = command(
        commands,
        "report",
        "write a run's HTML report",
        ("Write a stored run's self-contained HTML report.",),
        ((0, "written"),),
    )
    report.add_argument("run_id")
    report.add_argument("-o", "--output", help="file to write (default .converge/reports/ID.html)")
    json_option(report, '{"report": PATH}')


def _export(commands: Commands) -> None:
    """`export`: every fact of a run, as JSON lines or CSV."""
    export = command(
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
    json_option(export, '{"exported": PATH, "format": FORMAT, "facts": N} (with -o)')
