"""The serialized merge: effects enter the context one suggestor at a time, in id order.

Each proposal gets one decision (`Merger._decide_each`), in order: the gate's admission (a proposal
that skipped validation is validated again; one that does not validate is rejected, the field
named) and checks (reject); the identity check (an identical fact is an idempotent
restatement; a different one with the same key and id is a conflict); a slot already held
(reject); the HITL policy (hold for a human); otherwise the gate promotes it. A suggestor's
decisions are appended to the cycle's as they are made and kept together or not at all: a
conflict with `on_conflict="stop"` or a structural violation rolls the cycle back to where
that suggestor's effect began (`Merger._roll_back`), discarding its facts and holds and
nothing else (its rejections stay on record). Any exception while deciding one proposal is
that proposal's rejection, with the exception as its reason: a proposal never stops a run.

A promoted fact's leaf digest is taken the moment the gate seals it and travels with it into
the snapshot, which builds the Merkle root from those leaves only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from operator import attrgetter
from typing import Final, Literal, final

from .._core._canonical import payload_json
from .._core._context import ContextSnapshot
from .._core._effect import Refusal
from .._core._fact import Fact
from .._core._hitl import GateRequest, HitlPolicy, utc_now
from .._core._invariant import Invariant, Violation, check_invariants
from .._core._key import AnyKey
from .._core._model import trusted
from .._core._proposal import ProposedFact
from .._core._result import Conflict
from .._core._seal import Stamp
from .._core._text import storable
from .._core._trace import Rejection
from ._gate import Gate, admit, check_hashable, stand_in, unhashable
from ._recordable import recordable

__all__ = ["ConflictMode", "Merger", "identical"]

ConflictMode = Literal["stop", "reject"]


_key_of: Final = attrgetter("key")
_KEY_SETS: Final[dict[frozenset[AnyKey], frozenset[AnyKey]]] = {}
"""Each set of keys cycles added, kept once: the next cycle's log keeps it as its dirty set,
and most cycles of a run add one of the same few (a set of one key alone is 216 bytes)."""
_MAX_KEY_SETS: Final = 1024
_ONE_KEY: Final[dict[AnyKey, frozenset[AnyKey]]] = {}
"""The sets of one key in `_KEY_SETS`, by their key."""


def identical(fact: Fact, proposal: ProposedFact) -> bool:
    """Whether `proposal` restates `fact`: same key, id, content and canonical payload."""
    if fact.content != proposal.content:
        return False
    mine, theirs = fact.payload, proposal.payload
    if mine is None or theirs is None:
        return mine is None and theirs is None
    return mine is theirs or payload_json(mine) == payload_json(theirs)


_Decision = Fact | Rejection | GateRequest | Conflict | None
"""What the merge does with one proposal: promote, reject, hold, conflict, or nothing (`None`)."""


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
    ) -> None:
        """Merge into `snapshot` in `cycle` through `gate`. An engine keeps its merger from
        cycle to cycle while the gate's human-rejected slots stay the same (`begin`).

        `clock` tells the time a held proposal's `deadline` counts from (the HITL policy's
        `timeout` after the cycle's merge began; no deadline without a timeout)."""
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
        try:
            proposals = tuple(proposals)
        except Exception as error:  # an effect built without validation
            reason = f"the effect's proposals cannot be read ({type(error).__name__}: {error})"
            self.rejections.append(self._rejection(stand_in(proposals), suggestor, reason))
            return None
        # with structural invariants, this effect is checked on top of the earlier ones
        before = self.snapshot() if self._structural else None
        mark = (len(self.promoted), len(self.held), self._clock)
        stamp = self.gate.stamp(suggestor, suggestor_id, approved_by)
        conflict = self._decide_each(proposals, stamp, writes)
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
        for fact in self.promoted[promoted:]:
            self._overlay.pop((fact.key, fact.id), None)
        del self.promoted[promoted:]
        del self._leaves[promoted:]
        for request in self.held[held:]:
            self._held_slots.discard((request.proposal.key, request.proposal.id))
        del self.held[held:]
        self._folded = min(self._folded, promoted)
        self._clock = clock

    def _decide_each(
        self, proposals: tuple[ProposedFact, ...], stamp: Stamp, writes: frozenset[AnyKey] | None
    ) -> Conflict | None:
        """Decide one suggestor's proposals in order; the conflict that ends them, if any.

        Each is rejected, restated (nothing happens), held or promoted: the steps of the
        module's notes, in one loop rather than a call per proposal (which cost W1 0.4 µs a
        cycle, timed in a run).
        """
        promoted, leaves, overlay = self.promoted, self._leaves, self._overlay
        gate, base, hitl, held_slots = self.gate, self._base, self._hitl, self._held_slots
        suggestor = stamp.suggestor
        decision: _Decision
        for proposal in proposals:
            try:
                admitted = admit(proposal)
                if isinstance(admitted, str):
                    decision = self._rejection(stand_in(proposal), suggestor, admitted)
                elif (reason := gate.check(admitted, writes)) is not None:
                    decision = self._rejection(admitted, suggestor, reason)
                else:
                    own = admitted.__dict__  # read once: a model's attributes are slower
                    key: AnyKey = own["key"]
                    ident: str = own["id"]
                    # a slot's tuple only when something is kept by slot
                    existing = overlay.get((key, ident)) if overlay else None
                    if existing is None:
                        existing = base.find(key, ident)
                    if existing is not None:
                        decision = self._restated(existing, admitted, suggestor)
                    elif held_slots and (key, ident) in held_slots:
                        reason = f"{admitted.ref} is already held for a human decision"
                        decision = self._rejection(admitted, suggestor, reason)
                    else:
                        try:
                            if hitl is not None and (rule := hitl.held_by(admitted)) is not None:
                                check_hashable(admitted)
                                decision = self._request(admitted, stamp, rule)
                            else:
                                fact = stamp.promote(admitted, self._cycle, self._clock + 1)
                                self._clock += 1
                                promoted.append(fact)
                                leaves.append(fact.__dict__["digest"])  # the seal's own
                                overlay[key, ident] = fact
                                continue
                        except ValueError as error:  # model_copy/model_construct skip validation
                            decision = self._rejection(
                                stand_in(admitted), suggestor, unhashable(error, admitted)
                            )
            except Exception as error:
                reason = f"could not be decided ({type(error).__name__}: {error})"
                decision = self._rejection(stand_in(proposal), suggestor, reason)
            if type(decision) is Rejection:
                self.rejections.append(decision)
            elif type(decision) is GateRequest:
                self.held.append(decision)
                held_slots.add((decision.proposal.key, decision.proposal.id))
            elif decision is not None:  # a conflict; `None`: an idempotent restatement
                return decision
        return None

    def _restated(
        self, existing: Fact, proposal: ProposedFact, suggestor: str
    ) -> Rejection | Conflict | None:
        """A proposal for a slot that holds a fact: the same claim, or a conflict."""
        try:
            same = identical(existing, proposal)
        except ValueError as error:  # an unvalidated copy holding unhashable text
            return self._rejection(stand_in(proposal), suggestor, unhashable(error, proposal))
        if same:
            return None
        if self._mode == "stop":
            return Conflict(
                proposal=recordable(proposal, self.gate.policy),
                suggestor=suggestor,
                cycle=self._cycle,
                existing_provenance=existing.provenance,
            )
        reason = f"conflicts with existing fact {existing.ref} from {existing.provenance!r}"
        return self._rejection(proposal, suggestor, reason)

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
