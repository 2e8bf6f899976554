"""The `converge` command: run formations, watch them converge, review, verify, replay, report.

```
converge run PATH_OR_MODULE [--max-cycles N] [--store PATH] [--json]
converge demo [NAME]
converge runs | show RUN_ID | review RUN_ID
converge resume RUN_ID --approve GATE... --reject GATE... --by NAME [--reason TEXT]
converge verify RUN_ID|FILE | replay RUN_ID | report RUN_ID [-o FILE]
converge export RUN_ID [--format jsonl|csv] [-o FILE]
converge batch PATH_OR_MODULE INPUTS.jsonl [--workers N | --scheduler ADDRESS] [--json]
converge ui [--port PORT] [--users FILE]
```

`--key-file FILE` (or `CONVERGE_SIGNING_KEY_FILE`, or `CONVERGE_SIGNING_KEY`) gives the
signing key, read once at start; both variables are then dropped from the environment
(`_cli_records.take_signing_key`), before any formation is imported.

Every command but `ui` takes `--json`: one JSON document on standard output instead of
text, with the same exit status (the shapes are in each command's module and `docs/cli.md`).

Exit status: 0 converged (or verified); 1 error; 2 usage; 3 a budget ran out; 4 an invariant
was violated; 5 a conflict; 6 awaiting a human; 7 verification or replay failed; 8 someone
else decided or saved the run first (nothing was saved); 9 converged with failures; 10 a
batch input not stored; 130 interrupted; 141 the reader of the output went away. Each
command's `--help` lists the statuses it can return (`_cli/_parser.py`).

Everything printed that the command did not write itself (model output, stored records,
exception messages) has its control characters escaped (`visible`), and
every error is one line.
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import sys
import traceback
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Final, NoReturn, TextIO

import anyio

from .._core._error import Stopped, SuggestorExitError, UsageError, describe_error
from .._core._escape import error_text, visible
from .._core._exceptions import ConvergeError, RunNotFoundError, StaleRecordError
from .._kernel._abort import stopped_by
from .._review import STALE, forget_signing_key, take_signing_key
from ..stores._by_hand import drive
from ._output import BROKEN_PIPE, INTERRUPTED, engine_warnings, program
from ._parser import DEFAULT_DEMO, DEMO_PACKAGE, parser
from ._store import close_stores, given_store, on_sqlite, store_argument

__all__ = ["main"]


Command = Callable[[argparse.Namespace, TextIO], Coroutine[object, object, int]]


_READS: Final = frozenset({"runs", "show", "review", "verify", "export"})
"""The commands that only read stores (opened read-only), and import no formation."""

_BY_HAND: Final = frozenset({"runs", "show", "review"})
"""The reads that, on a SQLite store, run with no event loop (`stores._by_hand`)."""


def main(
    argv: Sequence[str] | None = None, *, out: TextIO | None = None, leave: bool = False
) -> int:
    """Run the command line; return the exit status.

    With `leave` (the console script, `console`), a command of `_READS` ends the process
    once it is done (`_leave`) instead of returning.
    """
    stream = out or _output()
    commands = parser(DEFAULT_DEMO, DEMO_PACKAGE)
    args = commands.parse_args(argv)
    if args.command == "resume" and (args.approve or args.reject) and args.by is None:
        commands.error("resume: --by is required with --approve or --reject (who decides)")
    if args.command == "export" and args.json and args.output is None:
        commands.error("export: --json needs -o FILE (without it the facts are the output)")
    try:
        with engine_warnings(sys.stderr):
            status = _main(_command(args.command), args, stream)
    finally:
        close_stores()
        forget_signing_key()
    if leave and args.command in _READS:
        _leave(status, stream)
    return status


def console() -> NoReturn:
    """The `converge` console script (and `python -m converge.cli`)."""
    raise SystemExit(main(leave=True))


def _leave(status: int, stream: TextIO) -> NoReturn:
    """End the process with `status` now, its output written and its stores closed.

    What is left is the interpreter's finalisation: freeing every module, model and schema
    converge imported, which adds 40 to 50 ms to a command that takes 0.25 s (`converge runs`
    on the project's machine: 0.26 s to exit normally, 0.21 s this way). A read command
    holds nothing that finalisation would complete: its stores were opened read-only and
    are closed, it starts no thread, process or pool, and imports no formation.
    """
    for written in (stream, sys.stdout, sys.stderr):
        try:
            if written is not None:
                written.flush()
        except (OSError, ValueError):  # a reader gone away, a stream closed: nothing to keep
            pass
    os._exit(status)


def _main(command: Command, args: argparse.Namespace, stream: TextIO) -> int:
    try:
        take_signing_key(args.key_file)  # before any formation is imported: see _cli_records
        _check_store(args.store)
        if args.command in _BY_HAND and on_sqlite(args.store):
            status = drive(lambda: command(args, stream))
        else:
            status = anyio.run(command, args, stream)
        _flush(stream)  # a reader gone away shows here, not when the interpreter exits
        return status
    except BrokenPipeError:  # the reader went away (`converge runs | head -1`)
        _discard_output()
        return BROKEN_PIPE
    except KeyboardInterrupt as error:
        if args.debug:
            traceback.print_exc()
        stopped = stopped_by(error)
        said = "" if stopped is None else f": {_stopped_text(error, stopped, args.store)}"
        print(f"interrupted{said}", file=sys.stderr)
        return INTERRUPTED
    except UsageError as error:
        return _fail(error_text(error), error.hint, args.debug)
    except RunNotFoundError as error:
        return _fail(error_text(error), "`converge runs` lists the stored runs", args.debug)
    except StaleRecordError as error:  # taken over while it ran: someone else has the run
        return _fail(error_text(error), None, args.debug, STALE)
    except ConvergeError as error:
        stopped = stopped_by(error)
        if stopped is not None:  # a suggestor's `SystemExit`
            return _fail(_stopped_text(error, stopped, args.store), None, args.debug)
        return _fail(f"{type(error).__name__}: {error_text(error)}", None, args.debug)
    except Exception as error:
        return _fail(
            f"{type(error).__name__}: {error_text(error)}",
            "rerun with --debug for a traceback",
            args.debug,
        )
    except BaseException as error:  # `SystemExit`, `GeneratorExit` or another, never a status
        stopped = stopped_by(error)
        if stopped is not None:
            return _fail(_stopped_text(error, stopped, args.store), None, args.debug)
        return _fail(
            f"{type(error).__name__}: {error_text(error)}",
            "rerun with --debug for a traceback",
            args.debug,
        )


def _check_store(option: str | None) -> None:
    """Refuse a store that names a directory, before any command opens or lists it."""
    target = given_store(option)
    if on_sqlite(option) and Path(target).is_dir():
        raise UsageError(
            f"--store {target} is a directory, not a store",
            f"name a SQLite file (such as {Path(target) / 'runs.db'}) or a PostgreSQL URL",
        )


def _stopped_text(error: BaseException, stopped: Stopped, store: str | None) -> str:
    """One line (made visible): what a suggestor raised, where, and what became of the run."""
    raised = (
        f"SystemExit({error.code!r})"
        if isinstance(error, SuggestorExitError)
        else describe_error(error).strip().splitlines()[0]
    )
    if stopped.saved is None:
        kept = "nothing was saved (--durability exit)"
    elif stopped.saved:
        kept = (
            f"it was saved as interrupted; `{program()} resume {stopped.run_id}"
            f"{store_argument(store)}` continues it"
        )
    else:
        kept = "saving it as interrupted failed (see the warning above)"
    return visible(
        f"suggestor {stopped.suggestor!r} raised {raised} in {stopped.phase}(), cycle "
        f"{stopped.cycle} of run {stopped.run_id}, which stopped there; {kept}"
    )


def _output() -> TextIO:
    """Standard output; when unbuffered (`python -u`), a buffered writer on its descriptor.

    Unbuffered standard output drops what a write to a pipe could not take when the reader
    goes away, instead of raising `BrokenPipeError`; a buffered writer raises it.
    """
    stdout = sys.stdout
    if not isinstance(getattr(stdout, "buffer", None), io.RawIOBase):
        return stdout
    stdout.flush()
    raw = io.FileIO(stdout.fileno(), "w", closefd=False)
    return io.TextIOWrapper(
        io.BufferedWriter(raw),
        encoding=stdout.encoding,
        errors=stdout.errors,
        line_buffering=True,
    )


def _flush(stream: TextIO) -> None:
    """Write out what `stream` and standard output still buffer."""
    stream.flush()
    if sys.stdout is not None and sys.stdout is not stream:
        sys.stdout.flush()


def _discard_output() -> None:
    """Send standard output to the null device: what it still buffers goes nowhere, quietly.

    Python flushes standard output once more as it exits; into the closed pipe, that flush
    would print `Exception ignored ... BrokenPipeError` and change the exit status.
    """
    if sys.stdout is None:
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, sys.stdout.fileno())
    finally:
        os.close(null)


def _fail(message: str, hint: str | None, debug: bool, status: int = 1) -> int:
    """Report an error: one line (`message` is already visible), and a hint line."""
    if debug:
        traceback.print_exc()
    print(f"error: {message}", file=sys.stderr)
    if hint:
        print(f"hint: {visible(hint)}", file=sys.stderr)
    return status


_COMMANDS: Final[dict[str, tuple[str, str]]] = {
    "run": ("_run", "cmd_run"),
    "demo": ("_run", "cmd_demo"),
    "resume": ("_run", "cmd_resume"),
    "runs": ("_runs", "cmd_runs"),
    "show": ("_show", "cmd_show"),
    "review": ("_review", "cmd_review"),
    "verify": ("_verify", "cmd_verify"),
    "replay": ("_fork", "cmd_replay_or_live"),
    "fork": ("_fork", "cmd_fork"),
    "diff": ("_fork", "cmd_diff"),
    "report": ("_report", "cmd_report"),
    "prune": ("_retain", "cmd_prune"),
    "export": ("_export", "cmd_export"),
    "batch": ("_batch", "cmd_batch"),
    "ui": ("_ui", "cmd_ui"),
}
"""Each command's module and function, imported only when it runs: a command that reads a
store imports no engine, formation, report or other command (a tenth of `converge runs`)."""


def _command(name: str) -> Command:
    """The function of command `name`."""
    module, function = _COMMANDS[name]
    found: Command = getattr(importlib.import_module(f"{__package__}.{module}"), function)
    return found
