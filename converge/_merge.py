"""The serialized merge: effects enter the context one suggestor at a time, in id order.

Each proposal passes, in order: the engine gate; the identity check (an identical fact is an
idempotent no-op; a different one with the same key and id is a conflict); the HITL policy (a
gated proposal is held for a human). A suggestor's accepted proposals are committed together
after the structural invariants hold, so a conflict with `on_conflict="stop"` or a structural
violation discards that suggestor's whole effect and nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal, final

from ._canonical import canonical_json
from ._context import ContextSnapshot
from ._fact import Fact, GateKind, PromotionRecord, promote
from ._hitl import GateRequest, HitlPolicy
from ._invariant import Invariant, Violation, check_invariants
from ._key import ContextKey
from ._model import trusted
from ._promotion import PromotionPolicy
from ._proposal import ProposedFact
from ._result import Conflict
from ._trace import Rejection

__all__ = ["ConflictMode", "Merger", "identical"]

ConflictMode = Literal["stop", "reject"]


def _unhashable(error: ValueError) -> str:
    return f"cannot be hashed as canonical JSON ({type(error).__name__}: {error})"


def identical(fact: Fact, proposal: ProposedFact) -> bool:
    """Whether `proposal` restates `fact`: same key, id, content and canonical payload."""
    if fact.content != proposal.content:
        return False
    if fact.payload is None or proposal.payload is None:
        return fact.payload is None and proposal.payload is None
    return canonical_json(fact.payload) == canonical_json(proposal.payload)


@final
class Merger:
    """Merges the effects of one cycle into a snapshot, recording what happened."""

    __slots__ = (
        "_added",
        "_base",
        "_clock",
        "_cycle",
        "_deadline",
        "_gate",
        "_held_slots",
        "_hitl",
        "_mode",
        "_overlay",
        "_policy",
        "_refused",
        "_structural",
        "held",
        "promoted",
        "rejections",
        "violations",
    )

    def __init__(
        self,
        snapshot: ContextSnapshot,
        *,
        cycle: int,
        policy: PromotionPolicy,
        mode: ConflictMode,
        gate: GateKind = "engine",
        refused: frozenset[tuple[ContextKey, str]] = frozenset(),
        structural: Sequence[Invariant] = (),
        hitl: HitlPolicy | None = None,
        deadline: datetime | None = None,
    ) -> None:
        self._base = snapshot
        self._cycle = cycle
        self._clock = snapshot.clock
        self._policy = policy
        self._mode: ConflictMode = mode
        self._gate: GateKind = gate
        self._refused = refused
        self._overlay: dict[tuple[ContextKey, str], Fact] = {}
        self._added: list[Fact] = []
        self._structural = tuple(structural)
        self._hitl = hitl
        self._deadline = deadline
        self._held_slots: set[tuple[ContextKey, str]] = set()
        self.promoted: list[Fact] = []
        """Facts promoted so far in this cycle, in merge order."""
        self.rejections: list[Rejection] = []
        """Proposals refused so far in this cycle."""
        self.held: list[GateRequest] = []
        """Proposals held for a human, in merge order."""
        self.violations: list[Violation] = []
        """Structural violations that rolled an effect back."""

    def _find(self, key: ContextKey, ident: str) -> Fact | None:
        fact = self._overlay.get((key, ident))
        return fact if fact is not None else self._base.find(key, ident)

    def merge(
        self,
        suggestor: str,
        suggestor_id: int,
        writes: frozenset[ContextKey] | None,
        proposals: Sequence[ProposedFact],
        *,
        approved_by: str | None = None,
    ) -> Conflict | None:
        """Merge one suggestor's proposals; return the conflict that stops the run, if any."""
        accepted: list[Fact] = []
        local: dict[tuple[ContextKey, str], Fact] = {}
        held: list[GateRequest] = []
        held_here: set[tuple[ContextKey, str]] = set()
        rejected: list[Rejection] = []
        clock = self._clock
        cycle = self._cycle
        hitl = self._hitl
        for proposal in proposals:
            reason = self._policy.check(proposal, writes, self._refused)
            if reason is not None:
                rejected.append(self._rejection(proposal, suggestor, reason))
                continue
            slot = (proposal.key, proposal.id)
            existing = local.get(slot)
            if existing is None:
                existing = self._find(*slot)
            if existing is not None:
                try:
                    same = identical(existing, proposal)
                except ValueError as error:  # an unvalidated copy holding unhashable text
                    rejected.append(self._rejection(proposal, suggestor, _unhashable(error)))
                    continue
                if same:
                    continue
                if self._mode == "stop":
                    self.rejections.extend(rejected)
                    return Conflict(
                        proposal=proposal,
                        suggestor=suggestor,
                        cycle=cycle,
                        existing_provenance=existing.provenance,
                    )
                reason = f"conflicts with existing fact {existing.ref} from {existing.provenance!r}"
                rejected.append(self._rejection(proposal, suggestor, reason))
                continue
            if slot in self._held_slots or slot in held_here:
                reason = f"{proposal.ref} is already held for a human decision"
                rejected.append(self._rejection(proposal, suggestor, reason))
                continue
            if hitl is not None and hitl.gates(proposal):
                held.append(self._request(proposal, suggestor, suggestor_id))
                held_here.add(slot)
                continue
            clock += 1
            record = trusted(
                PromotionRecord,
                {
                    "cycle": cycle,
                    "suggestor": suggestor,
                    "suggestor_id": suggestor_id,
                    "clock": clock,
                    "gate": self._gate,
                    "approved_by": approved_by,
                },
            )
            try:
                fact = promote(proposal, record)
            except ValueError as error:  # model_copy/model_construct skip validation
                clock -= 1
                rejected.append(self._rejection(proposal, suggestor, _unhashable(error)))
                continue
            accepted.append(fact)
            local[slot] = fact
        self.rejections.extend(rejected)
        if accepted:
            if self._structural:
                candidate = self.snapshot()._extend(accepted, cycle, clock)  # pyright: ignore[reportPrivateUsage]
                violations = check_invariants(self._structural, candidate, cycle)
                if violations:
                    self.violations.extend(violations)
                    return None
                self._base = candidate
            else:
                self._overlay.update(local)
                self._added.extend(accepted)
            self._clock = clock
            self.promoted.extend(accepted)
        self._held_slots |= held_here
        self.held.extend(held)
        return None

    def _request(self, proposal: ProposedFact, suggestor: str, suggestor_id: int) -> GateRequest:
        return GateRequest(
            gate_id=f"gate:{self._cycle}:{proposal.ref}",
            proposal=proposal,
            suggestor=suggestor,
            suggestor_id=suggestor_id,
            cycle=self._cycle,
            summary=proposal.content,
            deadline=self._deadline,
        )

    def _rejection(self, proposal: ProposedFact, suggestor: str, reason: str) -> Rejection:
        return trusted(
            Rejection,
            {"proposal": proposal, "suggestor": suggestor, "cycle": self._cycle, "reason": reason},
        )

    def snapshot(self) -> ContextSnapshot:
        """The context with everything merged so far."""
        if self._added:
            self._base = self._base._extend(self._added, self._cycle, self._clock)  # pyright: ignore[reportPrivateUsage]
            self._added = []
            self._overlay = {}
        elif self._base.cycle != self._cycle:
            self._base = self._base._at_cycle(self._cycle)  # pyright: ignore[reportPrivateUsage]
        return self._base

    @property
    def added_keys(self) -> frozenset[ContextKey]:
        """Keys that gained facts in this cycle."""
        return frozenset(fact.key for fact in self.promoted)
