"""Canonical JSON, the hashing rules of the integrity proof, and frozen JSON payloads.

Canonical JSON: keys sorted, no insignificant whitespace, UTF-8, finite numbers only.
Leaf = SHA-256(0x00 || canonical bytes); node = SHA-256(0x01 || left || right); an odd node
is carried up unchanged; one leaf is its own root; no leaves gives SHA-256 of the empty string.

A payload is frozen once, when a proposal is validated (`freeze_json`): every object becomes a
`FrozenDict` and every array a `FrozenList`, which refuse every mutator. Proposals, held gate
requests, recorded effects and facts then share that one payload, and nothing copies it again.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from itertools import islice
from typing import Any, Final, NoReturn, SupportsIndex, cast, final

from pydantic import JsonValue

from ._text import storable

__all__ = [
    "EMPTY_ROOT",
    "MAX_JSON_DEPTH",
    "MAX_JSON_DIGITS",
    "FrozenDict",
    "FrozenList",
    "canonical_json",
    "check_text",
    "freeze_json",
    "leaf_digest",
    "merkle_root",
    "ordered_json",
    "payload_json",
]

_LEAF: Final = b"\x00"
_NODE: Final = b"\x01"
_encoder: Final = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
)
_ordered: Final = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
EMPTY_ROOT: Final[str] = hashlib.sha256(b"").hexdigest()
MAX_JSON_DEPTH: Final = 128
"""How deeply objects and arrays may nest in a payload (a self-reference never ends)."""
MAX_JSON_DIGITS: Final = 4300
"""The most digits a JSON integer may have: JSON readers (pydantic's, Python's own by
default) refuse longer ones, so a record holding one could never be read back."""
_INT_LIMIT: Final = 10**MAX_JSON_DIGITS


def canonical_json(value: object) -> bytes:
    """Serialise `value` as canonical JSON bytes."""
    return _encoder.encode(value).encode("utf-8")


def ordered_json(value: object) -> str:
    """Serialise `value` as compact JSON with its objects' keys in their order, as a model
    holding it dumps it (canonical JSON sorts them)."""
    return _ordered.encode(value)


def leaf_digest(canonical: bytes) -> bytes:
    """The leaf hash of a canonical record."""
    return hashlib.sha256(_LEAF + canonical).digest()


_BLOCK: Final = 1024
"""Leaves hashed as one complete subtree at a time by `merkle_root` (a power of two)."""


def merkle_root(leaves: Iterable[bytes]) -> str:
    """The hex Merkle root over leaf digests, in the order given.

    The tree: level by level, adjacent nodes are hashed in pairs and an odd last node goes up
    as it is. It is computed as the leaves stream in, `_BLOCK` at a time, so memory stays
    O(block + log n) however large the context: each full block is a complete subtree, the
    roots of the blocks go through a binary counter (one pending subtree per height), and
    what remains is folded from the right, which carries an odd node up exactly as the
    levels do.
    """
    stream = iter(leaves)
    sha256 = hashlib.sha256
    pending: list[bytes | None] = []  # pending[h]: the root of 2**h full blocks, or None
    root: bytes | None = None
    while block := list(islice(stream, _BLOCK)):
        node = _level_root(block)
        if len(block) < _BLOCK:
            root = node  # the last block: the rightmost part of the tree
            break
        height = 0
        while height < len(pending) and (left := pending[height]) is not None:
            node = sha256(_NODE + left + node).digest()
            pending[height] = None
            height += 1
        if height == len(pending):
            pending.append(node)
        else:
            pending[height] = node
    for node in pending:  # smallest subtree first: the right edge of the tree
        if node is not None:
            root = node if root is None else sha256(_NODE + node + root).digest()
    return EMPTY_ROOT if root is None else root.hex()


def _level_root(level: Sequence[bytes]) -> bytes:
    """The root of a non-empty list of nodes, level by level."""
    sha256 = hashlib.sha256
    while len(level) > 1:
        nodes = iter(level)  # zipped with itself: adjacent pairs, an odd last node left out
        pairs = zip(nodes, nodes, strict=False)
        paired = [sha256(_NODE + left + right).digest() for left, right in pairs]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


def check_text(text: str, path: str) -> None:
    """Raise `ValueError` if `text` cannot be UTF-8 (a lone surrogate), which hashing needs."""
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"{path} holds a lone surrogate at position {error.start}; text must be valid UTF-8"
        ) from None


_FROZEN_MESSAGE = (
    "a payload is frozen: it cannot be changed in place. Build a new value instead "
    "(`.copy()` gives a plain, mutable copy of one level)"
)


def _refuse(*_args: object, **_kwargs: object) -> NoReturn:
    raise TypeError(_FROZEN_MESSAGE)


@final
class FrozenDict(dict[str, JsonValue]):
    """A JSON object that refuses every change: equal to a plain `dict`, serialised as one.

    `FrozenDict(mapping)` freezes (and checks) a copy of `mapping`, deeply. `.copy()` gives a
    plain `dict` of the same items, which may be changed.
    """

    __slots__ = ("_json",)

    def __new__(cls, *args: Iterable[Any], **kwargs: object) -> FrozenDict:
        return cast("FrozenDict", freeze_json(dict(*args, **kwargs)))

    def __init__(self, *args: Iterable[Any], **kwargs: object) -> None:
        """Filled by `__new__`; a later call changes nothing."""

    __setitem__ = _refuse
    __delitem__ = _refuse
    __ior__ = _refuse
    __setattr__ = _refuse
    __delattr__ = _refuse
    clear = _refuse
    pop = _refuse
    popitem = _refuse
    setdefault = _refuse
    update = _refuse

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, object] | None = None) -> FrozenDict:
        return self

    def __reduce__(self) -> tuple[type[FrozenDict], tuple[dict[str, JsonValue]]]:
        return (FrozenDict, (dict(self),))


@final
class FrozenList(list[JsonValue]):
    """A JSON array that refuses every change: equal to a plain `list`, serialised as one.

    `FrozenList(iterable)` freezes (and checks) a copy of its items, deeply. `.copy()` gives a
    plain `list` of the same items, which may be changed.
    """

    __slots__ = ("_json",)

    def __new__(cls, iterable: Iterable[object] = (), /) -> FrozenList:
        return cast("FrozenList", freeze_json(list(iterable)))

    def __init__(self, iterable: Iterable[object] = (), /) -> None:
        """Filled by `__new__`; a later call changes nothing."""

    __setitem__ = _refuse
    __delitem__ = _refuse
    __iadd__ = _refuse
    __imul__ = _refuse
    __setattr__ = _refuse
    __delattr__ = _refuse
    append = _refuse
    extend = _refuse
    insert = _refuse
    pop = _refuse
    remove = _refuse
    clear = _refuse
    sort = _refuse
    reverse = _refuse

    def __copy__(self) -> FrozenList:
        return self

    def __deepcopy__(self, memo: dict[int, object] | None = None) -> FrozenList:
        return self

    def __reduce__(self) -> tuple[type[FrozenList], tuple[list[JsonValue]]]:
        return (FrozenList, (list(self),))

    def __mul__(self, count: SupportsIndex, /) -> list[JsonValue]:
        return list(self) * count

    __rmul__ = __mul__


_new_dict = dict.__new__
_new_list = list.__new__
_fill_dict: Final = dict[str, JsonValue].update
_fill_list: Final = list[JsonValue].extend
_DICT_JSON: Final[Any] = FrozenDict.__dict__["_json"]
_LIST_JSON: Final[Any] = FrozenList.__dict__["_json"]


class _NotJson(ValueError):
    """A value that is not JSON: `problem`, at the path built up in `trail` (innermost first)."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.trail: list[str] = []


def _text(value: str, escape: bool) -> str:
    if not value.isascii():
        if escape:
            return storable(value, limit=None)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            raise _NotJson(
                f" holds a lone surrogate at position {error.start}; text must be valid UTF-8"
            ) from None
    elif escape and "\x00" in value:
        return storable(value, limit=None)
    return value


def _integer(value: int) -> int:
    if -_INT_LIMIT < value < _INT_LIMIT:
        return value
    raise _NotJson(
        f" holds an integer of more than {MAX_JSON_DIGITS} digits, which JSON readers refuse"
    )


def _freeze(value: object, depth: int, escape: bool) -> JsonValue:
    kind = type(value)
    if kind is str:
        return _text(cast("str", value), escape)
    if kind is int:
        return _integer(cast("int", value))
    if kind is bool or value is None:
        return cast("bool", value)
    if kind is float:
        if not math.isfinite(cast("float", value)):
            raise _NotJson(f" holds a non-finite number ({value!r}); JSON has none")
        return cast("float", value)
    if kind is FrozenDict or kind is FrozenList:
        return cast("JsonValue", value)
    if isinstance(value, dict):
        return _freeze_object(cast("dict[object, object]", value), depth, escape)
    if isinstance(value, list):
        return _freeze_array(cast("list[object]", value), depth, escape)
    if isinstance(value, str):  # a subclass (an enum, say): its plain text
        return _text(str.__str__(value), escape)
    if isinstance(value, int):
        return _integer(int.__int__(value))
    if isinstance(value, float):
        return _freeze(float.__float__(value), depth, escape)
    raise _NotJson(f" holds a {kind.__name__}, which is not a JSON value")


def _freeze_object(value: dict[object, object], depth: int, escape: bool) -> FrozenDict:
    if depth >= MAX_JSON_DEPTH:
        raise _NotJson(f" nests deeper than {MAX_JSON_DEPTH} levels (or holds itself)")
    items: dict[str, JsonValue] = {}
    for key, item in value.items():
        if type(key) is not str:
            if not isinstance(key, str):
                raise _NotJson(f" has a key of type {type(key).__name__}; JSON keys are text")
            key = str.__str__(key)
        if escape or not key.isascii():
            try:
                stored = _text(key, escape)
            except _NotJson as error:
                error.problem = f" key {key!r}{error.problem}"
                raise
            if stored is not key:
                if stored in value or stored in items:
                    raise _NotJson(f" key {key!r} escaped is {stored!r}, another of its keys")
                key = stored
        try:
            items[key] = _freeze(item, depth + 1, escape)
        except _NotJson as error:
            error.trail.append(f".{key}")
            raise
    frozen = _new_dict(FrozenDict)
    _fill_dict(frozen, items)
    return frozen


def _freeze_array(value: list[object], depth: int, escape: bool) -> FrozenList:
    if depth >= MAX_JSON_DEPTH:
        raise _NotJson(f" nests deeper than {MAX_JSON_DEPTH} levels (or holds itself)")
    items: list[JsonValue] = []
    append = items.append
    for index, item in enumerate(value):
        try:
            append(_freeze(item, depth + 1, escape))
        except _NotJson as error:
            error.trail.append(f"[{index}]")
            raise
    frozen = _new_list(FrozenList)
    _fill_list(frozen, items)
    return frozen


def freeze_json(value: object, path: str = "payload", *, escape: bool = False) -> JsonValue:
    """`value` checked as JSON and frozen, deeply: objects and arrays become read-only.

    Text keeps its characters, numbers their value; a subclass of `str`, `int` or `float` (an
    enum member, say) becomes the plain value. Frozen parts are reused as they are. With
    `escape` (free text, such as a call's metadata), text and keys that cannot be stored are
    escaped and marked (`_text.storable`) instead of refused.

    Raises:
        ValueError: The first part that is not JSON, by its path (`payload.rows[1]`): a
            non-finite number, a lone surrogate (unless `escape`), an integer of more than
            `MAX_JSON_DIGITS` digits, a key that is not text, a value of another type, or
            nesting deeper than `MAX_JSON_DEPTH`.
    """
    try:
        return _freeze(value, 0, escape)
    except _NotJson as error:
        raise ValueError(path + "".join(reversed(error.trail)) + error.problem) from None


def payload_json(payload: JsonValue) -> str:
    """The canonical JSON text of a payload, computed once per frozen object or array.

    For the gate and the seal only: `verify` and the restore recompute it from the values.
    """
    kind = type(payload)
    if kind is FrozenDict:
        slot = _DICT_JSON
    elif kind is FrozenList:
        slot = _LIST_JSON
    else:
        return _encoder.encode(payload)
    try:
        text: str = slot.__get__(payload, kind)
    except AttributeError:
        text = _encoder.encode(payload)
        slot.__set__(payload, text)
    return text
