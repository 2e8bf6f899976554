"""What keeps the engine's secrets from its workers: a scrubbed environment, a guarded engine.

A worker's environment holds only `PATH`, the locale, `TZ`, `TMPDIR`, `HOME` (`SYSTEMROOT`
on Windows) and the `PYTHONPATH` that finds converge: never a key, a token, a password or a
store's address. The engine process is marked non-dumpable (Linux), so that a worker may
read neither its memory nor the environment it started with.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from pathlib import Path

__all__ = ["guard_engine", "scrubbed_environment"]

_KEPT_VARIABLES = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "HOME", "SYSTEMROOT")
"""The only variables of the engine's environment a worker sees (never a key, a token, a
password or a store's address)."""

_PR_SET_DUMPABLE = 4
_GUARDED: list[bool] = []


def guard_engine() -> None:
    """Mark this process non-dumpable (Linux), once: a process of the same user may then
    read neither its memory (`/proc/<pid>/mem`) nor the environment it started with
    (`/proc/<pid>/environ`) without `CAP_SYS_PTRACE`, which workers give up. It also
    turns off this process's core dumps."""
    if _GUARDED:
        return
    _GUARDED.append(True)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux
        pass


def scrubbed_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """What a worker's environment holds: `_KEPT_VARIABLES` from `environ`, and the
    `PYTHONPATH` of the directory this converge is imported from."""
    kept = {name: environ[name] for name in _KEPT_VARIABLES if name in environ}
    kept["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    return kept
