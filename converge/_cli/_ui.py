"""`converge ui`: serve the review console beside a store (the `ui` extra).

By default one reviewer, the user who started it, with a new random token and a one-time
sign-in link, both printed; `--users FILE` admits the reviewers listed there instead (each
signs in with their own token), `--users FILE --add NAME` adds one (printing the new token
once; the file keeps only its digest) and `--users FILE --remove NAME` removes one (a
running console refuses them from their next request).
"""

from __future__ import annotations

import argparse
import getpass
import ipaddress
import sys
from pathlib import Path
from typing import TextIO

from .._core._error import UsageError
from .._core._escape import visible
from .._review import signing_key
from ._store import open_store, store_argument

__all__ = ["cmd_ui"]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _edit_users(args: argparse.Namespace, out: TextIO) -> int:
    """`--add NAME` or `--remove NAME`: change the reviewers file and exit."""
    from ..ui import Reviewers

    option = "--add" if args.add is not None else "--remove"
    if args.users is None:
        raise UsageError(f"{option} needs --users FILE: the file the reviewer is in")
    if args.add is not None and args.remove is not None:
        raise UsageError("--add and --remove cannot be given together")
    path = Path(args.users)
    added: str | None = args.add
    try:
        if added is None:
            removed = str(args.remove)
            Reviewers.remove(path, removed)
            out.write(f"removed reviewer {visible(removed)} from {visible(args.users)}\n")
            return 0
        token = Reviewers.add(path, added)
    except ValueError as error:
        raise UsageError(str(error)) from None
    out.write(
        f"added reviewer {visible(added)} to {visible(args.users)}\n"
        f"token (shown once; the file keeps only its digest): {token}\n"
    )
    return 0


def _trust_note(args: argparse.Namespace) -> str | None:
    """What the console says on standard error about records it cannot authenticate."""
    if signing_key() is not None or args.formation is not None:
        return None
    if args.trust_unsigned:
        return (
            "warning: --trust-unsigned: no signing key is set, and the console imports the "
            "formation an unauthenticated record names: anyone who can write to the store can "
            "run code in this process"
        )
    return (
        "note: no signing key is set: records are not authenticated, and the console imports "
        "no formation a record names (set CONVERGE_SIGNING_KEY, pass --formation, or "
        "--trust-unsigned)"
    )


def _warnings(args: argparse.Namespace) -> list[str]:
    """The lines the console writes on standard error when it starts."""
    said: list[str] = []
    if not _loopback(args.host) and not str(args.origin or "").startswith("https:"):
        said.append(
            f"warning: serving on {visible(args.host)} over plain HTTP: tokens and "
            "decisions cross the network unencrypted; put the console behind TLS"
        )
    note = _trust_note(args)
    if note is not None:
        said.append(note)
    return said


def _sign_in_lines(base: str, token: str | None, link: str | None) -> str:
    """How to sign in: the one-time link and the token, or where each reviewer signs in."""
    if link is None:
        return f"open {base}/ and sign in with your token (each reviewer's own, from --add)\n"
    return (
        f"open {base}/?token={link}  (a sign-in link: it works once)\n"
        f"token for the sign-in form and scripts (Authorization: Bearer): {token}\n"
    )


async def cmd_ui(args: argparse.Namespace, out: TextIO) -> int:
    """Serve the console until interrupted; or, with `--add`/`--remove`, edit the reviewers."""
    try:
        from ..ui import ConsoleSettings, Reviewers, Sessions, serve
        from ..ui._origin import Origin
    except ImportError as error:
        raise UsageError(
            f"the review console needs the 'ui' extra ({error.name} is missing)",
            "pip install 'converge-engine[ui]'",
        ) from None
    if args.add is not None or args.remove is not None:
        return _edit_users(args, out)
    try:
        Origin.parse(args.origin or "http://127.0.0.1")
    except ValueError as error:
        raise UsageError(f"--origin: {error}") from None
    sessions = Sessions()
    token = link = None
    if args.users is not None:
        try:
            reviewers = Reviewers.load(Path(args.users))
        except ValueError as error:
            raise UsageError(str(error)) from None
    else:
        reviewers, token = Reviewers.single(args.reviewer or getpass.getuser())
        link = sessions.link(reviewers.all()[0])
    store, label = open_store(args.store)
    settings = ConsoleSettings(
        store=store,
        reviewers=reviewers,
        formation=args.formation,
        store_argument=store_argument(args.store),
        poll_seconds=args.poll,
        sessions=sessions,
        origin=args.origin,
        trust_unsigned=args.trust_unsigned,
    )

    def ready(url: str) -> None:
        names = ", ".join(reviewer.name for reviewer in reviewers.all())
        out.write(f"converge ui: serving {visible(label)} to {visible(names)}\n")
        out.write(_sign_in_lines(args.origin.rstrip("/") if args.origin else url, token, link))
        for line in _warnings(args):
            print(line, file=sys.stderr)
        out.write("stop with Ctrl-C\n")
        out.flush()

    try:
        await serve(settings, host=args.host, port=args.port, ready=ready)
    except OSError as error:
        raise UsageError(f"cannot serve on {args.host}:{args.port}: {error.strerror}") from None
    return 0
