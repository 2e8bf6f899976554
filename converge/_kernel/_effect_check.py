"""What the engine keeps of an effect a suggestor returned: `checked_effect`.

An effect as validation left it passes as it is, its five fields read in one call and
tested in one condition (nearly every effect). One built around validation
(`BaseModel.model_construct`), or with a field changed or missing below the API, is checked
field by field, so nothing of it reaches the trace unvalidated and the refusal names every
field that is wrong. Its proposals are the gate's to check.
"""

from __future__ import annotations

from collections.abc import Mapping
from operator import itemgetter
from typing import Final, cast

from .._core._canonical import FrozenDict, freeze_json
from .._core._effect import MAX_TOKENS, AgentEffect, Refusal, metadata_problem
from .._core._model import trusted
from .._core._text import storable
from ._admit import admit, stand_in

__all__ = ["checked_effect"]

_EFFECT_FIELDS: Final = itemgetter("proposals", "tokens", "tokens_unknown", "refused", "metadata")
"""An effect's fields from its `__dict__`, in one call (`KeyError` when one is left out)."""


def checked_effect(effect: object, name: str) -> AgentEffect | str:
    """`effect` as returned, when it is an `AgentEffect` as validation leaves it; a valid
    copy when only its refusals or metadata need making valid; else what is wrong with it.

    An effect built around validation (`BaseModel.model_construct`) may hold anything.
    Its proposals are the gate's to check (`Gate`); everything else the engine keeps or
    merges is checked here, so nothing of it reaches the trace unvalidated: the proposals a
    tuple, the tokens an `int` in [0, 2**63 - 1] (`tokens_unknown` a `bool`), each refusal
    a `Refusal` with a text reason (a proposal that does not validate becomes its stand-in),
    the metadata a JSON object within `MAX_METADATA_BYTES` (its text made storable).
    """
    if type(effect) is not AgentEffect:
        return f"execute() of {name!r} returned {type(effect).__name__}, expected AgentEffect"
    own: Mapping[str, object] = effect.__dict__
    try:
        proposals, tokens, unknown, refused, metadata = _EFFECT_FIELDS(own)
    except KeyError:  # a field left out (model_construct): `_checked_fields` says which
        pass
    else:
        # what nearly every effect is, as validation leaves it, with no refusal and no
        # metadata: the fields read in one call, tested in one condition
        if (
            type(proposals) is tuple
            and type(tokens) is int
            and 0 <= tokens <= MAX_TOKENS
            and type(unknown) is bool
            and type(refused) is tuple
            and not refused
            and metadata is None
        ):
            return effect
    return _checked_fields(effect, own, name)


def _checked_fields(effect: AgentEffect, own: Mapping[str, object], name: str) -> AgentEffect | str:
    """`checked_effect` off its fast path: each field of `own` (the `__dict__` of `effect`)
    checked on its own, a missing one read as absent, so that the refusal names every field
    that is wrong; when none is, `effect` itself, or a valid copy if its refusals or metadata
    needed making valid or `tokens_unknown` was left out.
    """
    proposals = own.get("proposals")
    tokens = own.get("tokens")
    unknown = own.get("tokens_unknown", False)
    refused = own.get("refused")
    metadata = own.get("metadata")
    problems: list[str] = []
    if type(proposals) is not tuple:
        problems.append(f"proposals: {_kind(proposals)}")
    if type(unknown) is not bool:
        problems.append(f"tokens_unknown: {_kind(unknown)}")
    if type(tokens) is not int:
        problems.append(f"tokens: {_kind(tokens)}")
    elif not 0 <= tokens <= MAX_TOKENS:
        problems.append("tokens: an int outside [0, 2**63 - 1]")
    checked_refused = _refusals(refused, problems)
    checked_metadata = _metadata(metadata, problems)
    if problems:  # an AgentEffect built around validation (model_construct)
        return (
            f"execute() of {name!r} returned an AgentEffect that skipped validation "
            f"({'; '.join(problems)})"
        )
    if checked_refused is refused and checked_metadata is metadata and "tokens_unknown" in own:
        return effect
    return trusted(
        AgentEffect,
        {
            "proposals": proposals,
            "tokens": tokens,
            "tokens_unknown": unknown,
            "refused": checked_refused,
            "metadata": checked_metadata,
        },
    )


def _kind(value: object) -> str:
    return type(value).__name__


def _refusals(refused: object, problems: list[str]) -> object:
    """`refused` if every refusal is valid, or their valid copies; a problem added if not."""
    if not isinstance(refused, tuple):
        problems.append(f"refused: {_kind(refused)}")
        return refused
    items = cast("tuple[object, ...]", refused)
    checked: list[Refusal] = []
    changed = False
    for index, refusal in enumerate(items):
        if type(refusal) is not Refusal:
            problems.append(f"refused[{index}]: {_kind(refusal)}")
            continue
        fields: Mapping[str, object] = refusal.__dict__
        reason = fields.get("reason")
        if not isinstance(reason, str) or not reason:
            problems.append(f"refused[{index}].reason: {_kind(reason)}, not a text")
            continue
        text = storable(reason)
        proposal: object = fields.get("proposal")
        admitted = admit(proposal)
        valid = stand_in(proposal) if isinstance(admitted, str) else admitted
        if text is not reason or valid is not proposal:
            changed = True
            refusal = trusted(Refusal, {"proposal": valid, "reason": text})
        checked.append(refusal)
    return tuple(checked) if changed else items


def _metadata(metadata: object, problems: list[str]) -> object:
    """`metadata` if it is valid, or its valid copy; a problem added if neither."""
    if metadata is None:
        return None
    checked: object = metadata
    try:
        if type(metadata) is not FrozenDict:
            if not isinstance(metadata, dict):
                raise ValueError(f"a {_kind(metadata)}, not a JSON object")
            checked = freeze_json(cast("object", metadata), "metadata", escape=True)
        problem = metadata_problem(cast("FrozenDict", checked))
    except ValueError as error:
        problem = str(error)
    if problem is not None:
        problems.append(f"metadata: {problem}")
    return checked
