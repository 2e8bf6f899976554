"""What every command's parser is built from: `command` adds one, and the options several share.

`command` gives a command its summary (in `converge --help`), its description (filled to
`WIDTH` columns) and the epilog listing the exit statuses it returns, its own and those every
command can return (`exit_statuses`). `json_option` and `FORMATION_HELP` say `--json` and
`--formation` the same way for every command that takes them.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Sequence
from typing import Final, TypeAlias

from ._output import BROKEN_PIPE, INTERRUPTED, UsageParser

__all__ = ["FORMATION_HELP", "WIDTH", "Commands", "command", "exit_statuses", "json_option"]

Commands: TypeAlias = "argparse._SubParsersAction[UsageParser]"  # pyright: ignore[reportPrivateUsage]

FORMATION_HELP = "the formation to load (default: the one the stored run names)"
WIDTH: Final = 78

_ALWAYS: Final = (
    (1, "an error: one line on standard error, often with a hint line"),
    (2, "a usage error (an unknown option, a missing argument, a bad value)"),
    (INTERRUPTED, "interrupted (Ctrl-C, or a suggestor raised KeyboardInterrupt)"),
    (BROKEN_PIPE, "the reader of the output went away (`| head`): nothing more is written"),
)


def _text(*paragraphs: str) -> str:
    return "\n\n".join(textwrap.fill(paragraph, WIDTH) for paragraph in paragraphs)


def exit_statuses(own: Sequence[tuple[int, str]]) -> str:
    """The epilog listing the exit statuses a command returns: its `own`, then the usual."""
    rows = sorted((*own, *_ALWAYS))
    return "exit status:\n" + "\n".join(f"  {code:<5}{meaning}" for code, meaning in rows)


def command(
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
        epilog=exit_statuses(statuses),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=add_help,
    )


def json_option(sub: UsageParser, what: str) -> None:
    sub.add_argument("--json", action="store_true", help=f"print {what} as one JSON document")
