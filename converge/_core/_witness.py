"""`Witnesses`: the very values each fact of a run held when its seal hashed them, for the
run's end check (`_integrity.changed`).

The end check of a saved run re-derived every fact's leaf from its fields: its canonical
JSON written again and hashed, about a tenth of `converge run`'s instructions at 100,000
facts. A fact whose fields are the very objects its seal hashed (compared by identity, not
by value: `True == 1 == 1.0`, but each is written otherwise) and whose every value is
immutable gives the same text, so the same leaf: comparing them costs a fifth as much.

A witness is taken when the seal hashes the fact (`Stamp.promote`), only of a fact whose
values cannot change in place: a scalar or no payload, evidence an exact tuple of texts and
the confidence an exact float (the key, texts and the promotion record's values are written
by value and immutable). A `FrozenDict` or `FrozenList` payload can be changed in place
below the API, so such a fact has no witness and is checked in full. The journal files each
witness by the fact's place under its key as it writes the fact's entry (`fact_texts`), so
the witnesses follow the context's own order, and a fact without one (restored, or with
an object payload) is checked as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import is_
from typing import Final, TypeAlias, final

from ._key import AnyKey

__all__ = ["WITNESSED_PAYLOADS", "Witness", "Witnesses", "as_sealed"]

Witness: TypeAlias = tuple[object, ...]
"""A fact's field values in its fields' order, as its seal hashed them; the digest last."""

WITNESSED_PAYLOADS: Final = frozenset({type(None), str, int, bool, float})
"""The payload types a witness is taken for: immutable, and written by value."""


@final
class Witnesses:
    """The witnesses of a run's facts, by key: those of each key's facts from the first the
    run's journal wrote on, in the context's order (`None` for a fact without one)."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: dict[AnyKey, tuple[int, list[Witness | None]]] = {}

    def put(self, key: AnyKey, start: int, witnesses: list[Witness | None]) -> None:
        """File `witnesses` for `key`'s facts from index `start` on. A save written again
        (its store refused it) files the same facts again, over their first witnesses; a
        gap starts the key's witnesses anew at `start`."""
        held = self._held.get(key)
        if held is None or not held[0] <= start <= held[0] + len(held[1]):
            self._held[key] = (start, witnesses)
            return
        first, kept = held
        kept[start - first :] = witnesses

    def span(self, key: AnyKey) -> tuple[int, Sequence[Witness | None]]:
        """The index of `key`'s first witnessed fact, and the witnesses from there on."""
        return self._held.get(key, (0, ()))


def as_sealed(fact: object, leaf: bytes, witness: Witness) -> bool:
    """Whether `fact`'s fields are still the very objects of its `witness`, whose digest is
    `leaf`: then they give `leaf`, as when the seal hashed them. False for anything else,
    which the caller checks in full."""
    try:
        own: Mapping[str, object] = fact.__dict__
        return (
            len(own) == len(witness)
            and witness[-1] == leaf
            and all(map(is_, own.values(), witness))
        )
    except Exception:  # not a fact's fields any more
        return False
