"""The types of the command's option values: counts, seconds, ports, ages, times, statuses;
and the actions of `fork`'s `--input` and `--payload`.

Each is an argparse `type`: it turns the option's text into its value, or raises
`argparse.ArgumentTypeError` with a message naming what it wanted and what it got, so a bad
value is a usage error (status 2), never an overflow or a traceback where the value is used.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Final

from .._core._stop import RunStatus, StopReason

__all__ = [
    "MAX_COUNT",
    "InputAction",
    "PayloadAction",
    "age",
    "at_least_one",
    "cycle",
    "moment",
    "offset",
    "port",
    "seconds",
    "status_or_reason",
]


MAX_COUNT: Final = 1_000_000_000
"""The largest count an option takes (cycles, runs listed, workers): more is a usage error,
not an overflow where the number meets a store or a cluster."""


def at_least_one(value: str) -> int:
    """A whole number from 1 to `MAX_COUNT` (an argparse type: anything else is a usage
    error)."""
    shown = value if len(value) <= 40 else f"{value[:40]}..."
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {shown!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {shown.strip()}")
    if number > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_COUNT:_}, got {shown.strip()}")
    return number


def seconds(value: str) -> float:
    """A positive, finite number of seconds (an argparse type)."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {value!r}") from None
    if not (math.isfinite(number) and number > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {value!r}")
    return number


def port(value: str) -> int:
    """A TCP port, 0 to 65535; 0 lets the system choose (an argparse type)."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a port number, got {value!r}") from None
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"must be from 0 to 65535, got {number}")
    return number


_AGE: Final = re.compile(r"(\d{1,9})([smhdw])")
_UNIT: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def age(value: str) -> timedelta:
    """An age such as `30d`, `12h`, `90m`, `45s` or `2w` (an argparse type)."""
    found = _AGE.fullmatch(value.strip())
    if found is None:
        shown = value if len(value) <= 40 else f"{value[:40]}..."
        raise argparse.ArgumentTypeError(
            f"must be a number and a unit (s, m, h, d or w), e.g. 30d; got {shown!r}"
        )
    return timedelta(seconds=int(found[1]) * _UNIT[found[2]])


def moment(value: str) -> datetime:
    """An ISO 8601 time (UTC unless it names its zone) or an age before now (an argparse
    type)."""
    if _AGE.fullmatch(value.strip()):
        return datetime.now(UTC) - age(value)
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError:
        shown = value if len(value) <= 40 else f"{value[:40]}..."
        raise argparse.ArgumentTypeError(
            f"must be an ISO 8601 time (2026-01-31T12:00) or an age (7d); got {shown!r}"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def status_or_reason(value: str) -> RunStatus | StopReason:
    """A run status or a stop reason, by its value (an argparse type)."""
    for kind in (RunStatus, StopReason):
        try:
            return kind(value)
        except ValueError:
            continue
    known = ", ".join([*(s.value for s in RunStatus), *(r.value for r in StopReason)])
    shown = value if len(value) <= 40 else f"{value[:40]}..."
    raise argparse.ArgumentTypeError(f"must be one of {known}; got {shown!r}")


def _whole(value: str, what: str) -> int:
    """`value` as a whole number from 0 to `MAX_COUNT`, or an argparse error naming `what`."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {value[:40]!r}") from None
    if not 0 <= number <= MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be from 0 to {MAX_COUNT:_}, got {number}")
    return number


def offset(value: str) -> int:
    """How many to skip, 0 or more (an argparse type)."""
    return _whole(value, "a whole number")


def cycle(value: str) -> int:
    """A cycle number, 0 or more (an argparse type)."""
    return _whole(value, "a cycle number")


class InputAction(argparse.Action):
    """`--input KEY ID CONTENT`: one more input, as a dict (`--payload` may follow)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[object] | None,
        option_string: str | None = None,
    ) -> None:
        assert isinstance(values, list)
        key, ident, content = (str(value) for value in values)
        given: list[dict[str, object]] = list(getattr(namespace, self.dest, None) or [])
        given.append({"key": key, "id": ident, "content": content, "provenance": "fork"})
        setattr(namespace, self.dest, given)


class PayloadAction(argparse.Action):
    """`--payload JSON`: the payload of the `--input` just before it."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[object] | None,
        option_string: str | None = None,
    ) -> None:
        given: list[dict[str, object]] = list(getattr(namespace, "input", None) or [])
        if not given:
            parser.error("--payload: it belongs to the --input before it, and there is none")
        last = given[-1]
        if "payload" in last:
            parser.error(f"--payload: --input {last['key']} {last['id']} has one already")
        try:
            last["payload"] = json.loads(str(values))
        except ValueError as error:
            parser.error(f"--payload for --input {last['key']} {last['id']}: not JSON: {error}")
        namespace.input = given
