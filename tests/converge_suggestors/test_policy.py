"""PolicySuggestor: a real Cedar policy set decides facts and names the determining policies."""

import sys

import pytest

from converge import (
    AgentEffect,
    Context,
    ContextKey,
    ConvergeResult,
    Engine,
    Fact,
    HitlPolicy,
    ProposedFact,
    StopReason,
    Suggestor,
)
from converge_suggestors import EntityUid, PolicyDecision, PolicyRequest, PolicySuggestor

SIGNALS = ContextKey.SIGNALS
EVALUATIONS = ContextKey.EVALUATIONS
CONSTRAINTS = ContextKey.CONSTRAINTS
DIAGNOSTIC = ContextKey.DIAGNOSTIC

POLICIES = """
@id("managers-approve-small")
permit(principal, action == Action::"approve", resource)
when { context.role == "manager" && context.amount <= 10000 };

@id("finance-approves-any")
permit(principal in Group::"finance", action == Action::"approve", resource);

@id("no-self-approval")
forbid(principal, action == Action::"approve", resource)
when { context.requester == context.approver };

@id("frozen-budget")
forbid(principal, action, resource)
when { context has frozen && context.frozen };
"""

ENTITIES: list[dict[str, object]] = [
    {"uid": {"type": "Group", "id": "finance"}, "attrs": {}, "parents": []},
    {
        "uid": {"type": "User", "id": "fay"},
        "attrs": {},
        "parents": [{"type": "Group", "id": "finance"}],
    },
]


def approval(fact: Fact | ProposedFact) -> PolicyRequest | None:
    """Expense facts (a dict payload with an approver) become approval requests."""
    payload = fact.payload
    if not isinstance(payload, dict) or "approver" not in payload:
        return None
    return PolicyRequest(
        principal=EntityUid(type="User", id=str(payload["approver"])),
        action='Action::"approve"',
        resource=EntityUid(type="Expense", id=fact.id),
        context=payload,
    )


def expense(ident: str, **payload: object) -> ProposedFact:
    fields: dict[str, object] = {"approver": "ann", "requester": "bob", "role": "manager"}
    fields.update(payload)
    return ProposedFact.model_validate(
        {
            "key": SIGNALS,
            "id": ident,
            "content": f"expense {ident}",
            "provenance": "input:erp",
            "payload": fields,
        }
    )


def policy(**options: object) -> PolicySuggestor:
    return PolicySuggestor(
        POLICIES,
        watch=SIGNALS,
        request=approval,
        entities=ENTITIES,
        **options,  # pyright: ignore[reportArgumentType]
    )


async def run(*inputs: ProposedFact, suggestor: PolicySuggestor | None = None) -> ConvergeResult:
    engine = Engine()
    engine.register_suggestor(suggestor or policy())
    result = await engine.run(inputs=list(inputs))
    assert result.converged, result.detail
    return result


def test_policy_suggestor_shape() -> None:
    suggestor = policy()
    assert isinstance(suggestor, Suggestor)
    assert suggestor.name == "policy"
    assert tuple(suggestor.dependencies) == (SIGNALS,)
    assert tuple(suggestor.writes) == (EVALUATIONS, DIAGNOSTIC)
    assert repr(suggestor) == "PolicySuggestor('policy', watch=signals, output_key=evaluations)"


async def test_policy_suggestor_allows_with_the_permit_as_evidence() -> None:
    result = await run(expense("e1", amount=500))
    fact = result.context.find(EVALUATIONS, "policy:e1")
    assert fact is not None
    assert fact.payload == {
        "decision": "allow",
        "policies": ["managers-approve-small"],
        "errors": [],
        "request": {
            "principal": {"type": "User", "id": "ann"},
            "action": 'Action::"approve"',
            "resource": {"type": "Expense", "id": "e1"},
            "context": {"approver": "ann", "requester": "bob", "role": "manager", "amount": 500},
        },
    }
    assert fact.evidence == ("signals/e1", "policy:managers-approve-small")
    assert fact.provenance == "policy"
    assert fact.content == (
        'Cedar allows User::"ann" Action::"approve" on Expense::"e1" for signals/e1 '
        "(permitted by managers-approve-small)"
    )


async def test_policy_suggestor_denies_with_the_forbid_as_evidence() -> None:
    result = await run(expense("e2", amount=500, requester="ann"))
    fact = result.context.find(EVALUATIONS, "policy:e2")
    assert fact is not None
    assert isinstance(fact.payload, dict)
    assert (fact.payload["decision"], fact.payload["policies"]) == ("deny", ["no-self-approval"])
    assert fact.evidence == ("signals/e2", "policy:no-self-approval")
    assert fact.content.endswith("(forbidden by no-self-approval)")


async def test_policy_suggestor_denies_by_default_when_no_permit_applies() -> None:
    result = await run(expense("e3", amount=50_000))
    fact = result.context.find(EVALUATIONS, "policy:e3")
    assert fact is not None
    assert isinstance(fact.payload, dict)
    assert (fact.payload["decision"], fact.payload["policies"]) == ("deny", [])
    assert fact.evidence == ("signals/e3",)
    assert fact.content.endswith("(no policy permits it)")


async def test_policy_suggestor_reads_the_entity_hierarchy() -> None:
    result = await run(expense("e4", amount=50_000, approver="fay", role="analyst"))
    fact = result.context.find(EVALUATIONS, "policy:e4")
    assert fact is not None
    assert isinstance(fact.payload, dict)
    assert (fact.payload["decision"], fact.payload["policies"]) == (
        "allow",
        ["finance-approves-any"],
    )


def test_decide_lists_every_determining_policy_sorted_and_the_policies_that_erred() -> None:
    request = approval(expense("e5", amount=500, frozen=True, requester="ann"))
    assert request is not None
    assert policy().decide(request) == PolicyDecision(
        decision="deny", policies=("frozen-budget", "no-self-approval")
    )
    broken = PolicyRequest(
        principal='User::"ann"',
        action='Action::"approve"',
        resource='Expense::"e6"',
        context={"role": "manager", "amount": "a lot", "requester": "bob", "approver": "ann"},
    )
    decision = policy().decide(broken)
    assert decision.decision == "deny"
    assert not decision.allowed
    assert decision.policies == ()
    assert len(decision.errors) == 1
    assert "managers-approve-small" in decision.errors[0] or "policy0" in decision.errors[0]


def test_decide_names_unannotated_policies_by_their_position() -> None:
    suggestor = PolicySuggestor(
        "permit(principal, action, resource) when { context.ok };",
        watch=SIGNALS,
        request=approval,
    )
    request = PolicyRequest(
        principal='User::"a"', action='Action::"read"', resource='Doc::"d"', context={"ok": True}
    )
    assert suggestor.decide(request) == PolicyDecision(decision="allow", policies=("policy0",))


def test_decide_passes_whole_floats_as_integers_and_refuses_fractions() -> None:
    request = approval(expense("e1", amount=500.0))
    assert request is not None
    assert policy().decide(request).policies == ("managers-approve-small",)
    fractional = approval(expense("e2", amount=500.5, tags=[{"weight": 0.5}]))
    assert fractional is not None
    with pytest.raises(
        ValueError,
        match=r"context.amount is 500.5, but Cedar numbers are whole \(64-bit integers\)",
    ):
        policy().decide(fractional)
    nested = PolicyRequest(
        principal='User::"a"', action='Action::"x"', resource='R::"r"', context={"t": [{"w": 0.5}]}
    )
    with pytest.raises(ValueError, match=r"context.t\[0\].w is 0.5"):
        policy().decide(nested)


def test_decide_raises_when_cedar_cannot_build_the_request() -> None:
    request = PolicyRequest(
        principal="not an entity", action='Action::"approve"', resource='R::"r"'
    )
    with pytest.raises(ValueError, match="Cedar reached no decision: failed to build request"):
        policy().decide(request)


async def test_policy_suggestor_writes_constraints_when_asked() -> None:
    suggestor = policy(output_key=CONSTRAINTS, name="spend-policy")
    result = await run(expense("e1", amount=500), suggestor=suggestor)
    fact = result.context.find(CONSTRAINTS, "spend-policy:e1")
    assert fact is not None
    assert fact.provenance == "spend-policy"
    assert not result.context.has(EVALUATIONS)


async def test_policy_suggestor_skips_facts_its_mapping_does_not_cover() -> None:
    note = ProposedFact(key=SIGNALS, id="note", content="just a note", provenance="input")
    result = await run(note)
    assert not result.context.has(EVALUATIONS)
    assert not result.context.has(DIAGNOSTIC)
    assert not policy().accepts(result.context)


async def test_policy_suggestor_records_a_request_cedar_cannot_evaluate() -> None:
    def bad_entity(fact: Fact) -> PolicyRequest:
        return PolicyRequest(principal="ann", action='Action::"approve"', resource='R::"r"')

    suggestor = PolicySuggestor(POLICIES, watch=SIGNALS, request=bad_entity)
    result = await run(expense("e1", amount=5), suggestor=suggestor)
    failure = result.context.find(DIAGNOSTIC, "policy:e1:failed")
    assert failure is not None
    assert failure.content.startswith(
        "policy policy could not decide signals/e1: Cedar reached no decision: "
        "failed to build request"
    )
    assert failure.evidence == ("signals/e1",)
    assert not result.context.has(EVALUATIONS)


async def test_policy_suggestor_records_a_mapping_that_raises() -> None:
    def broken(fact: Fact) -> PolicyRequest:
        raise KeyError("approver")

    suggestor = PolicySuggestor(POLICIES, watch=SIGNALS, request=broken)
    result = await run(expense("e1", amount=5), suggestor=suggestor)
    failure = result.context.find(DIAGNOSTIC, "policy:e1:failed")
    assert failure is not None
    assert failure.content == (
        "policy policy could not decide signals/e1: the request mapping raised KeyError: 'approver'"
    )


async def test_policy_suggestor_decides_each_fact_once_from_the_context() -> None:
    first = await run(expense("e1", amount=500), expense("e2", amount=500, requester="ann"))
    assert first.context.count(EVALUATIONS) == 2
    suggestor = policy()
    assert not suggestor.accepts(first.context)
    engine = Engine()
    engine.register_suggestor(suggestor)
    again = await engine.run(context=first.context, inputs=[expense("e3", amount=1)])
    assert again.converged
    assert [fact.id for fact in again.context.get(EVALUATIONS)] == [
        "policy:e1",
        "policy:e2",
        "policy:e3",
    ]
    executions = [e for cycle in again.trace.cycles for e in cycle.executions]
    assert [e.proposals for e in executions] == [1]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"output_key": ContextKey.STRATEGIES}, "output_key must be constraints or evaluations"),
        ({"watch": EVALUATIONS}, "watch and output_key must differ"),
    ],
)
def test_policy_suggestor_refuses_bad_keys(options: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {"watch": SIGNALS, "request": approval}
    fields.update(options)
    with pytest.raises(ValueError, match=message):
        PolicySuggestor(POLICIES, **fields)  # pyright: ignore[reportArgumentType]


def test_policy_suggestor_refuses_policies_that_do_not_parse() -> None:
    with pytest.raises(ValueError, match="'policy': the policies do not parse"):
        PolicySuggestor("permit(principal,", watch=SIGNALS, request=approval)


def test_policy_suggestor_refuses_entities_that_do_not_parse() -> None:
    with pytest.raises(ValueError, match="the entities do not parse"):
        PolicySuggestor(POLICIES, watch=SIGNALS, request=approval, entities=[{"uid": 3}])


def test_entity_uid_prints_in_cedar_syntax() -> None:
    assert str(EntityUid(type="User", id='a "quoted" name')) == 'User::"a \\"quoted\\" name"'


def test_predicate_gates_what_cedar_does_not_allow() -> None:
    gate = HitlPolicy(predicate=policy().predicate(approval))
    assert not gate.gates(expense("ok", amount=500))
    assert gate.gates(expense("self", amount=500, requester="ann"))
    assert gate.gates(expense("big", amount=50_000))
    note = ProposedFact(key=SIGNALS, id="note", content="not an expense", provenance="x")
    assert not gate.gates(note)


def test_predicate_fails_closed_when_cedar_cannot_decide() -> None:
    predicate = policy().predicate(
        lambda p: PolicyRequest(principal="??", action='Action::"approve"', resource='R::"r"')
    )
    with pytest.raises(ValueError, match="Cedar reached no decision"):
        predicate(expense("e1"))
    assert HitlPolicy(predicate=predicate).gates(expense("e1"))


class Approver:
    """Proposes approval strategies straight from expense signals."""

    name = "approver"
    dependencies = (SIGNALS,)

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.has(SIGNALS)

    async def execute(self, ctx: Context, /) -> AgentEffect:
        return AgentEffect.with_proposals(
            ProposedFact(
                key=ContextKey.STRATEGIES,
                id=f"pay:{fact.id}",
                content=f"pay {fact.id}",
                payload=fact.payload,
                provenance=self.name,
            )
            for fact in ctx.get(SIGNALS)
        )


async def test_predicate_holds_denied_proposals_for_a_human() -> None:
    def pay_request(proposal: ProposedFact) -> PolicyRequest | None:
        request = approval(proposal)
        if request is None:
            return None
        return request.model_copy(
            update={"resource": EntityUid(type="Expense", id=proposal.id.removeprefix("pay:"))}
        )

    engine = Engine(hitl=HitlPolicy(predicate=policy().predicate(pay_request)))
    engine.register_suggestor(Approver())
    result = await engine.run(
        inputs=[expense("e1", amount=500), expense("e2", amount=500, requester="ann")]
    )
    assert result.stop_reason is StopReason.AWAITING_HUMAN
    assert [fact.id for fact in result.context.get(ContextKey.STRATEGIES)] == ["pay:e1"]
    assert [request.proposal.id for request in result.pending] == ["pay:e2"]


def test_policy_suggestor_names_the_extra_when_cedarpy_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "cedarpy", None)
    with pytest.raises(
        ImportError,
        match=r"install the 'policy' extra \(pip install \"converge-engine\[policy\]\"\)",
    ):
        PolicySuggestor(POLICIES, watch=SIGNALS, request=approval)
