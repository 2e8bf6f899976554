"""The `converge` command (console script `converge`; `python -m converge.cli`).

The commands live in `converge._cli`; `docs/cli.md` describes them, their JSON output and
their exit statuses.
"""

from __future__ import annotations

from ._cli._main import console, main

__all__ = ["console", "main"]

if __name__ == "__main__":
    console()
