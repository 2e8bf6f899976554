"""HMAC-SHA256 signatures over a model's canonical JSON: checkpoints and run records.

The signature covers every field but `signature` itself. Comparison is constant-time on
bytes, so a signature holding any text (non-ASCII included) is refused, never an error.
"""

from __future__ import annotations

import hmac
from collections.abc import Set
from hashlib import sha256

from pydantic import BaseModel

from ._canonical import canonical_json

__all__ = ["signature_matches", "signature_of"]


def signature_of(model: BaseModel, key: bytes, unsigned: Set[str] = frozenset()) -> str:
    """The hex HMAC-SHA256 of `model`'s canonical JSON, `signature` and `unsigned` left out."""
    body = canonical_json(model.model_dump(mode="json", exclude={"signature", *unsigned}))
    return hmac.new(key, body, sha256).hexdigest()


def signature_matches(
    model: BaseModel, signature: str, key: bytes, unsigned: Set[str] = frozenset()
) -> bool:
    """Whether `signature` is `model`'s signature under `key` (constant time)."""
    expected = signature_of(model, key, unsigned).encode("ascii")
    return hmac.compare_digest(expected, signature.encode("utf-8", "surrogatepass"))
