"""The `Suggestor` protocol, `SuggestorId`, and the conformance check run at registration."""

from __future__ import annotations

import inspect
from collections.abc import Collection, Sequence
from typing import Protocol, cast, final, runtime_checkable

from ._context import Context
from ._effect import AgentEffect
from ._exceptions import ConfigurationError
from ._key import AnyKey, KeyLike, key_named

__all__ = ["Suggestor", "SuggestorId", "describe_suggestor", "normalise_keys"]


@runtime_checkable
class Suggestor(Protocol):
    """Proposes facts from a snapshot. Any class with these members qualifies; no base needed.

    A suggestor may also expose `writes: Sequence[KeyLike]`; the engine then rejects its
    proposals to any other key.
    """

    @property
    def name(self) -> str:
        """Unique within an engine; used in logs, traces and provenance."""
        ...

    @property
    def dependencies(self) -> Sequence[KeyLike]:
        """Keys this suggestor reads; a new fact under one makes it a candidate again."""
        ...

    def accepts(self, ctx: Context, /) -> bool:
        """Pure and deterministic: should `execute` run on this snapshot?"""
        ...

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Return the proposals for this snapshot; never mutate anything it can see."""
        ...


@final
class SuggestorId(int):
    """A suggestor's registration number: 0, 1, 2, ... in order. Merge order follows it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"SuggestorId({int(self)})"

    def __str__(self) -> str:
        return int.__repr__(self)


_REQUIRED = ("name", "dependencies", "accepts", "execute")


def normalise_keys(value: object, *, owner: str, member: str) -> tuple[AnyKey, ...]:
    """Turn a sequence of keys (or their names) into a tuple of keys."""
    if isinstance(value, str | bytes) or not isinstance(value, Sequence | set | frozenset):
        raise ConfigurationError(
            f"suggestor {owner!r}: {member} must be a sequence of keys, got {type(value).__name__}"
        )
    keys: list[AnyKey] = []
    for item in cast("Collection[object]", value):
        try:
            if not isinstance(item, str):
                raise ValueError(item)
            keys.append(key_named(item))
        except ValueError:
            raise ConfigurationError(
                f"suggestor {owner!r}: {member} holds {item!r}, which is not a ContextKey, "
                "a declared Key or the name of one"
            ) from None
    return tuple(dict.fromkeys(keys))


def describe_suggestor(
    suggestor: object,
) -> tuple[str, tuple[AnyKey, ...], tuple[AnyKey, ...] | None]:
    """Check that `suggestor` conforms; return its name, dependencies and `writes` (or None).

    Raises:
        ConfigurationError: A member is missing or has the wrong shape; the message names it.
    """
    kind = type(suggestor).__name__
    for member in _REQUIRED:
        if not hasattr(suggestor, member):
            raise ConfigurationError(
                f"{kind} does not satisfy Suggestor: missing member {member!r}"
            )
    name: object = getattr(suggestor, "name")  # noqa: B009
    if not isinstance(name, str) or not name.strip():
        raise ConfigurationError(
            f"{kind} does not satisfy Suggestor: 'name' must be a non-blank str"
        )
    if not callable(getattr(suggestor, "accepts")):  # noqa: B009
        raise ConfigurationError(f"suggestor {name!r}: 'accepts' must be callable")
    execute: object = getattr(suggestor, "execute")  # noqa: B009
    if not inspect.iscoroutinefunction(execute):
        raise ConfigurationError(f"suggestor {name!r}: 'execute' must be an async method")
    declared: object = getattr(suggestor, "dependencies")  # noqa: B009
    dependencies = normalise_keys(declared, owner=name, member="dependencies")
    writes_value: object = getattr(suggestor, "writes", None)
    writes = (
        None if writes_value is None else normalise_keys(writes_value, owner=name, member="writes")
    )
    # the name as a plain str: a subclass's own __eq__ or __hash__ must not reach the records
    return str.__str__(name), dependencies, writes
