"""Calling the `converge` command in tests: in-process, and reading the run id it printed."""

from __future__ import annotations

import io
import os

from converge._review import KEY_FILE_VARIABLE, KEY_VARIABLE
from converge.cli import main

__all__ = ["cli", "run_id_of"]


def cli(*args: str) -> tuple[int, str]:
    """Run `converge ARGS` in this process; its exit status and what it wrote to stdout.

    Each call starts with the environment the test set, as a new process would: the
    command drops the signing key's variables from `os.environ`, and they are put back.
    """
    kept = {
        name: os.environ[name] for name in (KEY_VARIABLE, KEY_FILE_VARIABLE) if name in os.environ
    }
    out = io.StringIO()
    try:
        code = main(list(args), out=out)
    finally:
        os.environ.update(kept)
    return code, out.getvalue()


def run_id_of(output: str) -> str:
    """The run id of the `saved run` line of a run's output."""
    for line in output.splitlines():
        if line.startswith("saved run"):
            return line.split()[2]
    raise AssertionError(f"no run id in {output!r}")
