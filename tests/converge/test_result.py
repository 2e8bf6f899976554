"""`ConvergeResult.ok` and `raise_for_status`: a run that converged with failures is not silent.

A failed call, a payload that does not fit its typed key's model, a proposal for a key
nobody declared, an effect a structural invariant rolled back: each leaves `ok` false, makes
`raise_for_status()` raise `SuggestorFailuresError` (unless `allow_failures=True`), and gives
the command's exit status 9, from one definition (`_shortfall.Shortfall`). A proposal the
policy turned down, or a human rejected, is not a failure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from pydantic import BaseModel

from converge import (
    AgentEffect,
    Budget,
    BudgetExhaustedError,
    Context,
    ContextKey,
    ConvergeResult,
    Engine,
    GateDecision,
    HitlPolicy,
    InvariantClass,
    InvariantResult,
    Key,
    PromotionPolicy,
    ProposedFact,
    RunError,
    RunRecord,
    StopReason,
    SuggestorFailuresError,
)
from converge._cli._output import FAILURES, exit_status


class Price(BaseModel, frozen=True):
    """The model of the typed key `test.prices`."""

    amount: int


PRICES = Key("test.prices", payload=Price)


class Proposer:
    """Once a seed is there, proposes what `make()` returns (or raises what it raises)."""

    name = "proposer"
    dependencies = (ContextKey.SEEDS,)

    def __init__(self, make: Callable[[], Sequence[ProposedFact]]) -> None:
        self.make = make
        self.calls = 0

    def accepts(self, ctx: Context, /) -> bool:
        return self.calls == 0

    async def execute(self, ctx: Context, /) -> AgentEffect:
        self.calls += 1
        return AgentEffect.with_proposals(self.make())


class NoMoon:
    """STRUCTURAL: no hypothesis mentions the Moon."""

    name = "no-moon"
    invariant_class = InvariantClass.STRUCTURAL

    def check(self, ctx: Context, /) -> InvariantResult:
        for fact in ctx.get(ContextKey.HYPOTHESES):
            if "Moon" in fact.content:
                return InvariantResult.violated(f"{fact.ref} mentions the Moon")
        return InvariantResult.ok()


def seed() -> ProposedFact:
    return ProposedFact(key=ContextKey.SEEDS, id="s", content="go", provenance="test")


def hypothesis(content: str = "fine") -> ProposedFact:
    return ProposedFact(key=ContextKey.HYPOTHESES, id="h", content=content, provenance="p")


def raise_runtime() -> Sequence[ProposedFact]:
    raise RuntimeError("model down")


def unknown_key() -> Sequence[ProposedFact]:
    return [ProposedFact(key="test.nobody-declared", id="x", content="x", provenance="p")]


def constructed_unknown_key() -> Sequence[ProposedFact]:
    fields = hypothesis().model_dump()
    fields["key"] = "test.nobody-declared"
    return [ProposedFact.model_construct(**fields)]


def misfit_payload() -> Sequence[ProposedFact]:
    return [
        ProposedFact(
            key=PRICES, id="p", content="a price", provenance="p", payload={"amount": "lots"}
        )
    ]


def run(make: Callable[[], Sequence[ProposedFact]], **options: object) -> ConvergeResult:
    engine = Engine(inputs=[seed()], **options)  # pyright: ignore[reportArgumentType]
    engine.register_suggestor(Proposer(make))
    engine.register_invariant(NoMoon())
    return engine.run_sync()


FAILING = {
    "a call that raised": raise_runtime,
    "a payload that does not fit its key's model": misfit_payload,
    "a key nobody declared": unknown_key,
    "a key nobody declared, validation skipped": constructed_unknown_key,
    "an effect rolled back": lambda: [hypothesis("the Moon is cheese")],
}


@pytest.mark.parametrize("make", FAILING.values(), ids=FAILING.keys())
def test_raise_for_status_raises_suggestor_failures_when_a_converged_run_has_failures(
    make: Callable[[], Sequence[ProposedFact]],
) -> None:
    result = run(make)
    assert result.converged
    assert not result.ok
    assert not result.clean
    with pytest.raises(SuggestorFailuresError) as caught:
        result.raise_for_status()
    error = caught.value
    assert isinstance(error, RunError)
    assert error.result is result
    assert str(error).startswith(f"run {result.run_id} converged with failures: ")
    assert "\n" not in str(error)
    assert (error.failures, error.invalid_proposals, error.rolled_back) == (
        result.failures,
        result.invalid_proposals,
        result.rolled_back,
    )
    assert result.raise_for_status(allow_failures=True) is result
    record = RunRecord.of(result)
    assert exit_status(record) == FAILURES
    assert exit_status(record, allow_failures=True) == 0


def test_raise_for_status_names_the_first_failure_of_each_kind() -> None:
    failed = run(raise_runtime)
    with pytest.raises(
        SuggestorFailuresError,
        match=r"1 call failed and not made good \(first: "
        r"'proposer', execute, cycle 1: RuntimeError: model down\)$",
    ):
        failed.raise_for_status()
    misfit = run(misfit_payload)
    (rejection,) = misfit.invalid_proposals
    assert rejection.reason.startswith("payload does not fit Price, the model of key test.prices")
    with pytest.raises(
        SuggestorFailuresError,
        match=r"1 invalid proposal \(first: test.prices/p "
        r"from 'proposer', cycle 1: payload does not fit Price",
    ):
        misfit.raise_for_status()


POLICY = {
    "content over the policy's limit": (
        lambda: [hypothesis("far too long for the limit")],
        {"policy": PromotionPolicy(max_content_bytes=5)},
    ),
    "a conflict the engine rejects": (
        lambda: [seed().model_copy(update={"content": "other"})],
        {"on_conflict": "reject"},
    ),
}


@pytest.mark.parametrize(("make", "options"), POLICY.values(), ids=POLICY.keys())
def test_raise_for_status_returns_a_run_whose_proposals_the_policy_refused(
    make: Callable[[], Sequence[ProposedFact]], options: dict[str, object]
) -> None:
    result = run(make, **options)
    assert result.rejections
    assert result.invalid_proposals == ()
    assert result.ok
    assert result.raise_for_status() is result
    assert exit_status(RunRecord.of(result)) == 0


def test_raise_for_status_returns_a_run_a_human_rejected_a_proposal_of() -> None:
    engine = Engine(inputs=[seed()], hitl=HitlPolicy(confidence_below=0.5))
    engine.register_suggestor(
        Proposer(lambda: [hypothesis().model_copy(update={"confidence": 0.2})])
    )
    paused = engine.run_sync()
    assert paused.checkpoint is not None
    (gate,) = paused.pending
    decision = GateDecision.reject(gate.gate_id, by="ana", reason="not now")
    result = engine.resume_sync(paused.checkpoint, [decision])
    assert result.ok
    assert result.raise_for_status() is result


def test_raise_for_status_prefers_the_stop_reason_over_failures() -> None:
    result = run(lambda: [hypothesis(), *misfit_payload()], budget=Budget(max_cycles=1))
    assert result.stop_reason is StopReason.CYCLE_BUDGET_EXHAUSTED
    assert result.invalid_proposals
    assert not result.ok
    with pytest.raises(BudgetExhaustedError):
        result.raise_for_status(allow_failures=True)
    with pytest.raises(BudgetExhaustedError):
        result.raise_for_status()
