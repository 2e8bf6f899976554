"""Admission: a proposal as validation left it, or validated again; and the stand-in that
records one that does not validate.

The gate trusts nothing it receives. `admit` takes a proposal as validation left it
(its fields in a plain `dict`, every field of its declared type, the confidence in [0, 1],
the payload frozen, the id in NFC) and validates anything else again:
`model_copy(update=...)`, `model_construct` and pydantic's base-class routes skip
validation, and what they build fails these checks. What validates is decided as the
validated copy; what does not is refused with the field named, and recorded through its
`stand_in`.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any, Final, cast

from pydantic import ValidationError

from .._core._canonical import FrozenDict, FrozenList, check_text, freeze_json, payload_json
from .._core._key import AnyKey, ContextKey, Key, key_named
from .._core._proposal import ProposedFact
from .._core._text import storable

__all__ = [
    "admit",
    "check_hashable",
    "intact",
    "stand_in",
    "storable_inputs",
    "unhashable",
    "validated_copy",
]

_FIELDS: Final = frozenset(ProposedFact.model_fields)


def intact(fields: Mapping[str, Any]) -> bool:
    """Whether a proposal's fields (its `__dict__`) are as validation leaves them, for the
    gate to read without validating them again (its fast path)."""
    # A `__dict__` replaced by a `dict` subclass could answer each of the gate's reads
    # differently (a valid id to the checks, another to the seal): validated again, once.
    container = type(fields)  # through a name: pyright would narrow `fields` to unknown values
    if container is not dict:
        return False
    try:
        key = fields["key"]
        ident = fields["id"]
        confidence = fields["confidence"]
        target = fields["target"]
        evidence: tuple[object, ...] = fields["evidence"]  # its type checked below
        payload: object = fields["payload"]
        kind = type(payload)
        return (
            (type(key) is ContextKey or type(key) is Key)
            and type(ident) is str
            and type(fields["content"]) is str
            and type(fields["provenance"]) is str
            and type(confidence) is float
            and 0.0 <= confidence <= 1.0
            and (target is None or type(target) is ContextKey or type(target) is Key)
            and type(evidence) is tuple
            and (not evidence or all(type(ref) is str for ref in evidence))
            and (
                payload is None
                or kind is FrozenDict
                or kind is FrozenList
                or kind is str
                or kind is int
                or kind is bool
                or (kind is float and math.isfinite(cast("float", payload)))
            )
            and (ident.isascii() or unicodedata.is_normalized("NFC", ident))
        )
    except KeyError:
        return False


def unhashable(error: ValueError, proposal: ProposedFact | None = None) -> str:
    """The reason for a proposal that cannot be hashed as canonical JSON: the field that
    cannot be UTF-8 is named when `proposal` is given (`error` may come from its JSON)."""
    if proposal is not None:
        try:
            check_hashable(proposal)
        except ValueError as named:
            error = named
    return f"cannot be hashed as canonical JSON ({type(error).__name__}: {error})"


def _describe(error: ValidationError) -> str:
    parts: list[str] = []
    for detail in error.errors(include_url=False):
        where = "".join(
            f"[{part}]" if isinstance(part, int) else f".{part}" for part in detail["loc"]
        ).lstrip(".")
        shown = _shown(detail.get("input"))
        parts.append(f"{where or 'proposal'}: {detail['msg']} (got {shown})")
    return "; ".join(parts)


def _shown(value: object, limit: int = 60) -> str:
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__: say what it is instead
        text = f"a {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def admit(proposal: object) -> ProposedFact | str:
    """`proposal` as validation left it, or validated again; or why it does not validate."""
    if type(proposal) is ProposedFact and intact(proposal.__dict__):
        return proposal
    return validated_copy(proposal)


def validated_copy(proposal: object) -> ProposedFact | str:
    """`admit`'s slow path: a copy of `proposal` validated, or why it does not validate."""
    if not isinstance(proposal, ProposedFact):
        return f"invalid proposal: not a ProposedFact but a {type(proposal).__name__}"
    fields = {name: value for name, value in proposal.__dict__.items() if name in _FIELDS}
    payload = fields.get("payload")
    if payload is not None:
        try:
            fields["payload"] = freeze_json(payload)
        except ValueError as error:
            return unhashable(error)
    try:
        return ProposedFact.model_validate(fields)
    except ValidationError as error:
        return f"invalid proposal: {_describe(error)}"


def _text(value: object, default: str) -> str:
    if isinstance(value, str):
        return storable(value)
    return default if value is None else _shown(value, 256)


def _key(value: object) -> AnyKey | None:
    try:
        return key_named(str.__str__(value)) if isinstance(value, str) else None
    except ValueError:
        return None


def _unit(value: object) -> float:
    if type(value) is int or type(value) is float:
        number = float(cast("float", value))
        if 0.0 <= number <= 1.0:
            return number
    return 0.0


def stand_in(proposal: object) -> ProposedFact:
    """A valid proposal that records one that is not, for its `Rejection`.

    The fields that validate are kept (text made storable: see `_text.storable`); the others
    become placeholders: key `DIAGNOSTIC`, id and text the value's `repr`, no payload,
    confidence 0.
    """
    raw = getattr(proposal, "__dict__", None)
    fields: dict[str, object] = raw if isinstance(raw, dict) else {}  # pyright: ignore[reportUnknownVariableType]
    try:
        payload = freeze_json(fields.get("payload"))
    except ValueError:
        payload = None
    confidence = fields.get("confidence")
    evidence = fields.get("evidence")
    try:
        return ProposedFact.model_validate(
            {
                "key": _key(fields.get("key")) or ContextKey.DIAGNOSTIC,
                "id": _text(fields.get("id"), "invalid"),
                "content": _text(fields.get("content"), "") if fields else _shown(proposal),
                "provenance": _text(fields.get("provenance"), ""),
                "payload": payload,
                "confidence": _unit(confidence),
                "target": _key(fields.get("target")),
                "evidence": (
                    tuple(_text(ref, "") for ref in cast("Sequence[object]", evidence))
                    if isinstance(evidence, tuple | list)
                    else ()
                ),
            }
        )
    except Exception:  # nothing of it validates: a bare placeholder
        return ProposedFact(key=ContextKey.DIAGNOSTIC, id="invalid", content="", provenance="")


def storable_inputs(inputs: tuple[ProposedFact, ...]) -> tuple[ProposedFact, ...]:
    """The inputs a run's record keeps once the input gate has merged them: each as
    validation leaves it; one that does not validate or cannot be hashed (a copy that skipped
    validation, holding a lone surrogate) is left out, its rejection (with its stand-in) being
    what the record keeps of it. `inputs` itself when all of them are kept as they are."""
    kept: list[ProposedFact] = []
    for proposal in inputs:
        admitted = admit(proposal)
        if isinstance(admitted, str):
            continue
        try:
            check_hashable(admitted)
        except ValueError:
            continue
        kept.append(admitted)
    if len(kept) == len(inputs) and all(a is b for a, b in zip(kept, inputs, strict=True)):
        return inputs
    return tuple(kept)


def check_hashable(proposal: ProposedFact) -> None:
    """Raise `ValueError` if a field cannot be hashed (a copy that skipped validation)."""
    check_text(proposal.id, "id")
    check_text(proposal.content, "content")
    check_text(proposal.provenance, "provenance")
    for index, ref in enumerate(proposal.evidence):
        check_text(ref, f"evidence[{index}]")
    if proposal.payload is not None:  # its text too: a bare string is not checked when frozen
        check_text(payload_json(proposal.payload), "payload")
