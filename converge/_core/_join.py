"""`ready`: the join condition of a suggestor, said as what it needs and what it makes.

Most `accepts` methods of a multi-agent formation say one thing: "every fact I need is there
and what I make is not yet". `ready(ctx, needs=..., makes=...)` says it without counting;
`key / id` (a `ContextKey` or a `Key` divided by an id) writes the `"key/id"` references.
"""

from __future__ import annotations

from collections.abc import Iterable

from ._context import Context
from ._key import key_named

__all__ = ["missing", "ready"]


def _split(ref: str) -> tuple[str, str]:
    key, slash, ident = ref.partition("/")
    if not slash or not key or not ident:
        raise ValueError(f"a fact reference is 'key/id', got {ref!r}")
    return key, ident


def missing(ctx: Context, refs: Iterable[str], /) -> tuple[str, ...]:
    """The `"key/id"` references in `refs` that are not facts of `ctx`, in order.

    Raises:
        ValueError: A reference is not `key/id`, or names a key no one declared.
    """
    absent: list[str] = []
    for ref in refs:
        key, ident = _split(ref)
        if ctx.find(key_named(key), ident) is None:
            absent.append(ref)
    return tuple(absent)


def ready(ctx: Context, /, *, needs: Iterable[str], makes: str | Iterable[str]) -> bool:
    """Whether every fact `needs` names is in `ctx` and some fact `makes` names is not.

    `needs` and `makes` are `"key/id"` references (`EVALUATIONS / f"price:{vendor}"`). An
    empty `needs` is always met; `makes` (one reference or several) must name at least one.

    Raises:
        ValueError: A reference is malformed or names an unknown key; `makes` is empty.
    """
    made = (makes,) if isinstance(makes, str) else tuple(makes)
    if not made:
        raise ValueError("ready(..., makes=...) must name the fact(s) the suggestor makes")
    return bool(missing(ctx, made)) and not missing(ctx, needs)
