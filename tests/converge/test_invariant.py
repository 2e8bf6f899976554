"""Invariants: structural rollback, semantic blocking, acceptance at the fixed point."""

import pytest

from converge import (
    ConfigurationError,
    Context,
    ContextKey,
    Engine,
    InvariantClass,
    InvariantResult,
    InvariantViolationError,
    StopReason,
)
from tests.doubles import NoForbiddenContent, ProposesOnce, fact

H = ContextKey.HYPOTHESES


class Needs:
    """Holds when `ident` exists under HYPOTHESES."""

    def __init__(self, ident: str, invariant_class: InvariantClass, name: str | None = None):
        self.ident = ident
        self.invariant_class = invariant_class
        self.name = name or f"needs-{ident}"

    def check(self, ctx: Context, /) -> InvariantResult:
        if ctx.find(H, self.ident) is None:
            return InvariantResult.violated(f"{self.ident} is missing")
        return InvariantResult.ok()


def test_invariant_result_helpers() -> None:
    assert InvariantResult.ok().is_ok
    assert InvariantResult.ok().reason is None
    bad = InvariantResult.violated("nope")
    assert (bad.is_ok, bad.reason) == (False, "nope")


async def test_structural_violation_rolls_back_only_that_suggestors_effect() -> None:
    engine = Engine()
    engine.register_invariant(NoForbiddenContent())
    engine.register_suggestor(ProposesOnce("first", [fact(H, "a")]))
    engine.register_suggestor(ProposesOnce("bad", [fact(H, "b"), fact(H, "c", "forbidden")], at=1))
    engine.register_suggestor(ProposesOnce("last", [fact(H, "d")]))
    result = await engine.run()
    assert result.converged
    assert [f.id for f in result.context.get(H)] == ["a", "d"]
    [violation] = result.trace.cycles[0].violations
    assert (violation.invariant, violation.invariant_class, violation.cycle) == (
        "no-forbidden",
        InvariantClass.STRUCTURAL,
        1,
    )
    assert violation.reason == "hypotheses/c says forbidden"
    assert result.trace.cycles[0].promoted == ("hypotheses/a", "hypotheses/d")
    assert [f.promotion.clock for f in result.context.get(H)] == [1, 2]


async def test_structural_violation_by_inputs_rolls_all_inputs_back() -> None:
    engine = Engine()
    engine.register_invariant(NoForbiddenContent())
    result = await engine.run(inputs=[fact(H, "ok"), fact(H, "x", "forbidden")])
    assert len(result.context) == 0
    [violation] = result.trace.input_violations
    assert violation.cycle == 0
    assert result.violations == (violation,)


async def test_semantic_violation_blocks_convergence_until_repaired() -> None:
    engine = Engine()
    engine.register_invariant(Needs("fix", InvariantClass.SEMANTIC))
    engine.register_suggestor(ProposesOnce("early", [fact(H, "a")], at=1))
    engine.register_suggestor(ProposesOnce("repair", [fact(H, "fix")], at=2))
    result = await engine.run()
    assert result.converged
    assert [v.cycle for v in result.violations] == [1]


async def test_semantic_violation_at_the_fixed_point_ends_invariant_violated() -> None:
    engine = Engine()
    engine.register_invariant(Needs("never", InvariantClass.SEMANTIC))
    engine.register_suggestor(ProposesOnce("a", [fact(H, "a")]))
    result = await engine.run()
    assert result.stop_reason is StopReason.INVARIANT_VIOLATED
    assert result.detail == "needs-never: never is missing"
    assert result.context.find(H, "a") is not None
    with pytest.raises(InvariantViolationError) as caught:
        result.raise_for_status()
    assert {v.invariant for v in caught.value.violations} == {"needs-never"}


async def test_acceptance_is_checked_at_the_fixed_point() -> None:
    engine = Engine()
    engine.register_invariant(Needs("a", InvariantClass.ACCEPTANCE))
    assert (await engine.run()).stop_reason is StopReason.INVARIANT_VIOLATED
    engine.register_suggestor(ProposesOnce("a", [fact(H, "a")]))
    assert (await engine.run()).converged


async def test_all_violations_are_reported_not_only_the_first() -> None:
    engine = Engine()
    engine.register_invariant(Needs("x", InvariantClass.ACCEPTANCE))
    engine.register_invariant(Needs("y", InvariantClass.ACCEPTANCE))
    result = await engine.run()
    assert result.detail == "needs-x: x is missing; needs-y: y is missing"
    assert len(result.trace.cycles[-1].violations) == 2


async def test_an_invariant_that_raises_counts_as_violated() -> None:
    class Raises:
        name = "raises"
        invariant_class = InvariantClass.ACCEPTANCE

        def check(self, ctx: Context, /) -> InvariantResult:
            raise KeyError("boom")

    engine = Engine()
    engine.register_invariant(Raises())
    result = await engine.run()
    assert result.stop_reason is StopReason.INVARIANT_VIOLATED
    assert result.detail.startswith("raises: check() raised KeyError: 'boom' at ")


def test_register_invariant_refuses_a_duplicate_name_and_a_missing_member() -> None:
    engine = Engine()
    engine.register_invariant(NoForbiddenContent())
    with pytest.raises(ConfigurationError, match="'no-forbidden' is already registered"):
        engine.register_invariant(NoForbiddenContent())

    class NoCheck:
        name = "x"
        invariant_class = InvariantClass.SEMANTIC

    with pytest.raises(ConfigurationError, match="missing member 'check'"):
        engine.register_invariant(NoCheck())  # pyright: ignore[reportArgumentType]


async def test_pack_invariants_apply_only_while_the_pack_is_active() -> None:
    engine = Engine()
    ids = engine.register_pack(
        "strict",
        suggestors=[ProposesOnce("a", [fact(H, "a")])],
        invariants=[Needs("never", InvariantClass.ACCEPTANCE)],
    )
    engine.register_pack("loose", suggestors=[ProposesOnce("b", [fact(H, "b")])])
    assert ids == (0,)
    assert (await engine.run()).stop_reason is StopReason.INVARIANT_VIOLATED
    engine.set_active_packs(["loose"])
    result = await engine.run()
    assert result.converged
    assert [f.id for f in result.context.get(H)] == ["b"]


async def test_an_invariant_class_given_as_its_string_value_works() -> None:
    class Loose:
        name = "loose"
        invariant_class = "acceptance"

        def check(self, ctx: Context, /) -> InvariantResult:
            return InvariantResult.violated("always")

    engine = Engine()
    engine.register_invariant(Loose())  # pyright: ignore[reportArgumentType]
    result = await engine.run()
    assert result.stop_reason is StopReason.INVARIANT_VIOLATED
    assert result.violations[0].invariant_class is InvariantClass.ACCEPTANCE
