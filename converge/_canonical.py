"""Canonical JSON and the hashing rules of the integrity proof.

Canonical JSON: keys sorted, no insignificant whitespace, UTF-8, finite numbers only.
Leaf = SHA-256(0x00 || canonical bytes); node = SHA-256(0x01 || left || right); an odd node
is carried up unchanged; one leaf is its own root; no leaves gives SHA-256 of the empty string.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Final

from pydantic import JsonValue

__all__ = ["EMPTY_ROOT", "canonical_json", "copy_json", "leaf_digest", "merkle_root"]

_LEAF: Final = b"\x00"
_NODE: Final = b"\x01"
_encoder: Final = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
)
EMPTY_ROOT: Final[str] = hashlib.sha256(b"").hexdigest()


def canonical_json(value: object) -> bytes:
    """Serialise `value` as canonical JSON bytes."""
    return _encoder.encode(value).encode("utf-8")


def leaf_digest(canonical: bytes) -> bytes:
    """The leaf hash of a canonical record."""
    return hashlib.sha256(_LEAF + canonical).digest()


def merkle_root(leaves: Iterable[bytes]) -> str:
    """The hex Merkle root over leaf digests, in the order given."""
    level: Sequence[bytes] = list(leaves)
    if not level:
        return EMPTY_ROOT
    sha256 = hashlib.sha256
    while len(level) > 1:
        paired = [
            sha256(_NODE + level[index] + level[index + 1]).digest()
            for index in range(0, len(level) - 1, 2)
        ]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0].hex()


def copy_json(value: JsonValue) -> JsonValue:
    """A deep copy of a JSON value, so a promoted fact never shares mutable state."""
    if isinstance(value, dict):
        return {key: copy_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [copy_json(item) for item in value]
    return value
