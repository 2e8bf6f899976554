"""An isolated suggestor's spec as it travels to a worker: its number and its arguments.

Each isolated suggestor gets a number unique in this process, under which a worker builds
its suggestor once; its arguments travel as JSON, checked one by one, so that one that does
not serialise is named.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from itertools import count

from pydantic import JsonValue

from .._core._exceptions import ConfigurationError

__all__ = ["arguments_json", "spec_id"]

_SPEC_IDS = count(1)


def arguments_json(locator: str, arguments: Mapping[str, object]) -> dict[str, JsonValue]:
    """`arguments` as they travel to the worker: JSON, checked one by one.

    Raises:
        ConfigurationError: An argument does not serialise as JSON; the message names it.
    """
    for name, value in arguments.items():
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise ConfigurationError(
                f"isolated {locator!r}: argument {name!r} cannot be sent to a worker as JSON "
                f"({error})"
            ) from None
    return json.loads(json.dumps(dict(arguments)))


def spec_id() -> int:
    """A number for one isolated suggestor, unique in this process."""
    return next(_SPEC_IDS)
