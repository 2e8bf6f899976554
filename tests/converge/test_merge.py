"""The merge rules on `Merger` directly: one decision per proposal, one commit per effect."""

from datetime import UTC, datetime, timedelta

import pytest

import converge._kernel._merge as merging
from converge import (
    Conflict,
    ContextKey,
    ContextSnapshot,
    Fact,
    HitlPolicy,
    IntegrityProof,
    PromotionPolicy,
    ProposedFact,
    verify,
)
from converge._kernel._gate import Gate
from converge._kernel._merge import ConflictMode, Merger
from converge._kernel._registry import Registry
from tests.doubles import NoForbiddenContent, ProposesOnce, fact

H = ContextKey.HYPOTHESES
S = ContextKey.SEEDS


def merger(
    snapshot: ContextSnapshot | None = None,
    *,
    mode: ConflictMode = "stop",
    hitl: HitlPolicy | None = None,
    structural: bool = False,
    refused: frozenset[tuple[ContextKey, str]] = frozenset(),
) -> Merger:
    return Merger(
        snapshot or ContextSnapshot.empty(),
        cycle=1,
        gate=Gate(PromotionPolicy(), kind="engine", refused=refused),
        mode=mode,
        hitl=hitl,
        structural=(NoForbiddenContent(),) if structural else (),
    )


def seeded(*proposals: ProposedFact) -> ContextSnapshot:
    first = merger()
    assert first.merge("seeder", 0, None, proposals) is None
    return first.snapshot()


def test_promoted_facts_carry_the_gate_record_and_a_clock_tick_each() -> None:
    m = merger()
    assert m.merge("a", 3, None, [fact(H, "x"), fact(H, "y")]) is None
    x, y = m.promoted
    assert isinstance(x, Fact)
    assert (x.promotion.suggestor, x.promotion.suggestor_id, x.promotion.cycle) == ("a", 3, 1)
    assert (x.promotion.clock, y.promotion.clock) == (1, 2)
    assert x.promotion.gate == "engine"
    assert m.snapshot().count(H) == 2
    assert m.added_keys == frozenset({H})


def test_cycles_that_add_the_same_keys_share_one_set_of_them() -> None:
    first, second, other = merger(), merger(), merger()
    first.merge("a", 0, None, [fact(H, "x"), fact(S, "s")])
    second.merge("a", 0, None, [fact(S, "t"), fact(H, "y"), fact(H, "z")])
    other.merge("a", 0, None, [fact(H, "w")])
    assert first.added_keys == frozenset({H, S})
    assert second.added_keys is first.added_keys  # kept once, however many cycles keep it
    assert other.added_keys == frozenset({H})
    assert other.added_keys is not first.added_keys
    assert merger().added_keys == frozenset()


def test_a_cycle_of_one_fact_shares_the_set_of_its_key_with_cycles_of_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(merging, "_KEY_SETS", {})
    monkeypatch.setattr(merging, "_ONE_KEY", {})
    one, more, again = merger(), merger(), merger()
    one.merge("a", 0, None, [fact(H, "x")])
    more.merge("a", 0, None, [fact(H, "y"), fact(H, "z")])
    again.merge("a", 0, None, [fact(H, "w")])
    keys = one.added_keys  # the first: made, then kept
    assert keys == frozenset({H})
    assert more.added_keys is keys
    assert again.added_keys is keys  # found by its key alone
    assert merging._ONE_KEY == {H: keys}  # pyright: ignore[reportPrivateUsage]


def test_the_shared_sets_of_keys_stop_growing_at_their_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    full = {frozenset({f"custom-{n}"}): frozenset({f"custom-{n}"}) for n in range(1024)}
    monkeypatch.setattr(merging, "_KEY_SETS", full)
    monkeypatch.setattr(merging, "_ONE_KEY", {})
    m = merger()
    m.merge("a", 0, None, [fact(H, "x")])
    keys = m.added_keys
    assert keys == frozenset({H})
    assert len(full) == 1024  # not kept: a fresh, equal set each time
    assert m.added_keys is not keys
    assert m.added_keys == keys


def test_a_gate_refusal_is_a_rejection_and_promotes_nothing() -> None:
    m = merger()
    m.merge("a", 0, frozenset({S}), [fact(H, "x")])
    [rejection] = m.rejections
    assert rejection.reason == "not authorised to write hypotheses"
    assert rejection.suggestor == "a"
    assert m.promoted == []


def test_an_identical_restatement_is_a_no_op() -> None:
    m = merger(seeded(fact(H, "x", "same")))
    assert m.merge("b", 1, None, [fact(H, "x", "same", provenance="other")]) is None
    assert (m.promoted, m.rejections) == ([], [])


def test_a_different_claim_on_a_taken_slot_stops_with_a_conflict() -> None:
    m = merger(seeded(fact(H, "x", "old")))
    conflict = m.merge("b", 1, None, [fact(H, "ok", "fine"), fact(H, "x", "new")])
    assert isinstance(conflict, Conflict)
    assert conflict.suggestor == "b"
    assert conflict.proposal.content == "new"
    assert m.promoted == []  # the conflicting effect is discarded whole


def test_in_reject_mode_a_conflict_is_a_rejection_and_the_rest_commits() -> None:
    m = merger(seeded(fact(H, "x", "old")), mode="reject")
    assert m.merge("b", 1, None, [fact(H, "ok", "fine"), fact(H, "x", "new")]) is None
    assert [f.id for f in m.promoted] == ["ok"]
    [rejection] = m.rejections
    assert rejection.reason.startswith("conflicts with existing fact hypotheses/x")


def test_a_second_proposal_of_the_same_slot_in_one_effect_is_judged_against_the_first() -> None:
    m = merger(mode="reject")
    m.merge("a", 0, None, [fact(H, "x", "one"), fact(H, "x", "two")])
    assert [f.content for f in m.promoted] == ["one"]
    assert len(m.rejections) == 1


def test_a_gated_proposal_is_held_and_its_slot_refuses_any_second_proposal() -> None:
    m = merger(hitl=HitlPolicy(gated_keys=frozenset({H})))
    m.merge("a", 0, None, [fact(H, "x")])
    m.merge("b", 1, None, [fact(H, "x")])
    [request] = m.held
    assert request.gate_id == "gate:1:hypotheses/x"
    assert request.suggestor == "a"
    [rejection] = m.rejections
    assert rejection.reason == "hypotheses/x is already held for a human decision"


def test_a_structural_violation_discards_the_whole_effect_and_nothing_else() -> None:
    m = merger(structural=True)
    m.merge("good", 0, None, [fact(H, "a", "fine")])
    m.merge("bad", 1, None, [fact(H, "b", "fine too"), fact(H, "c", "forbidden")])
    assert [f.id for f in m.promoted] == ["a"]
    [violation] = m.violations
    assert violation.invariant == "no-forbidden"
    assert m.snapshot().find(H, "b") is None
    assert m.snapshot().clock == 1
    # the discarded facts were appended to the context's store when the invariant was
    # checked; a later effect promoting one of their ids again sees only its own fact
    m.merge("later", 2, None, [fact(H, "b", "fine again")])
    snapshot = m.snapshot()
    found = snapshot.find(H, "b")
    assert found is not None
    assert found.content == "fine again"
    assert [f.id for f in snapshot.get(H)] == ["a", "b"]
    assert snapshot.find(H, "c") is None
    assert verify(snapshot, IntegrityProof.of(snapshot))


def test_a_discarded_effect_leaves_its_slots_clock_and_holds_as_they_were() -> None:
    # one effect promotes, holds and is refused, then breaks an invariant: its facts and its
    # hold are gone (the slots free, the clock back), its refusal stays on record
    m = Merger(
        ContextSnapshot.empty(),
        cycle=1,
        gate=Gate(PromotionPolicy(), kind="engine"),
        mode="stop",
        hitl=HitlPolicy(gated_keys=frozenset({S})),
        structural=(NoForbiddenContent(),),
    )
    m.merge("good", 0, None, [fact(H, "a", "fine")])
    bad = [fact(H, "b", "fine"), fact(S, "g"), fact(H, "blank", " "), fact(H, "c", "forbidden")]
    assert m.merge("bad", 1, None, bad) is None
    assert [f.id for f in m.promoted] == ["a"]
    assert m.held == []
    assert [r.proposal.id for r in m.rejections] == ["blank"]
    assert m.snapshot().clock == 1
    assert m.merge("again", 2, None, [fact(H, "b", "fine"), fact(S, "g")]) is None
    assert [(f.id, f.promotion.clock) for f in m.promoted] == [("a", 1), ("b", 2)]
    assert [request.suggestor for request in m.held] == ["again"]
    assert m.snapshot().find(H, "b") is m.promoted[1]


def test_a_conflict_discards_the_effects_holds_and_keeps_the_earlier_effects() -> None:
    m = merger(seeded(fact(H, "x", "old")), hitl=HitlPolicy(gated_keys=frozenset({S})))
    assert m.merge("a", 0, None, [fact(H, "kept")]) is None
    conflict = m.merge("b", 1, None, [fact(H, "y"), fact(S, "g"), fact(H, "x", "new")])
    assert isinstance(conflict, Conflict)
    assert [f.id for f in m.promoted] == ["kept"]
    assert m.held == []
    # the merger stays consistent: the discarded slot takes another claim, the next clock
    assert m.merge("c", 2, None, [fact(H, "y", "other")]) is None
    assert [(f.content, f.promotion.clock) for f in m.promoted] == [("c", 2), ("other", 3)]
    snapshot = m.snapshot()
    assert snapshot.find(H, "kept") is m.promoted[0]
    assert snapshot.find(H, "y") is m.promoted[1]


def test_a_human_rejected_slot_is_refused_by_the_gate() -> None:
    m = merger(refused=frozenset({(H, "x")}))
    m.merge("a", 0, None, [fact(H, "x")])
    assert m.rejections[0].reason == "hypotheses/x was rejected by a human in this run"


def test_an_unhashable_unvalidated_copy_is_rejected_not_raised() -> None:
    bad = fact(H, "x").model_copy(update={"payload": {"n": float("nan")}})
    m = merger()
    m.merge("a", 0, None, [bad, fact(H, "y")])
    assert [f.id for f in m.promoted] == ["y"]
    assert "cannot be hashed" in m.rejections[0].reason


def test_the_gate_stamps_its_kind_and_approver() -> None:
    gate = Gate(PromotionPolicy(), kind="human")
    promoted = gate.stamp("a", 2, approved_by="ceo").promote(fact(H, "x"), 4, 9)
    record = promoted.promotion
    assert (record.cycle, record.gate, record.approved_by, record.clock) == (4, "human", "ceo", 9)
    assert gate.check(fact(H, "x", " "), None) == "content is blank"


def test_a_registrations_stamp_promotes_as_the_engine_gates_own_does() -> None:
    """`Registration.stamp`, made once at registration, is what the engine's gate would make
    for it: the same record and leaf for the same proposal (the run merges with it)."""
    registry = Registry()
    registry.add(ProposesOnce("first", ()), None)
    registry.add(ProposesOnce("second", ()), None)
    [_, reg] = registry.view().registrations
    stamp = reg.stamp
    own = Gate(PromotionPolicy(), kind="engine").stamp("second", 1)
    assert (stamp.suggestor, stamp.suggestor_id, stamp.gate, stamp.approved_by) == (
        "second",
        1,
        "engine",
        None,
    )
    assert type(stamp.suggestor_id) is int  # not the `SuggestorId` subclass: the record's type
    by_registration = merger().merge_stamped(stamp, None, [fact(H, "x")])
    assert by_registration is None
    assert stamp.promote(fact(H, "x"), 3, 7).digest == own.promote(fact(H, "x"), 3, 7).digest


def test_a_merger_begun_again_leaves_what_the_last_cycle_recorded_to_its_readers() -> None:
    m = merger(hitl=HitlPolicy(gated_keys=frozenset({S})), mode="reject")
    m.merge("a", 0, None, [fact(H, "x"), fact(S, "held"), fact(H, "blank", " ")])
    promoted, rejected, held = m.promoted, m.rejections, m.held
    first = m.snapshot()
    assert [f.id for f in promoted] == ["x"]
    assert [r.proposal.id for r in rejected] == ["blank"]
    assert [r.proposal.id for r in held] == ["held"]

    m.begin(first, 2)
    assert (m.promoted, m.rejections, m.held) == ([], [], [])
    m.merge("a", 0, None, [fact(H, "y"), fact(S, "held"), fact(H, "x", "other")])
    # the last cycle's lists, kept by its trace, are not the new cycle's
    assert [f.id for f in promoted] == ["x"]
    assert [r.proposal.id for r in rejected] == ["blank"]
    assert [r.proposal.id for r in held] == ["held"]
    # a new cycle: the slot held before is free to be held again, the clock goes on
    assert [r.proposal.id for r in m.held] == ["held"]
    [conflict] = m.rejections
    assert conflict.reason.startswith("conflicts with existing fact hypotheses/x")
    [y] = m.promoted
    assert (y.promotion.cycle, y.promotion.clock) == (2, first.clock + 1)
    assert m.snapshot().find(H, "y") == y
    assert m.snapshot().find(H, "x") == first.find(H, "x")


def test_a_merger_begun_on_an_empty_cycle_keeps_its_empty_lists() -> None:
    m = merger()
    promoted, rejections, held, violations = m.promoted, m.rejections, m.held, m.violations
    m.begin(ContextSnapshot.empty(), 2)
    assert m.promoted is promoted
    assert m.rejections is rejections
    assert m.held is held
    assert m.violations is violations


def test_each_cycle_of_a_kept_merger_counts_its_deadlines_from_when_it_began() -> None:
    times = iter(datetime(2026, 1, 1, hour, tzinfo=UTC) for hour in range(3))
    hitl = HitlPolicy(gated_keys=frozenset({S}), timeout=timedelta(minutes=5))
    gate = Gate(PromotionPolicy(), kind="engine")
    m = Merger(ContextSnapshot.empty(), 1, gate, "stop", hitl=hitl, clock=lambda: next(times))
    m.merge("a", 0, None, [fact(S, "first")])
    [first] = m.held
    m.begin(m.snapshot(), 2)
    m.merge("a", 0, None, [fact(S, "second"), fact(S, "third")])
    assert first.deadline == datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
    assert [r.deadline for r in m.held] == [datetime(2026, 1, 1, 1, 5, tzinfo=UTC)] * 2
