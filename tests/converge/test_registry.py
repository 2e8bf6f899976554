"""`Registry` and `RegistryView` directly: ids, packs, candidates, fingerprint, invariants."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from converge import (
    AgentEffect,
    ConfigurationError,
    Context,
    ContextKey,
    InvariantClass,
    InvariantResult,
    SuggestorId,
)
from converge._kernel import _registry as registry_module
from converge._kernel._registry import Registration, Registry, RegistryView

SEEDS = ContextKey.SEEDS
HYPOTHESES = ContextKey.HYPOTHESES
SIGNALS = ContextKey.SIGNALS
STRATEGIES = ContextKey.STRATEGIES


class Stub:
    """A suggestor that only has a shape: the registry never calls it."""

    def __init__(
        self,
        name: str,
        dependencies: Sequence[ContextKey] = (),
        writes: Sequence[ContextKey] | None = None,
    ) -> None:
        self.name = name
        self.dependencies = tuple(dependencies)
        self.writes = writes

    def accepts(self, ctx: Context, /) -> bool:
        return True

    async def execute(self, ctx: Context, /) -> AgentEffect:
        return AgentEffect.empty()


class Check:
    """An invariant that always holds; only its name and class matter here."""

    def __init__(self, name: str, invariant_class: InvariantClass) -> None:
        self.name = name
        self.invariant_class = invariant_class

    def check(self, ctx: Context, /) -> InvariantResult:
        return InvariantResult.ok()


def names(regs: Sequence[Registration]) -> list[str]:
    return [reg.name for reg in regs]


def candidate_names(view: RegistryView, *dirty: ContextKey) -> list[str]:
    registrations, suggestors = view.candidates(frozenset(dirty))
    assert suggestors == tuple(reg.suggestor for reg in registrations)
    return [reg.name for reg in registrations]


# --- registration -----------------------------------------------------------------------------


def test_ids_follow_registration_order_and_registrations_keep_what_was_read() -> None:
    registry = Registry()
    first, second = Stub("first"), Stub("second", [SEEDS, SIGNALS, SEEDS], writes=[HYPOTHESES])
    assert registry.add(first, None) == SuggestorId(0)
    assert registry.add(second, "pack") == SuggestorId(1)
    assert registry.add(Stub("third"), None) == SuggestorId(2)
    assert registry.names == ("first", "second", "third")

    regs = registry.view().registrations
    assert [int(reg.id) for reg in regs] == [0, 1, 2]
    assert all(isinstance(reg.id, SuggestorId) for reg in regs)
    assert regs[0].suggestor is first
    assert (regs[0].dependencies, regs[0].writes, regs[0].pack) == ((), None, None)
    assert regs[1].suggestor is second
    assert regs[1].dependencies == (SEEDS, SIGNALS)  # duplicates dropped, order kept
    assert regs[1].writes == frozenset({HYPOTHESES})
    assert regs[1].pack == "pack"


def test_a_duplicate_suggestor_name_is_refused_and_takes_no_id() -> None:
    registry = Registry()
    registry.add(Stub("a"), None)
    with pytest.raises(
        ConfigurationError,
        match=r"^a suggestor named 'a' is already registered: suggestor 1 \(Stub\) and suggestor "
        r"0 \(Stub\) have the same name; give each a name of its own$",
    ):
        registry.add(Stub("a", [SEEDS]), "other-pack")
    assert registry.names == ("a",)
    assert registry.add(Stub("b"), None) == SuggestorId(1)


def test_one_object_registered_again_under_another_name_is_refused_and_takes_no_id() -> None:
    """A suggestor whose `name` answers differently on each read cannot come in twice: the
    run finds a registration by its suggestor object."""
    shifty = Stub("first")
    registry = Registry()
    registry.add(shifty, None)
    shifty.name = "second"
    with pytest.raises(
        ConfigurationError,
        match=r"^suggestor 'second' is the object already registered as 'first': "
        r"register each suggestor object once$",
    ):
        registry.add(shifty, None)
    assert registry.names == ("first",)
    twin = Stub("second")  # an equal object of its own is another suggestor
    assert registry.add(twin, None) == SuggestorId(1)
    view = registry.view()
    assert [view.by_object[id(s)].name for s in (shifty, twin)] == ["first", "second"]


@pytest.mark.parametrize("pack", ["", "   ", "\t"])
def test_a_blank_pack_id_is_refused(pack: str) -> None:
    registry = Registry()
    with pytest.raises(
        ConfigurationError, match=r"^suggestor 'x': pack id must be a non-blank str$"
    ):
        registry.add(Stub("x"), pack)
    assert registry.names == ()
    with pytest.raises(ConfigurationError, match=r"registered packs: none$"):
        registry.set_active([pack])  # the refused pack id was not recorded


def test_a_suggestor_that_does_not_conform_is_refused() -> None:
    class SyncExecute:
        name = "sync"
        dependencies = ()

        def accepts(self, ctx: Context, /) -> bool:
            return True

        def execute(self, ctx: Context, /) -> AgentEffect:
            return AgentEffect.empty()

    registry = Registry()
    with pytest.raises(ConfigurationError, match=r"^suggestor 'sync': 'execute' must be an async"):
        registry.add(SyncExecute(), None)  # pyright: ignore[reportArgumentType]
    assert registry.names == ()


def test_a_duplicate_invariant_name_is_refused() -> None:
    registry = Registry()
    registry.add_invariant(Check("inv", InvariantClass.SEMANTIC), None)
    with pytest.raises(
        ConfigurationError, match=r"^an invariant named 'inv' is already registered$"
    ):
        registry.add_invariant(Check("inv", InvariantClass.ACCEPTANCE), "pack")
    assert [inv.name for inv in registry.view().semantic] == ["inv"]
    assert registry.view().acceptance == ()
    with pytest.raises(ConfigurationError, match=r"registered packs: none$"):
        registry.set_active(["pack"])  # the refused invariant's pack was not recorded


def test_invariant_members_are_checked() -> None:
    class NoName:
        invariant_class = InvariantClass.SEMANTIC

        def check(self, ctx: Context, /) -> InvariantResult:
            return InvariantResult.ok()

    class NotCallable:
        name = "not-callable"
        invariant_class = InvariantClass.SEMANTIC
        check = "no"

    registry = Registry()
    with pytest.raises(
        ConfigurationError, match="NoName does not satisfy Invariant: missing member 'name'"
    ):
        registry.add_invariant(NoName(), None)  # pyright: ignore[reportArgumentType]
    with pytest.raises(
        ConfigurationError, match=r"^invariant 'bad': invariant_class must be an InvariantClass$"
    ):
        registry.add_invariant(Check("bad", "sometimes"), None)  # pyright: ignore[reportArgumentType]
    with pytest.raises(
        ConfigurationError, match=r"^invariant 'not-callable': 'check' must be callable$"
    ):
        registry.add_invariant(NotCallable(), None)  # pyright: ignore[reportArgumentType]
    view = registry.view()
    assert (view.structural, view.semantic, view.acceptance) == ((), (), ())


def test_an_invariant_class_given_as_its_value_is_read_as_the_enum() -> None:
    registry = Registry()
    loose = Check("loose", "structural")  # pyright: ignore[reportArgumentType]
    registry.add_invariant(loose, None)
    view = registry.view()
    assert view.structural == (loose,)
    assert view.fingerprint[1] == ("loose:structural:",)


# --- packs ------------------------------------------------------------------------------------


def test_every_pack_is_active_until_set_active_chooses_some() -> None:
    registry = Registry()
    registry.add(Stub("free"), None)
    registry.add(Stub("in-a"), "a")
    registry.add(Stub("in-b"), "b")
    assert candidate_names(registry.view()) == ["free", "in-a", "in-b"]

    registry.set_active(["b"])
    assert candidate_names(registry.view()) == ["free", "in-b"]

    registry.set_active([])
    assert candidate_names(registry.view()) == ["free"]

    registry.set_active(None)
    assert candidate_names(registry.view()) == ["free", "in-a", "in-b"]


def test_an_inactive_pack_still_counts_in_registrations_and_fingerprint() -> None:
    registry = Registry()
    registry.add(Stub("free"), None)
    registry.add(Stub("in-a"), "a")
    registry.add_invariant(Check("a-check", InvariantClass.ACCEPTANCE), "a")
    everything = registry.view()

    registry.set_active([])
    view = registry.view()
    assert names(view.registrations) == ["free", "in-a"]
    assert view.fingerprint == everything.fingerprint
    assert view.acceptance == ()
    assert len(everything.acceptance) == 1


def test_set_active_refuses_unknown_packs_and_names_the_known_ones() -> None:
    registry = Registry()
    with pytest.raises(
        ConfigurationError, match=r"^unknown pack ids \['a'\]; registered packs: none$"
    ):
        registry.set_active(["a"])

    registry.add(Stub("in-b"), "b")
    registry.add_invariant(
        Check("in-a", InvariantClass.SEMANTIC), "a"
    )  # an invariant makes it known
    registry.set_active(["a"])
    assert candidate_names(registry.view()) == []
    with pytest.raises(
        ConfigurationError, match=r"^unknown pack ids \['x', 'y'\]; registered packs: a, b$"
    ):
        registry.set_active(["y", "a", "x"])
    assert candidate_names(registry.view()) == []  # the refused call changed nothing


# --- candidates -------------------------------------------------------------------------------


def test_candidates_are_the_dependency_free_and_those_reading_a_dirty_key_by_id() -> None:
    registry = Registry()
    registry.add(Stub("on-signals", [SIGNALS]), None)
    registry.add(Stub("always"), None)
    registry.add(Stub("on-seeds-and-signals", [SEEDS, SIGNALS]), None)
    registry.add(Stub("on-seeds", [SEEDS]), None)
    registry.add(Stub("on-strategies", [STRATEGIES]), None)
    view = registry.view()

    assert candidate_names(view) == ["always"]
    assert candidate_names(view, HYPOTHESES) == ["always"]
    assert candidate_names(view, SEEDS) == ["always", "on-seeds-and-signals", "on-seeds"]
    both = ["on-signals", "always", "on-seeds-and-signals", "on-seeds"]
    assert candidate_names(view, SEEDS, SIGNALS) == both
    assert candidate_names(view, SIGNALS, SEEDS) == both  # ids decide, not the dirty order
    assert candidate_names(view, STRATEGIES, SIGNALS, SEEDS) == [*both, "on-strategies"]
    ids = [int(reg.id) for reg in view.candidates(frozenset({SEEDS, SIGNALS, STRATEGIES}))[0]]
    assert ids == sorted(set(ids))  # ascending, each once


def test_a_view_keeps_each_dirty_sets_candidates_up_to_its_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registry_module, "_MAX_CANDIDATES", 2)
    registry = Registry()
    registry.add(Stub("on-seeds", [SEEDS]), None)
    registry.add(Stub("on-signals", [SIGNALS]), None)
    registry.add(Stub("always"), None)
    view = registry.view()
    sets = [frozenset({SEEDS}), frozenset({SIGNALS}), frozenset({SEEDS, SIGNALS})]
    expected = [
        ["on-seeds", "always"],
        ["on-signals", "always"],
        ["on-seeds", "on-signals", "always"],
    ]
    for _ in range(2):  # found, then kept (the first two) or found again (the third)
        assert [names(view.candidates(dirty)[0]) for dirty in sets] == expected
    kept = view._candidates  # pyright: ignore[reportPrivateUsage]
    assert list(kept) == sets[:2]
    assert kept[sets[0]] is view.candidates(frozenset({SEEDS}))  # an equal set finds it
    assert registry.view() is view  # the view, and what it keeps, lasts while nothing changes
    registry.add(Stub("on-seeds-too", [SEEDS]), None)
    assert names(registry.view().candidates(sets[0])[0]) == ["on-seeds", "always", "on-seeds-too"]


def test_without_dependency_free_suggestors_only_dirty_readers_are_candidates() -> None:
    registry = Registry()
    registry.add(Stub("on-seeds", [SEEDS]), None)
    registry.add(Stub("on-signals", [SIGNALS]), None)
    view = registry.view()
    assert view.candidates(frozenset()) == ((), ())
    assert view.candidates(frozenset([HYPOTHESES])) == ((), ())
    assert candidate_names(view, SIGNALS) == ["on-signals"]
    assert candidate_names(view, SIGNALS, SEEDS) == ["on-seeds", "on-signals"]


def test_an_empty_registry_has_no_candidates() -> None:
    view = Registry().view()
    assert view.registrations == ()
    assert view.candidates(frozenset(ContextKey)) == ((), ())
    assert view.fingerprint == ((), ())


# --- the view and its fingerprint -------------------------------------------------------------


def test_the_view_is_cached_until_the_registry_changes() -> None:
    registry = Registry()
    registry.add(Stub("a"), "p")
    view = registry.view()
    assert registry.view() is view

    registry.add(Stub("b"), None)
    after_add = registry.view()
    assert after_add is not view
    assert names(view.registrations) == ["a"]  # an earlier view is not changed
    assert names(after_add.registrations) == ["a", "b"]

    registry.add_invariant(Check("inv", InvariantClass.STRUCTURAL), None)
    after_invariant = registry.view()
    assert after_invariant is not after_add
    assert after_add.structural == ()

    registry.set_active(["p"])
    assert registry.view() is not after_invariant


def test_fingerprint_lists_ids_names_packs_and_invariant_classes() -> None:
    def build(pack: str | None) -> Registry:
        registry = Registry()
        registry.add(Stub("a"), None)
        registry.add(Stub("b", [SEEDS]), pack)
        registry.add_invariant(Check("keep", InvariantClass.SEMANTIC), None)
        registry.add_invariant(Check("final", InvariantClass.ACCEPTANCE), pack)
        return registry

    fingerprint = build("p").view().fingerprint
    assert fingerprint == (
        ("0:a:", "1:b:p"),
        ("keep:semantic:", "final:acceptance:p"),
    )
    assert build("p").view().fingerprint == fingerprint
    assert build(None).view().fingerprint != fingerprint


def test_invariants_are_split_by_class_in_registration_order() -> None:
    registry = Registry()
    s1 = Check("s1", InvariantClass.STRUCTURAL)
    m1 = Check("m1", InvariantClass.SEMANTIC)
    s2 = Check("s2", InvariantClass.STRUCTURAL)
    a1 = Check("a1", InvariantClass.ACCEPTANCE)
    m2 = Check("m2", InvariantClass.SEMANTIC)
    in_pack = Check("in-pack", InvariantClass.STRUCTURAL)
    for invariant in (s1, m1, s2, a1, m2):
        registry.add_invariant(invariant, None)
    registry.add_invariant(in_pack, "p")

    view = registry.view()
    assert view.structural == (s1, s2, in_pack)
    assert view.semantic == (m1, m2)
    assert view.acceptance == (a1,)

    registry.set_active([])
    assert registry.view().structural == (s1, s2)
