"""What a rejection keeps of a refused proposal: `recordable`.

A rejection is stored with the run, in its record and its journal, and a record repeats it
(the run's rejections, and the cycle's); what the gate refused for its size must not be
stored whole each time. A rejection keeps its proposal validated (a stand-in for one that is
not) and no field past the policy's limits.
"""

from __future__ import annotations

from typing import Final

from pydantic import JsonValue

from .._core._canonical import payload_json
from .._core._proposal import ProposedFact
from .._core._text import storable, utf8_size
from ._admit import admit, check_hashable, stand_in
from ._gate import PromotionPolicy

__all__ = ["PREVIEW", "recordable"]

PREVIEW: Final = 1024
"""The characters a rejection keeps of a field over the gate's limits."""


def recordable(proposal: object, policy: PromotionPolicy) -> ProposedFact:
    """`proposal` as a rejection keeps it: validated (else its `stand_in`), and no field past
    `policy`'s limits, so what the gate refused for its size is not stored whole.

    An oversized content, provenance or id keeps its first `PREVIEW` characters and ends with
    `… [N characters, truncated]`; an oversized payload becomes the same preview of its
    canonical JSON, as text.
    """
    admitted = admit(proposal)
    if isinstance(admitted, str):
        admitted = stand_in(proposal)
    else:
        try:
            check_hashable(admitted)
        except ValueError:
            admitted = stand_in(admitted)
    own = admitted.__dict__
    content: str = own["content"]
    provenance: str = own["provenance"]
    ident: str = own["id"]
    payload: JsonValue | None = own["payload"]
    changes: dict[str, object] = {}
    if len(content) > PREVIEW and utf8_size(content) > policy.max_content_bytes:
        changes["content"] = storable(content, limit=PREVIEW)
    if len(provenance) > max(PREVIEW, policy.max_provenance_length):
        changes["provenance"] = storable(provenance, limit=PREVIEW)
    if len(ident) > max(PREVIEW, policy.max_id_length):
        changes["id"] = storable(ident, limit=PREVIEW)
    if payload is not None:
        text = payload_json(payload)
        if len(text) > PREVIEW and utf8_size(text) > policy.max_payload_bytes:
            changes["payload"] = storable(text, limit=PREVIEW)
    if not changes:
        return admitted
    return admitted.model_copy(update=changes)
