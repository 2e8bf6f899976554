"""The evidence behind a held proposal, back to the seeds, as a reviewer is shown it.

`evidence_tree` walks a proposal's `evidence` through the facts it cites, each fact's own
evidence below it, to a bounded depth and number of facts. The gate page draws the tree, and
a paused run stored as rows keeps in its head the facts the trees of its pending gates cite
(`cited_facts`), so the page reads those facts, not the run.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, final

from ._checkpoint import FactRecord
from ._hitl import GateRequest

__all__ = ["EVIDENCE_DEPTH", "EVIDENCE_FACTS", "Cited", "cited_facts", "evidence_tree"]

EVIDENCE_DEPTH: Final = 12
"""How deep a tree follows evidence below the proposal."""
EVIDENCE_FACTS: Final = 200
"""How many facts one tree expands at most."""


@final
@dataclass(frozen=True, slots=True)
class Cited:
    """One reference of a tree: the fact it names, and the evidence below it."""

    ref: str
    """The `"key/id"` cited."""
    fact: FactRecord | None
    """The fact, or `None` when it is not a fact of the run."""
    below: tuple[Cited, ...] | None
    """Its own evidence; `None` when not expanded here (shown above, or past the bounds)."""


def evidence_tree(refs: Sequence[str], facts: Mapping[str, FactRecord]) -> tuple[Cited, ...]:
    """The tree below `refs`, looking each reference up in `facts` (by `"key/id"`)."""
    seen: set[str] = set()

    def walk(refs: Sequence[str], depth: int) -> tuple[Cited, ...]:
        nodes: list[Cited] = []
        for ref in refs:
            fact = facts.get(ref)
            if (
                fact is None
                or ref in seen
                or depth >= EVIDENCE_DEPTH
                or len(seen) >= EVIDENCE_FACTS
            ):
                nodes.append(Cited(ref, fact, None))
                continue
            seen.add(ref)
            nodes.append(Cited(ref, fact, walk(fact.evidence, depth + 1)))
        return tuple(nodes)

    return walk(refs, 0)


def _facts(nodes: Sequence[Cited]) -> Iterator[FactRecord]:
    for node in nodes:
        if node.fact is not None:
            yield node.fact
        if node.below:
            yield from _facts(node.below)


def cited_facts(
    pending: Sequence[GateRequest], facts: Sequence[FactRecord]
) -> tuple[FactRecord, ...]:
    """Every fact the evidence trees of `pending` look up, once each, in `facts`' order."""
    if not pending:
        return ()
    by_ref = {f"{fact.key.value}/{fact.id}": fact for fact in facts}
    wanted: set[str] = set()
    for gate in pending:
        for fact in _facts(evidence_tree(gate.proposal.evidence, by_ref)):
            wanted.add(f"{fact.key.value}/{fact.id}")
    return tuple(fact for fact in facts if f"{fact.key.value}/{fact.id}" in wanted)
