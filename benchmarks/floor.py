"""The seal floor: what promoting facts costs with nothing of the engine around the seal.

Every promoted fact is sealed (DESIGN §9): its canonical JSON with its promotion record,
SHA-256 of that, a `Fact` and a `PromotionRecord` built, and at the end of the run the Merkle
root over every leaf. `seal_floor` does exactly that for a list of proposals in a bare loop,
with the engine's own seal (`Stamp.promote`, one stamp per suggestor, kept as an engine keeps
them) and the facts kept as the context keeps them (a list, the leaves, an id → position
map), the collector on as in the timed runs. No admission, no gate checks, no identity or
conflict check, no merge bookkeeping, no snapshot, no cycle, no trace.

A workload's figure minus its seal floor is what the rest of the engine costs per fact; a
goal below the floor cannot be met without dropping part of the seal the design requires.
"""

from __future__ import annotations

from collections.abc import Sequence
from time import perf_counter

from converge import Fact, ProposedFact
from converge._canonical import merkle_root
from converge._seal import Stamp

from ._common import prepare

__all__ = ["seal_floor"]


def seal_floor(
    proposals: Sequence[ProposedFact], suggestors: Sequence[str], per_cycle: int
) -> tuple[float, str]:
    """Seconds to seal `proposals`, `per_cycle` per cycle, and the facts' Merkle root.

    The `i`-th proposal is sealed as `suggestors[i]`'s, suggestors numbered in order of
    first appearance (as registered).

    The root is over the leaves in sealing order: for proposals under one key, the root a run
    promoting them in the same order has (the suite's test compares it with W3's), so the
    loop cannot skip work unnoticed.
    """
    if len(proposals) != len(suggestors):
        raise ValueError(f"{len(proposals)} proposals but {len(suggestors)} suggestors")
    ids = {name: index for index, name in enumerate(dict.fromkeys(suggestors))}
    stamps = {name: Stamp(name, index, "engine", None) for name, index in ids.items()}
    by = [stamps[name] for name in suggestors]
    prepare()
    started = perf_counter()
    facts: list[Fact] = []
    leaves: list[str] = []
    positions: dict[str, int] = {}
    clock = 0
    for first in range(0, len(proposals), per_cycle):
        cycle = first // per_cycle + 1
        for index in range(first, min(first + per_cycle, len(proposals))):
            clock += 1
            fact = by[index].promote(proposals[index], cycle, clock)
            fields = fact.__dict__
            positions[fields["id"]] = len(facts)
            facts.append(fact)
            leaves.append(fields["digest"])
    root = merkle_root(map(bytes.fromhex, leaves))
    seconds = perf_counter() - started
    if len(facts) != len(proposals) or len(positions) != len(facts):
        raise RuntimeError(f"the seal floor built {len(facts)} facts of {len(proposals)}")
    return seconds, root
