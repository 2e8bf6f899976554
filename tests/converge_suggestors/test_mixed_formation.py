"""Rule, policy, assignment pack, retrieval and validation in one loop, with the real libraries.

Assignment problems arrive as signals; the pack solves them (promoting the plan within budget,
escalating the one over budget to the ValidationAgent); a rule turns every plan into a
spending constraint; Cedar decides each spend; meanwhile MiniLM retrieval answers questions
about competitors. The run converges, and two runs give the same Merkle root.
"""

import pytest
from pydantic import JsonValue

from converge import ContextKey, ConvergeResult, Engine, Fact, ProposedFact
from converge_suggestors import (
    AssignmentPack,
    EntityUid,
    MiniLmEmbedder,
    PackSuggestor,
    PolicyRequest,
    PolicySuggestor,
    RetrievalSuggestor,
    RuleSuggestor,
    ValidationAgent,
)

pytestmark = pytest.mark.slow  # every test here runs the real MiniLM model

K = ContextKey

SPEND_POLICIES = """
@id("small-spend")
permit(principal == User::"planner", action == Action::"spend", resource)
when { context.amount <= 8 };

@id("never-over-20")
forbid(principal, action == Action::"spend", resource)
when { context.amount > 20 };
"""

COMPETITORS = {
    "acme": "Acme sells cheap cloud storage for small businesses.",
    "globex": "Globex builds industrial robots for car factories.",
    "initech": "Initech offers payroll software with tax filing.",
    "umbrella": "Umbrella runs a chain of pharmacies and clinics.",
}

QUESTIONS = {
    "storage": "Who competes with us on online file backup?",
    "salaries": "Which rival helps companies pay their employees?",
}

PROBLEMS: dict[str, JsonValue] = {
    "q3": {  # optimum 9: over the budget of 8, escalated, then validated
        "rows": ["ada", "ben", "cy"],
        "columns": ["backend", "frontend", "ops"],
        "costs": [[3, 5, 9], [None, 4, 2], [2, 8, None]],
    },
    "q4": {  # optimum 5: within budget, promoted by the pack
        "rows": ["ada", "ben"],
        "columns": ["backend", "ops", "frontend"],
        "costs": [[1, 7, 6], [8, 4, 9]],
    },
    "broken": {"rows": ["ada", "ben"], "columns": ["ops"], "costs": [[1], [2, 3]]},
}


def inputs() -> list[ProposedFact]:
    facts = [
        ProposedFact(
            key=K.SIGNALS, id=ident, content=f"staffing {ident}", payload=payload, provenance="hr"
        )
        for ident, payload in PROBLEMS.items()
    ]
    facts += [
        ProposedFact(key=K.COMPETITORS, id=ident, content=text, provenance="analyst")
        for ident, text in COMPETITORS.items()
    ]
    facts += [
        ProposedFact(key=K.SEEDS, id=ident, content=text, provenance="ceo")
        for ident, text in QUESTIONS.items()
    ]
    return facts


def is_plan(fact: Fact) -> bool:
    return isinstance(fact.payload, dict) and "total_cost" in fact.payload


def spend_constraint(fact: Fact) -> ProposedFact:
    assert isinstance(fact.payload, dict)
    return ProposedFact(
        key=K.CONSTRAINTS,
        id=f"spend:{fact.id}",
        content=f"spend for {fact.id}",
        payload={"amount": fact.payload["total_cost"], "plan": fact.id},
        provenance="budget-rule",
    )


def spend_request(fact: Fact) -> PolicyRequest | None:
    payload = fact.payload
    if not isinstance(payload, dict) or "amount" not in payload:
        return None
    return PolicyRequest(
        principal=EntityUid(type="User", id="planner"),
        action=EntityUid(type="Action", id="spend"),
        resource=EntityUid(type="Plan", id=str(payload["plan"])),
        context={"amount": payload["amount"]},
    )


def engine(embedder: MiniLmEmbedder) -> Engine:
    engine = Engine()
    engine.register_suggestor(
        RuleSuggestor(
            "budget-rule",
            dependencies=[K.STRATEGIES],
            when=is_plan,
            then=spend_constraint,
            writes=[K.CONSTRAINTS],
        )
    )
    engine.register_suggestor(
        PolicySuggestor(SPEND_POLICIES, watch=K.CONSTRAINTS, request=spend_request)
    )
    engine.register_suggestor(PackSuggestor(AssignmentPack(budget=8), K.SIGNALS, K.STRATEGIES))
    engine.register_suggestor(RetrievalSuggestor(K.COMPETITORS, K.SEEDS, embedder=embedder, k=1))
    engine.register_suggestor(ValidationAgent())
    return engine


def decision(result: ConvergeResult, ident: str) -> object:
    fact = result.context.find(K.EVALUATIONS, ident)
    assert fact is not None, ident
    assert isinstance(fact.payload, dict)
    return fact.payload["decision"], fact.payload["policies"]


async def test_mixed_formation_converges_through_every_battery(minilm: MiniLmEmbedder) -> None:
    result = await engine(minilm).run(inputs=inputs())
    assert result.converged, result.detail
    context = result.context

    q4 = context.find(K.STRATEGIES, "assignment:q4")
    assert q4 is not None
    assert q4.promotion.suggestor == "pack:assignment:signals->strategies"
    q3 = context.find(K.STRATEGIES, "assignment:q3")
    assert q3 is not None
    assert q3.promotion.suggestor == "ValidationAgent"
    assert context.find(K.PROPOSALS, "assignment:q3") is not None
    broken = context.find(K.DIAGNOSTIC, "assignment:broken:failed")
    assert broken is not None
    assert "the matrix is ragged" in broken.content

    assert decision(result, "policy:spend:assignment:q4") == ("allow", ["small-spend"])
    assert decision(result, "policy:spend:assignment:q3") == ("deny", [])
    evaluation = context.find(K.EVALUATIONS, "policy:spend:assignment:q3")
    assert evaluation is not None
    assert evaluation.evidence == ("constraints/spend:assignment:q3",)

    assert {fact.id for fact in context.get(K.HYPOTHESES)} == {
        "retrieval:storage:acme",
        "retrieval:salaries:initech",
    }
    assert result.rejections == ()
    assert not any(e.outcome != "ok" for c in result.trace.cycles for e in c.executions)


async def test_mixed_formation_gives_the_same_root_on_two_runs(minilm: MiniLmEmbedder) -> None:
    first = await engine(minilm).run(inputs=inputs())
    second = await engine(minilm).run(inputs=inputs())
    assert first.converged
    assert second.converged
    assert first.integrity.merkle_root == second.integrity.merkle_root
    assert first.cycles == second.cycles
    assert [f.digest for f in first.context.facts()] == [f.digest for f in second.context.facts()]
