"""Calling the `converge` command in tests: in-process, and reading the run id it printed."""

from __future__ import annotations

import io

from converge.cli import main

__all__ = ["cli", "run_id_of"]


def cli(*args: str) -> tuple[int, str]:
    """Run `converge ARGS` in this process; its exit status and what it wrote to stdout."""
    out = io.StringIO()
    code = main(list(args), out=out)
    return code, out.getvalue()


def run_id_of(output: str) -> str:
    """The run id of the `saved run` line of a run's output."""
    for line in output.splitlines():
        if line.startswith("saved run"):
            return line.split()[2]
    raise AssertionError(f"no run id in {output!r}")
