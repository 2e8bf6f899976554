"""`converge ui`: serve the review console beside a store (the `ui` extra).

By default one reviewer, the user who started it, with a new random token in the printed
URL; `--users FILE` admits the reviewers listed there instead, and `--users FILE --add NAME`
adds one (printing the new token once; the file keeps only its digest).
"""

from __future__ import annotations

import argparse
import getpass
import ipaddress
import sys
from pathlib import Path
from typing import TextIO

from ._cli_store import open_store, store_argument
from ._cli_support import CliError, visible

__all__ = ["cmd_ui"]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def cmd_ui(args: argparse.Namespace, out: TextIO) -> int:
    """Serve the console until interrupted; or, with `--add`, add a reviewer and exit."""
    try:
        from .ui import ConsoleSettings, Reviewers, serve
    except ImportError as error:
        raise CliError(
            f"the review console needs the 'ui' extra ({error.name} is missing)",
            "pip install 'converge-engine[ui]'",
        ) from None
    if args.add is not None:
        if args.users is None:
            raise CliError("--add needs --users FILE: the file the reviewer is added to")
        try:
            token = Reviewers.add(Path(args.users), args.add)
        except ValueError as error:
            raise CliError(str(error)) from None
        out.write(
            f"added reviewer {visible(args.add)} to {visible(args.users)}\n"
            f"token (shown once; the file keeps only its digest): {token}\n"
        )
        return 0
    if args.users is not None:
        try:
            reviewers = Reviewers.load(Path(args.users))
        except ValueError as error:
            raise CliError(str(error)) from None
        token = None
    else:
        reviewers, token = Reviewers.single(args.reviewer or getpass.getuser())
    store, label = open_store(args.store)
    settings = ConsoleSettings(
        store=store,
        reviewers=reviewers,
        formation=args.formation,
        store_argument=store_argument(args.store),
        poll_seconds=args.poll,
    )

    def ready(url: str) -> None:
        names = ", ".join(reviewer.name for reviewer in reviewers.all())
        out.write(f"converge ui: serving {visible(label)} to {visible(names)}\n")
        if token is not None:
            out.write(f"open {url}/?token={token}\n")
        else:
            out.write(f"open {url}/?token=YOUR_TOKEN (each reviewer's own, from --add)\n")
        if not _loopback(args.host):
            print(
                f"warning: serving on {visible(args.host)} over plain HTTP: tokens and "
                "decisions cross the network unencrypted; put the console behind TLS",
                file=sys.stderr,
            )
        out.write("stop with Ctrl-C\n")
        out.flush()

    try:
        await serve(settings, host=args.host, port=args.port, ready=ready)
    except OSError as error:
        raise CliError(f"cannot serve on {args.host}:{args.port}: {error.strerror}") from None
    return 0
