"""`converge ui` in its own process for the console tests: start it, read what it printed."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Generator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["Served", "serving", "start_console", "stop_console"]

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Served:
    """A running console: its process, base URL, the link it printed and the reviewer's token."""

    process: subprocess.Popen[str]
    base: str
    link: str
    """The URL the console printed to open (a one-time sign-in link by default)."""
    token: str
    """The default reviewer's token ("" with --users: each reviewer has their own)."""
    printed: str

    @property
    def port(self) -> int:
        port = urlsplit(self.base).port
        assert port is not None
        return port


def start_console(store: str, *extra: str, env: Mapping[str, str] | None = None) -> Served:
    """Start `converge --store STORE ui --port 0 EXTRA...` and read its banner."""
    process = subprocess.Popen(
        [sys.executable, "-m", "converge.cli", "--store", store, "ui", "--port", "0", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests" / "converge")]),
            **(env or {}),
        },
    )
    assert process.stdout is not None
    printed: list[str] = []
    link = token = ""
    for line in process.stdout:
        printed.append(line)
        if line.startswith("open "):
            link = line.split()[1]
        elif line.startswith("token for "):
            token = line.split()[-1]
        elif line.startswith("stop with Ctrl-C"):
            split = urlsplit(link)
            base = f"{split.scheme}://{split.netloc}"
            if not token and "?token=" in link and "--users" not in extra:
                token = link.partition("?token=")[2]  # a console that put the token in the link
            return Served(process, base, link, token, "".join(printed))
    process.kill()
    raise AssertionError(f"converge ui printed no URL: {printed} {process.communicate()}")


def stop_console(served: Served) -> str:
    """Stop the console (SIGTERM); what it wrote on standard error."""
    served.process.terminate()
    _, err = served.process.communicate(timeout=15)
    return err


@contextmanager
def serving(store: str, *extra: str, env: Mapping[str, str] | None = None) -> Generator[Served]:
    """A console for the `with` block."""
    served = start_console(store, *extra, env=env)
    try:
        yield served
    finally:
        if served.process.poll() is None:
            stop_console(served)
