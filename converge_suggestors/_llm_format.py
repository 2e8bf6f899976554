"""What `LlmSuggestor` asks a model for, and how it reads the reply.

The reply's JSON schema (sent as `response_format` by providers that support it), the format
prompt that describes it in words, and a tolerant parser that keeps the valid proposals of a
reply and reports each invalid one with the reason.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Final, cast, final

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, create_model

from converge import ProposedFact

__all__ = [
    "ID_PATTERN",
    "MAX_REPLY_DEPTH",
    "InvalidItem",
    "ParsedReply",
    "describe_validation_error",
    "format_prompt",
    "item_model",
    "parse_reply",
    "reply_schema",
]

ID_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"
"""What a proposal id may be: a letter or digit, then up to 63 letters, digits, `_.:-`."""
MAX_REPLY_DEPTH: Final = 64
"""How deeply a reply's JSON may nest: a deeper one is not the JSON asked for (a repair asks
again), and nothing nested deeper reaches a proposal."""
_FENCE: Final = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)
_EXCERPT: Final = 200
_DROPPED_KEYS: Final = frozenset({"title", "default", "examples"})


def _excerpt(text: str) -> str:
    return text if len(text) <= _EXCERPT else text[: _EXCERPT - 1] + "…"


def item_model(payload: type[BaseModel] | None) -> type[BaseModel]:
    """The pydantic model one reply item must validate against."""
    payload_field: object = (payload, ...) if payload is not None else (JsonValue | None, None)
    return create_model(
        "LlmProposal",
        __config__=ConfigDict(extra="ignore"),
        id=(Annotated[str, Field(pattern=ID_PATTERN)], ...),
        content=(Annotated[str, Field(pattern=r"\S")], ...),
        confidence=(Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)], ...),
        payload=payload_field,  # pyright: ignore[reportArgumentType]
    )


def reply_schema(payload: type[BaseModel] | None) -> dict[str, JsonValue]:
    """The JSON schema of a whole reply, closed and with every member required (strict)."""
    properties: dict[str, JsonValue] = {
        "id": {"type": "string", "pattern": ID_PATTERN},
        "content": {"type": "string"},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
    }
    defs: dict[str, JsonValue] = {}
    if payload is not None:
        schema = cast("dict[str, JsonValue]", payload.model_json_schema())
        found = schema.pop("$defs", None)
        defs = cast("dict[str, JsonValue]", found) if isinstance(found, dict) else {}
        properties["payload"] = _inline(schema, defs, ())
    item: dict[str, JsonValue] = {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }
    result: dict[str, JsonValue] = {
        "type": "object",
        "properties": {"proposals": {"type": "array", "items": item}},
        "required": ["proposals"],
        "additionalProperties": False,
    }
    remaining = {name: _strict(value) for name, value in defs.items() if _refers(result, name)}
    if remaining:
        result["$defs"] = remaining
    return cast("dict[str, JsonValue]", _strict(result))


def _inline(node: JsonValue, defs: dict[str, JsonValue], seen: tuple[str, ...]) -> JsonValue:
    """`node` with each `$ref` to `defs` replaced by its target (a recursive one is kept)."""
    if isinstance(node, list):
        return [_inline(value, defs, seen) for value in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref.removeprefix("#/$defs/")
        if name in defs and name not in seen:
            return _inline(copy.deepcopy(defs[name]), defs, (*seen, name))
        return node
    return {key: _inline(value, defs, seen) for key, value in node.items()}


def _refers(node: JsonValue, name: str) -> bool:
    if isinstance(node, list):
        return any(_refers(value, name) for value in node)
    if isinstance(node, dict):
        if node.get("$ref") == f"#/$defs/{name}":
            return True
        return any(_refers(value, name) for value in node.values())
    return False


def _strict(node: JsonValue) -> JsonValue:
    """Every object closed with all its properties required; titles and defaults dropped."""
    if isinstance(node, list):
        return [_strict(value) for value in node]
    if not isinstance(node, dict):
        return node
    result: dict[str, JsonValue] = {
        key: _strict(value) for key, value in node.items() if key not in _DROPPED_KEYS
    }
    properties = result.get("properties")
    if result.get("type") == "object" and isinstance(properties, dict):
        result["required"] = list(properties)
        result["additionalProperties"] = False
    return result


def format_prompt(payload: type[BaseModel] | None) -> str:
    """The default format description: each field in words, no example values to copy."""
    lines = [
        'Reply with one JSON object and nothing else. Its only member is "proposals": a list '
        "of zero or more proposals. Each proposal is an object with these members:",
        '- "id": an identifier you make up from the proposal\'s own words, different for each '
        'proposal: letters, digits and "-" only, no spaces, at most 64 characters;',
        '- "content": the proposal itself, as one complete sentence;',
        '- "confidence": how likely the proposal is to be right, a number from 0 to 1.',
    ]
    if payload is not None:
        schema = cast("dict[str, JsonValue]", payload.model_json_schema())
        found = schema.pop("$defs", None)
        defs = cast("dict[str, JsonValue]", found) if isinstance(found, dict) else {}
        described = _strict(_inline(schema, defs, ()))
        lines[-1] = lines[-1].removesuffix(".") + ";"
        lines.append(
            '- "payload": structured data about the proposal, a JSON value matching this '
            f"JSON schema: {json.dumps(described, separators=(',', ':'))}."
        )
    lines.append('Use an empty list for "proposals" when there is nothing to propose.')
    return "\n".join(lines)


def describe_validation_error(error: ValidationError, prefix: str = "") -> str:
    """The first three problems of `error`, each as `location: message`."""
    parts: list[str] = []
    for detail in error.errors()[:3]:
        where = ".".join(str(part) for part in detail["loc"])
        location = f"{prefix}.{where}" if prefix and where else prefix or where or "reply"
        parts.append(f"{location}: {detail['msg']}")
    more = len(error.errors()) - 3
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)


@final
@dataclass(frozen=True, slots=True)
class InvalidItem:
    """One item of a reply that is not a valid proposal."""

    index: int
    """Its position in the reply's `proposals`."""
    reason: str
    """Why it is invalid."""
    excerpt: str
    """The item as JSON, cut to 200 characters."""


@final
@dataclass(slots=True)
class ParsedReply:
    """The valid proposals of a reply, its invalid items, and why it is unusable, if it is."""

    proposals: list[ProposedFact] = field(default_factory=list[ProposedFact])
    invalid: list[InvalidItem] = field(default_factory=list[InvalidItem])
    problem: str | None = None
    """Set when the reply yields nothing usable: not JSON, the wrong shape, or every item
    invalid. A reply with an empty `proposals` list is usable."""


def parse_reply(
    text: str,
    model: type[BaseModel],
    make: Callable[[BaseModel], ProposedFact],
) -> ParsedReply:
    """Read `text`: each item validated by `model`, then made a proposal by `make`."""
    try:
        items = _items(_extract_json(text))
    except ValueError as error:
        return ParsedReply(problem=f'not the expected JSON {{"proposals": [...]}} ({error})')
    parsed = ParsedReply()
    used: dict[str, str] = {}
    for index, raw in enumerate(items):
        excerpt = _excerpt(json.dumps(raw, ensure_ascii=False, default=str))
        try:
            item = model.model_validate(raw)
            proposal = make(item)
        except ValidationError as error:
            reason = describe_validation_error(error, f"proposals[{index}]")
            parsed.invalid.append(InvalidItem(index, reason, excerpt))
            continue
        earlier = used.get(proposal.id)
        if earlier is not None and earlier != proposal.content:
            reason = f"proposals[{index}].id: {proposal.id!r} is already used in this reply"
            parsed.invalid.append(InvalidItem(index, reason, excerpt))
            continue
        used[proposal.id] = proposal.content
        parsed.proposals.append(proposal)
    if parsed.invalid and not parsed.proposals:
        parsed.problem = "; ".join(item.reason for item in parsed.invalid[:3])
    return parsed


def _extract_json(text: str) -> JsonValue:
    """The JSON in a reply that may wrap it in code fences or prose."""
    candidates = [match.strip() for match in _FENCE.findall(text)]
    candidates.append(text.strip())
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    deep = False
    for candidate in candidates:
        try:
            value = cast("JsonValue", json.loads(candidate))
        except RecursionError:  # nested deeper than the parser goes
            deep = True
            continue
        except ValueError:
            continue
        if _nests_deeper(value, MAX_REPLY_DEPTH):
            deep = True
            continue
        return value
    if deep:
        raise ValueError(f"its JSON nests deeper than {MAX_REPLY_DEPTH} levels")
    raise ValueError("no JSON object found")


def _nests_deeper(value: JsonValue, limit: int) -> bool:
    """Whether objects and arrays in `value` nest deeper than `limit` (without recursing)."""
    stack: list[tuple[JsonValue, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = list(node.values())
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _items(data: JsonValue) -> list[JsonValue]:
    """The proposals of a reply: `{"proposals": [...]}`, or a bare list or proposal."""
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        proposals = data.get("proposals")
        if isinstance(proposals, list):
            return proposals
        if proposals is None and "content" in data:
            return [data]
        if proposals is None:
            raise ValueError('no "proposals" member')
        raise ValueError(f'"proposals" is {type(proposals).__name__}, not a list')
    raise ValueError(f"the JSON is {type(data).__name__}, not an object")
