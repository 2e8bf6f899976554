"""The serialized merge: effects enter the context one suggestor at a time, in id order.

The gate decides each proposal once (`Gate.decide`: promote the admitted proposal, reject
it with its reason, hold it for a human, a clash with the fact in its slot, or nothing for a
restatement) and the merge applies that verdict (`Merger._apply_each`), never asking the gate
again. A clash is the run's conflict with `on_conflict="stop"`, else a rejection. A
suggestor's verdicts are applied to the cycle's records as they come and kept together or not
at all: a conflict with `on_conflict="stop"` or a structural violation rolls the cycle back
to where that suggestor's effect began (`Merger._roll_back`), discarding its facts and holds
and nothing else (its rejections stay on record). The gate turns any exception while
deciding one proposal into that proposal's rejection: a proposal never stops a run.

A promoted fact's leaf digest is taken the moment the gate seals it and travels with it into
the snapshot, which builds the Merkle root from those leaves only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from operator import attrgetter
from typing import Final, Literal, final

from .._core._context import ContextSnapshot
from .._core._effect import Refusal
from .._core._fact import Fact
from .._core._hitl import GateRequest, HitlPolicy, utc_now
from .._core._invariant import Invariant, Violation, check_invariants
from .._core._key import AnyKey
from .._core._model import trusted
from .._core._proposal import ProposedFact
from .._core._result import Conflict
from .._core._seal import Stamp, Texts
from .._core._text import storable
from .._core._trace import Rejection
from ._admit import stand_in, unhashable
from ._gate import RESTATED, Clash, Gate, Hold, Reject
from ._recordable import recordable

__all__ = ["ConflictMode", "Merger"]

ConflictMode = Literal["stop", "reject"]


_key_of: Final = attrgetter("key")
_KEY_SETS: Final[dict[frozenset[AnyKey], frozenset[AnyKey]]] = {}
"""Each set of keys cycles added, kept once: the next cycle's log keeps it as its dirty set,
and most cycles of a run add one of the same few (a set of one key alone is 216 bytes)."""
_MAX_KEY_SETS: Final = 1024
_ONE_KEY: Final[dict[AnyKey, frozenset[AnyKey]]] = {}
"""The sets of one key in `_KEY_SETS`, by their key."""


@final
class Merger:
    """Merges the effects of one cycle into a snapshot, recording what happened."""

    __slots__ = (
        "_base",
        "_clock",
        "_cycle",
        "_deadline",
        "_folded",
        "_held_slots",
        "_hitl",
        "_leaves",
        "_mode",
        "_now",
        "_overlay",
        "_structural",
        "_texts",
        "_timeout",
        "gate",
        "held",
        "promoted",
        "rejections",
        "violations",
    )

    def __init__(
        self,
        snapshot: ContextSnapshot,
        cycle: int,
        gate: Gate,
        mode: ConflictMode,
        structural: Sequence[Invariant] = (),
        hitl: HitlPolicy | None = None,
        clock: Callable[[], datetime] = utc_now,
        texts: Texts | None = None,
    ) -> None:
        """Merge into `snapshot` in `cycle` through `gate`. An engine keeps its merger from
        cycle to cycle while the gate's human-rejected slots stay the same (`begin`).

        `clock` tells the time a held proposal's `deadline` counts from (the HITL policy's
        `timeout` after the cycle's merge began; no deadline without a timeout). `texts`
        keeps the text each promoted fact's leaf hashes (`Stamp.promote`), for a run saved
        after every cycle (`RunState.texts`); a rolled-back fact's is dropped."""
        self._base = snapshot
        self._cycle = cycle
        self._clock = snapshot.clock
        self.gate = gate
        """The gate this merger decides through (read, never replaced)."""
        self._mode: ConflictMode = mode
        self._overlay: dict[tuple[AnyKey, str], Fact] = {}
        """The facts promoted in this cycle, by slot (those folded into `_base` too: a
        slot is found in either; `begin` empties it)."""
        self._leaves: list[bytes] = []
        """The leaf digest of each promoted fact, as the seal took it."""
        self._folded = 0
        """How many of `promoted` are in `_base` already."""
        self._structural = tuple(structural)
        self._hitl = hitl
        self._now = clock
        self._timeout = None if hitl is None else hitl.timeout
        self._deadline = None if self._timeout is None else clock() + self._timeout
        self._held_slots: set[tuple[AnyKey, str]] = set()
        self._texts = texts
        self.promoted: list[Fact] = []
        """Facts promoted so far in this cycle, in merge order."""
        self.rejections: list[Rejection] = []
        """Proposals refused so far in this cycle."""
        self.held: list[GateRequest] = []
        """Proposals held for a human, in merge order."""
        self.violations: list[Violation] = []
        """Structural violations that rolled an effect back."""

    def begin(self, snapshot: ContextSnapshot, cycle: int) -> None:
        """Start merging `cycle` into `snapshot` with the same gate, mode, invariants and
        HITL policy (an engine keeps its merger from cycle to cycle, as it keeps its gate).

        What the last cycle recorded stays with whoever read it: a list it filled is left
        to them and a new one begun; an empty one is kept (its readers copy it, or keep
        `()` in its place)."""
        self._base = snapshot
        self._cycle = cycle
        self._clock = snapshot.clock
        if self._timeout is not None:
            self._deadline = self._now() + self._timeout
        self._folded = 0
        self._overlay.clear()
        if self.promoted:
            self.promoted = []
            self._leaves = []
        if self.rejections:
            self.rejections = []
        if self.held:
            self.held = []
            self._held_slots.clear()
        if self.violations:
            self.violations = []

    def merge(
        self,
        suggestor: str,
        suggestor_id: int,
        writes: frozenset[AnyKey] | None,
        proposals: Iterable[ProposedFact],
        *,
        approved_by: str | None = None,
    ) -> Conflict | None:
        """Merge one suggestor's proposals; return the conflict that stops the run, if any."""
        stamp = self.gate.stamp(suggestor, suggestor_id, approved_by)
        return self.merge_stamped(stamp, writes, proposals)

    def merge_stamped(
        self, stamp: Stamp, writes: frozenset[AnyKey] | None, proposals: Iterable[ProposedFact]
    ) -> Conflict | None:
        """`merge`, with the suggestor's stamp for this merger's gate made already (the
        engine's is kept on each `Registration`)."""
        suggestor = stamp.suggestor
        try:
            proposals = tuple(proposals)
        except Exception as error:  # an effect built without validation
            reason = f"the effect's proposals cannot be read ({type(error).__name__}: {error})"
            self.rejections.append(self._rejection(stand_in(proposals), suggestor, reason))
            return None
        # with structural invariants, this effect is checked on top of the earlier ones
        before = self.snapshot() if self._structural else None
        mark = (len(self.promoted), len(self.held), self._clock)
        conflict = self._apply_each(proposals, stamp, writes)
        if conflict is not None:
            self._roll_back(*mark)
            return conflict
        if before is not None and len(self.promoted) > mark[0]:
            violations = check_invariants(self._structural, self.snapshot(), self._cycle)
            if violations:
                self.violations.extend(violations)
                self._base = before
                self._roll_back(*mark)
        return None

    def _roll_back(self, promoted: int, held: int, clock: int) -> None:
        """Discard what was promoted and held since the marks (one suggestor's effect)."""
        texts = self._texts
        for fact in self.promoted[promoted:]:
            self._overlay.pop((fact.key, fact.id), None)
            if texts is not None:
                texts.pop((fact.key, fact.id), None)
        del self.promoted[promoted:]
        del self._leaves[promoted:]
        for request in self.held[held:]:
            self._held_slots.discard((request.proposal.key, request.proposal.id))
        del self.held[held:]
        self._folded = min(self._folded, promoted)
        self._clock = clock

    def _apply_each(
        self, proposals: tuple[ProposedFact, ...], stamp: Stamp, writes: frozenset[AnyKey] | None
    ) -> Conflict | None:
        """Apply the gate's verdict on each of one suggestor's proposals, in order; the
        conflict that ends them, if any (`on_conflict="stop"`)."""
        promoted, leaves, overlay, texts = self.promoted, self._leaves, self._overlay, self._texts
        decide, base, hitl, held_slots = self.gate.decide, self._base, self._hitl, self._held_slots
        suggestor = stamp.suggestor
        for proposal in proposals:
            verdict = decide(proposal, writes, overlay, base, held_slots, hitl)
            if type(verdict) is ProposedFact:  # admitted: promoted
                try:
                    fact = stamp.promote(verdict, self._cycle, self._clock + 1, texts)
                except ValueError as error:  # model_copy/model_construct skip validation
                    self.rejections.append(
                        self._rejection(stand_in(verdict), suggestor, unhashable(error, verdict))
                    )
                    continue
                self._clock += 1
                promoted.append(fact)
                own = fact.__dict__  # read once: a model's attributes are slower to load
                leaves.append(own["digest"])  # the seal's own
                overlay[own["key"], own["id"]] = fact
            elif verdict is RESTATED:
                continue
            elif type(verdict) is Reject:
                self.rejections.append(self._rejection(verdict.proposal, suggestor, verdict.reason))
            elif type(verdict) is Hold:
                request = self._request(verdict.proposal, stamp, verdict.rule)
                self.held.append(request)
                held_slots.add((request.proposal.key, request.proposal.id))
            elif type(verdict) is Clash:
                conflict = self._clash(verdict, suggestor)
                if conflict is not None:
                    return conflict
        return None

    def _clash(self, clash: Clash, suggestor: str) -> Conflict | None:
        """A clash with the fact in a slot: the run's conflict (`"stop"`), else a rejection."""
        proposal, existing = clash
        if self._mode == "stop":
            return Conflict(
                proposal=recordable(proposal, self.gate.policy),
                suggestor=suggestor,
                cycle=self._cycle,
                existing_provenance=existing.provenance,
            )
        reason = f"conflicts with existing fact {existing.ref} from {existing.provenance!r}"
        self.rejections.append(self._rejection(proposal, suggestor, reason))
        return None

    def _request(self, proposal: ProposedFact, stamp: Stamp, rule: str) -> GateRequest:
        return GateRequest(
            gate_id=f"gate:{self._cycle}:{proposal.ref}",
            proposal=proposal,
            suggestor=stamp.suggestor,
            suggestor_id=stamp.suggestor_id,
            cycle=self._cycle,
            summary=proposal.content,
            deadline=self._deadline,
            rule=rule,
        )

    def refuse(self, suggestor: str, refusals: Sequence[Refusal]) -> None:
        """Record the items a suggestor refused itself as rejections (nothing is promoted)."""
        for refusal in refusals:
            reason = f"refused by {suggestor}: {refusal.reason}"
            self.rejections.append(self._rejection(refusal.proposal, suggestor, reason))

    def _rejection(self, proposal: ProposedFact, suggestor: str, reason: str) -> Rejection:
        """The record of a refused proposal: validated and bounded (`recordable`), its reason
        made storable (`_text.storable`)."""
        return trusted(
            Rejection,
            {
                "proposal": recordable(proposal, self.gate.policy),
                "suggestor": suggestor,
                "cycle": self._cycle,
                "reason": storable(reason),
            },
        )

    def snapshot(self) -> ContextSnapshot:
        """The context with everything merged so far."""
        promoted = self.promoted
        folded = self._folded
        if len(promoted) > folded:
            new = promoted if not folded else promoted[folded:]
            leaves = self._leaves if not folded else self._leaves[folded:]
            self._base = self._base._extend(  # pyright: ignore[reportPrivateUsage]
                new, leaves, self._cycle, self._clock
            )
            self._folded = len(promoted)
        elif self._base.cycle != self._cycle:
            self._base = self._base._at_cycle(self._cycle)  # pyright: ignore[reportPrivateUsage]
        return self._base

    @property
    def added_keys(self) -> frozenset[AnyKey]:
        """Keys that gained facts in this cycle (an equal set another cycle added, if any)."""
        promoted = self.promoted
        if len(promoted) == 1:  # most cycles: the set of one key, found by the key
            keys = _ONE_KEY.get(promoted[0].__dict__["key"])
            if keys is not None:
                return keys
        keys = frozenset(map(_key_of, promoted))
        shared = _KEY_SETS.get(keys)
        if shared is not None:
            return shared
        if len(_KEY_SETS) < _MAX_KEY_SETS:
            _KEY_SETS[keys] = keys
            if len(keys) == 1:
                _ONE_KEY[next(iter(keys))] = keys
        return keys
