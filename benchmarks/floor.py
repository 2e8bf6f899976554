"""Floors: what the design requires of a run, timed with nothing else of the engine around it.

A workload's figure minus its floor is what the rest of the engine costs; a goal below a
floor cannot be met without dropping part of what the design requires. Each floor returns
the Merkle root of what it promoted, and the suite's tests check it equals the run's own
root, so a floor cannot skip work unnoticed.

- **The seal floor** (`seal_floor`). Every promoted fact is sealed (DESIGN §9): its
  canonical JSON with its promotion record, SHA-256 of that, a `Fact` and a
  `PromotionRecord` built, the fact kept by the context (`ContextSnapshot._extend`, once
  per cycle). The engine's own `Stamp.promote`, one stamp per suggestor, kept as an
  engine keeps them. The Merkle root over every leaf is the integrity proof's, which a
  run builds on the proof's first read: each floor computes it after its timed part.
- **The promotion floor** (`promotion_floor`). The seal floor, plus what the gate must do
  with every proposal before it seals it: admission (`admit`), the policy's checks
  (`Gate.check`), and the identity check against the context and the cycle's earlier
  facts. What the engine adds on top is its merge bookkeeping, its cycles and its trace.
- **The cycle floor** (`cycle_floor`). A bare fixed-point loop over suggestors that are
  all candidates in every cycle: each cycle calls every `accepts` (a verdict must be a
  `bool`), awaits each eligible `execute` in turn, and promotes their proposals through the
  promotion floor's steps; it stops at the first cycle with nothing eligible. No budgets,
  no concurrency or time limits, no failure isolation, no events, no trace, no invariants.

All run with the collector on, as the timed runs do, after `prepare()`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from time import perf_counter
from typing import Final, final

from converge import ContextSnapshot, Fact, PromotionPolicy, ProposedFact, Suggestor
from converge._core._key import AnyKey
from converge._core._seal import Stamp
from converge._kernel._admit import admit
from converge._kernel._gate import Gate
from converge._kernel._run import INPUT_SUGGESTOR_ID

from ._common import prepare

__all__ = ["cycle_floor", "promotion_floor", "seal_floor"]

_INPUT: Final = Stamp("input", INPUT_SUGGESTOR_ID, "input", None)
"""The input gate's stamp, as a run's `engine.run(inputs=...)` promotes with."""


@final
class _Promoter:
    """Promotes proposals cycle by cycle into a context, with or without the gate's work."""

    __slots__ = ("_clock", "_gate", "snapshot")

    def __init__(self, *, gated: bool) -> None:
        self._gate = Gate(PromotionPolicy(), kind="engine") if gated else None
        self._clock = 0
        self.snapshot = ContextSnapshot.empty()

    def promote(self, cycle: int, proposals: Iterable[tuple[Stamp, ProposedFact]]) -> None:
        """Promote each `(stamp, proposal)` in `cycle`; any the gate refuses is an error."""
        gate = self._gate
        snapshot = self.snapshot
        clock = self._clock
        facts: list[Fact] = []
        leaves: list[bytes] = []
        seen: set[tuple[AnyKey, str]] = set()
        for stamp, proposal in proposals:
            clock += 1
            if gate is None:
                fact = stamp.promote(proposal, cycle, clock)
            else:
                admitted = admit(proposal)
                if isinstance(admitted, str):
                    raise RuntimeError(f"the floor's proposal does not validate: {admitted}")
                reason = gate.check(admitted, None)
                own = admitted.__dict__
                slot = (own["key"], own["id"])
                if slot in seen or snapshot.find(*slot) is not None:
                    reason = f"{admitted.ref} is promoted already"
                if reason is not None:
                    raise RuntimeError(f"the gate refuses the floor's proposal: {reason}")
                seen.add(slot)
                fact = stamp.promote(admitted, cycle, clock)
            facts.append(fact)
            leaves.append(fact.__dict__["digest"])
        self.snapshot = snapshot._extend(facts, leaves, cycle, clock)  # pyright: ignore[reportPrivateUsage]
        self._clock = clock


def seal_floor(
    proposals: Sequence[ProposedFact], suggestors: Sequence[str], per_cycle: int
) -> tuple[float, str]:
    """Seconds to seal `proposals`, `per_cycle` per cycle, and the facts' Merkle root.

    The `i`-th proposal is sealed as `suggestors[i]`'s, suggestors numbered in order of
    first appearance (as registered). The root is a run's when the run promotes the same
    proposals in the same order.
    """
    return _timed(proposals, suggestors, per_cycle, gated=False)


def promotion_floor(
    proposals: Sequence[ProposedFact], suggestors: Sequence[str], per_cycle: int
) -> tuple[float, str]:
    """`seal_floor` with the gate's admission, checks and identity check of each proposal.

    Raises:
        RuntimeError: The gate refuses a proposal (the floor promotes every one).
    """
    return _timed(proposals, suggestors, per_cycle, gated=True)


def _timed(
    proposals: Sequence[ProposedFact], suggestors: Sequence[str], per_cycle: int, *, gated: bool
) -> tuple[float, str]:
    if len(proposals) != len(suggestors):
        raise ValueError(f"{len(proposals)} proposals but {len(suggestors)} suggestors")
    ids = {name: index for index, name in enumerate(dict.fromkeys(suggestors))}
    stamps = {name: Stamp(name, index, "engine", None) for name, index in ids.items()}
    stamped = [
        (stamps[name], proposal) for name, proposal in zip(suggestors, proposals, strict=True)
    ]
    promoter = _Promoter(gated=gated)
    prepare()
    started = perf_counter()
    for first in range(0, len(stamped), per_cycle):
        promoter.promote(first // per_cycle + 1, stamped[first : first + per_cycle])
    seconds = perf_counter() - started
    root = promoter.snapshot.merkle_root()  # the proof, built when read: not the run's work
    if len(promoter.snapshot) != len(proposals):
        raise RuntimeError(f"the floor promoted {len(promoter.snapshot)} of {len(proposals)}")
    return seconds, root


async def cycle_floor(
    suggestors: Sequence[Suggestor], inputs: Sequence[ProposedFact]
) -> tuple[float, int, str]:
    """Seconds, cycles and Merkle root of the bare fixed-point loop over `suggestors`.

    `inputs` are promoted first, as `engine.run(inputs=...)` does. The count of cycles is
    a run's: the last is the one with nothing eligible. Only for suggestors that are all
    candidates in every cycle (each depends on a key that gains a fact every cycle, or on
    none), where a run calls every `accepts` too.

    Raises:
        TypeError: An `accepts` returned something other than a `bool`.
        RuntimeError: The gate refuses a proposal.
    """
    stamps = [Stamp(s.name, index, "engine", None) for index, s in enumerate(suggestors)]
    promoter = _Promoter(gated=True)
    prepare()
    started = perf_counter()
    promoter.promote(0, [(_INPUT, proposal) for proposal in inputs])
    cycle = 0
    while True:
        cycle += 1
        snapshot = promoter.snapshot
        eligible: list[int] = []
        for index, suggestor in enumerate(suggestors):
            verdict = suggestor.accepts(snapshot)
            if verdict is False:
                continue
            if verdict is not True:
                raise TypeError(f"accepts() of {suggestor.name!r} returned {verdict!r}")
            eligible.append(index)
        if not eligible:
            break
        proposed: list[tuple[Stamp, ProposedFact]] = []
        for index in eligible:
            effect = await suggestors[index].execute(snapshot)
            proposed.extend((stamps[index], proposal) for proposal in effect.proposals)
        promoter.promote(cycle, proposed)
    seconds = perf_counter() - started
    return seconds, cycle, promoter.snapshot.merkle_root()
