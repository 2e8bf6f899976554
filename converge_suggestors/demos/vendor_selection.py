"""Vendor selection: four evaluators in parallel, a consensus, a Cedar policy gate, a human.

The inputs are the vendors' bids (`seeds/vendor:{id}`, each with a `Vendor` as payload:
price, certifications, risk indicators and delivery time). Then:

1. Cycle 1: four evaluators (price, compliance, risk, timeline), each a
   [`RuleSuggestor`][converge_suggestors.RuleSuggestor], score every vendor from 0 to 100
   in the same cycle: `evaluations/{criterion}:{vendor}`.
2. Cycle 2: once every vendor has all four scores, the `consensus` ranks the vendors by
   their weighted score (`WEIGHTS`) and recommends the best one:
   `strategies/recommendation:{vendor}`.
3. Cycle 3: the `policy-gate`, a [`PolicySuggestor`][converge_suggestors.PolicySuggestor],
   checks the recommendation against the Cedar policy set `POLICIES` (an ISO-27001
   certification is required, the annual cost may not exceed `SPEND_LIMIT`, no high-risk
   vendor) and records its decision: `constraints/policy-gate:recommendation:{vendor}`.
   The default top-ranked vendor, `dune`, costs more than the limit and is denied, so in
   cycle 4 the consensus recommends the next one, `acme`, which cycle 5 allows.
4. Cycle 6: the `commitment` suggestor commits to the allowed vendor
   (`strategies/commitment`). Its spend is above `REVIEW_ABOVE`, so the HITL policy holds it
   and the run pauses `AWAITING_HUMAN` with one gate, `gate:6:strategies/commitment`.
5. Approved on resume, the commitment becomes a fact and the run converges in cycle 7.

The ACCEPTANCE invariant `commitment-is-allowed` requires any commitment to name a vendor
whose recommendation the policy allowed, and to cite that decision.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar, Final, Literal, final

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from converge import (
    Context,
    ContextKey,
    Fact,
    Formation,
    HitlPolicy,
    InvariantClass,
    InvariantResult,
    ProposedFact,
    Suggestor,
    suggestor,
)
from converge_suggestors import EntityUid, PolicyRequest, PolicySuggestor, RuleSuggestor

__all__ = [
    "CERTIFICATION_POINTS",
    "CRITERIA",
    "DEADLINE_WEEKS",
    "POLICIES",
    "POLICY_GATE",
    "PRICE_CEILING",
    "PRICE_FLOOR",
    "REQUIRED_CERTIFICATION",
    "REVIEW_ABOVE",
    "SPEND_LIMIT",
    "VENDORS",
    "WEIGHTS",
    "Criterion",
    "Vendor",
    "build_formation",
    "formation",
    "needs_approval",
    "recommendation_request",
]

Criterion = Literal["price", "compliance", "risk", "timeline"]
"""What a vendor is scored on."""

CRITERIA: Final[tuple[Criterion, ...]] = ("price", "compliance", "risk", "timeline")
"""The four criteria, in the order of the evaluators."""
WEIGHTS: Final[Mapping[Criterion, int]] = {
    "price": 35,
    "compliance": 25,
    "risk": 25,
    "timeline": 15,
}
"""How much each criterion counts in the consensus's weighted score (percent)."""
PRICE_FLOOR: Final = 200_000
"""An annual cost at or below this scores 100 on price."""
PRICE_CEILING: Final = 800_000
"""An annual cost at or above this scores 0 on price; in between, the score is linear."""
CERTIFICATION_POINTS: Final[Mapping[str, int]] = {"ISO-27001": 50, "SOC2": 30, "GDPR": 20}
"""The compliance score: the points of every certification the vendor holds."""
DEADLINE_WEEKS: Final = 12
"""Delivery later than this scores 0 on timeline; 4 weeks or less scores 100, minus 8 a week."""
REQUIRED_CERTIFICATION: Final = "ISO-27001"
"""The certification the policy requires of a recommended vendor."""
SPEND_LIMIT: Final = 500_000
"""The policy forbids recommending a vendor whose annual cost is above this."""
REVIEW_ABOVE: Final = 250_000
"""A commitment whose annual spend is above this waits for a human."""
POLICY_GATE: Final = "policy-gate"
"""The name of the policy suggestor, and the prefix of its decisions' ids."""

POLICIES: Final = f"""\
@id("consensus-recommends")
permit(principal == Agent::"consensus", action == Action::"recommend", resource);

@id("certification-required")
forbid(principal, action == Action::"recommend", resource)
unless {{ context.certifications.contains("{REQUIRED_CERTIFICATION}") }};

@id("spend-limit")
forbid(principal, action == Action::"recommend", resource)
when {{ context.annual_cost > {SPEND_LIMIT} }};

@id("no-high-risk-vendor")
forbid(principal, action == Action::"recommend", resource)
when {{ context.risk_level == "high" }};
"""
"""The Cedar policy set the `policy-gate` checks each recommendation against."""

_VENDOR_PREFIX: Final = "vendor:"
_RECOMMENDATION_PREFIX: Final = "recommendation:"
_COMMITMENT_ID: Final = "commitment"
_NO_VENDOR_ID: Final = "no-eligible-vendor"
_RATING_PENALTY: Final[Mapping[str, int]] = {"A": 0, "B": 15, "C": 40}


@final
class Vendor(BaseModel, frozen=True):
    """A vendor's bid, the payload of the input fact `seeds/vendor:{id}`."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9-]+$")
    """A short id, used in fact ids."""
    name: str
    """The vendor's name."""
    annual_cost: int = Field(gt=0)
    """What the contract costs a year, in whole currency units."""
    certifications: tuple[str, ...] = ()
    """The compliance certifications the vendor holds."""
    financial_rating: Literal["A", "B", "C"] = "A"
    """A credit agency's rating of the vendor's finances (A best)."""
    incidents_last_year: int = Field(default=0, ge=0)
    """Security or service incidents reported in the last year."""
    years_in_business: int = Field(default=10, ge=0)
    """How long the vendor has been trading."""
    delivery_weeks: int = Field(gt=0)
    """How many weeks until the service is delivered."""


VENDORS: Final[tuple[Vendor, ...]] = (
    Vendor(
        id="acme",
        name="Acme Cloud",
        annual_cost=420_000,
        certifications=("ISO-27001", "SOC2"),
        financial_rating="A",
        incidents_last_year=1,
        years_in_business=12,
        delivery_weeks=8,
    ),
    Vendor(
        id="birch",
        name="Birch Systems",
        annual_cost=310_000,
        certifications=("SOC2", "GDPR"),
        financial_rating="B",
        incidents_last_year=0,
        years_in_business=2,
        delivery_weeks=6,
    ),
    Vendor(
        id="cobalt",
        name="Cobalt Data",
        annual_cost=380_000,
        certifications=("ISO-27001", "SOC2", "GDPR"),
        financial_rating="B",
        incidents_last_year=3,
        years_in_business=8,
        delivery_weeks=14,
    ),
    Vendor(
        id="dune",
        name="Dune Networks",
        annual_cost=560_000,
        certifications=("ISO-27001", "SOC2", "GDPR"),
        financial_rating="A",
        incidents_last_year=0,
        years_in_business=20,
        delivery_weeks=4,
    ),
)
"""The default bids: `dune` ranks first but is over the spend limit; `acme` is next."""


# The evaluators


def _is_vendor(fact: Fact) -> bool:
    return fact.id.startswith(_VENDOR_PREFIX)


def _evaluation(
    criterion: Criterion, vendor: Vendor, score: int, why: str, **extra: JsonValue
) -> ProposedFact:
    return ProposedFact(
        key=ContextKey.EVALUATIONS,
        id=f"{criterion}:{vendor.id}",
        content=f"{vendor.name}: {criterion} {score}/100 ({why})",
        payload={"vendor": vendor.id, "criterion": criterion, "score": score, **extra},
        provenance=f"{criterion}-evaluator",
    )


def _price(fact: Fact) -> ProposedFact:
    vendor = fact.payload_as(Vendor)
    span = PRICE_CEILING - PRICE_FLOOR
    score = max(0, min(100, round(100 * (PRICE_CEILING - vendor.annual_cost) / span)))
    return _evaluation("price", vendor, score, f"{vendor.annual_cost:,} a year")


def _compliance(fact: Fact) -> ProposedFact:
    vendor = fact.payload_as(Vendor)
    score = sum(CERTIFICATION_POINTS.get(name, 0) for name in vendor.certifications)
    held = ", ".join(vendor.certifications) or "no certification"
    return _evaluation(
        "compliance",
        vendor,
        min(score, 100),
        held,
        certifications=list(vendor.certifications),
    )


def _risk(fact: Fact) -> ProposedFact:
    vendor = fact.payload_as(Vendor)
    score = 100 - _RATING_PENALTY[vendor.financial_rating] - 10 * vendor.incidents_last_year
    if vendor.years_in_business < 3:
        score -= 20
    score = max(0, score)
    level = "low" if score >= 75 else "medium" if score >= 50 else "high"
    return _evaluation(
        "risk",
        vendor,
        score,
        f"{level} risk: rating {vendor.financial_rating}, "
        f"{vendor.incidents_last_year} incident(s), {vendor.years_in_business} years trading",
        level=level,
    )


def _timeline(fact: Fact) -> ProposedFact:
    vendor = fact.payload_as(Vendor)
    weeks = vendor.delivery_weeks
    if weeks > DEADLINE_WEEKS:
        score, why = 0, f"{weeks} weeks, past the {DEADLINE_WEEKS}-week deadline"
    else:
        score, why = min(100, 100 - 8 * (weeks - 4)), f"{weeks} weeks"
    return _evaluation("timeline", vendor, score, why)


_EVALUATORS: Final[Mapping[Criterion, Callable[[Fact], ProposedFact]]] = {
    "price": _price,
    "compliance": _compliance,
    "risk": _risk,
    "timeline": _timeline,
}


# The consensus


def _payload(fact: Fact) -> dict[str, JsonValue]:
    payload = fact.payload
    assert isinstance(payload, dict)
    return payload


def _score(fact: Fact) -> int:
    score = _payload(fact)["score"]
    assert isinstance(score, int)
    return score


def _verdict(ctx: Context, recommendation: Fact) -> str | None:
    """`"allow"`, `"deny"` (a failed decision counts as one), or `None` while undecided."""
    decision_id = f"{POLICY_GATE}:{recommendation.id}"
    decision = ctx.find(ContextKey.CONSTRAINTS, decision_id)
    if decision is not None:
        return str(_payload(decision)["decision"])
    if ctx.find(ContextKey.DIAGNOSTIC, f"{decision_id}:failed") is not None:
        return "deny"
    return None


def _ranking(
    ctx: Context, weights: Mapping[Criterion, int]
) -> list[tuple[Vendor, float, tuple[Fact, ...]]] | None:
    """Every vendor with its weighted score and evaluations, best first; `None` until complete."""
    total_weight = sum(weights.values())
    ranked: list[tuple[Vendor, float, tuple[Fact, ...]]] = []
    for fact in ctx.get(ContextKey.SEEDS):
        if not _is_vendor(fact):
            continue
        vendor = fact.payload_as(Vendor)
        evaluations: list[Fact] = []
        for criterion in CRITERIA:
            evaluation = ctx.find(ContextKey.EVALUATIONS, f"{criterion}:{vendor.id}")
            if evaluation is None:
                return None
            evaluations.append(evaluation)
        weighted = sum(
            weights[criterion] * _score(evaluation)
            for criterion, evaluation in zip(CRITERIA, evaluations, strict=True)
        )
        ranked.append((vendor, round(weighted / total_weight, 2), tuple(evaluations)))
    if not ranked:
        return None
    return sorted(ranked, key=lambda entry: (-entry[1], entry[0].id))


def _recommendation_due(ctx: Context, weights: Mapping[Criterion, int]) -> ProposedFact | None:
    ranking = _ranking(ctx, weights)
    if ranking is None:
        return None
    ruled_out: list[Fact] = []
    for rank, (vendor, score, evaluations) in enumerate(ranking, start=1):
        recommendation = ctx.find(ContextKey.STRATEGIES, f"{_RECOMMENDATION_PREFIX}{vendor.id}")
        if recommendation is None:
            return _recommend(vendor, rank, score, ranking, evaluations, ruled_out)
        verdict = _verdict(ctx, recommendation)
        if verdict != "deny":
            return None  # waiting for the policy, or allowed: nothing more to recommend
        ruled_out.append(recommendation)
    if ctx.find(ContextKey.DIAGNOSTIC, _NO_VENDOR_ID) is not None:
        return None
    return ProposedFact(
        key=ContextKey.DIAGNOSTIC,
        id=_NO_VENDOR_ID,
        content=f"No vendor passes the policy: {len(ruled_out)} recommendation(s) denied",
        provenance="consensus",
        evidence=tuple(fact.ref for fact in ruled_out),
    )


def _recommend(
    vendor: Vendor,
    rank: int,
    score: float,
    ranking: Sequence[tuple[Vendor, float, tuple[Fact, ...]]],
    evaluations: Sequence[Fact],
    ruled_out: Sequence[Fact],
) -> ProposedFact:
    compliance, risk = (
        evaluations[CRITERIA.index("compliance")],
        evaluations[CRITERIA.index("risk")],
    )
    denied = [fact.id.removeprefix(_RECOMMENDATION_PREFIX) for fact in ruled_out]
    content = f"Recommend {vendor.name}: rank {rank} of {len(ranking)}, weighted score {score:.2f}"
    if denied:
        content += f" ({', '.join(denied)} denied by the policy)"
    return ProposedFact(
        key=ContextKey.STRATEGIES,
        id=f"{_RECOMMENDATION_PREFIX}{vendor.id}",
        content=content,
        payload={
            "vendor": vendor.id,
            "name": vendor.name,
            "rank": rank,
            "score": score,
            "annual_cost": vendor.annual_cost,
            "certifications": _payload(compliance)["certifications"],
            "risk_level": _payload(risk)["level"],
            "ranking": [{"vendor": entry.id, "score": total} for entry, total, _ in ranking],
        },
        provenance="consensus",
        evidence=(*(fact.ref for fact in evaluations), *(fact.ref for fact in ruled_out)),
    )


def _consensus(weights: Mapping[Criterion, int]) -> Suggestor:
    @suggestor(
        name="consensus",
        dependencies=[ContextKey.EVALUATIONS, ContextKey.CONSTRAINTS, ContextKey.DIAGNOSTIC],
        accepts=lambda ctx: _recommendation_due(ctx, weights) is not None,
        writes=[ContextKey.STRATEGIES, ContextKey.DIAGNOSTIC],
    )
    async def consensus(ctx: Context) -> list[ProposedFact]:
        proposal = _recommendation_due(ctx, weights)
        return [] if proposal is None else [proposal]

    return consensus


# The policy gate


def recommendation_request(fact: Fact) -> PolicyRequest | None:
    """The Cedar request for a recommendation (`None` for any other fact).

    The principal is the agent that recommends (its provenance), the action
    `Action::"recommend"`, the resource the vendor; the context carries what the policies
    read: `annual_cost`, `certifications` (a set) and `risk_level`.
    """
    if not fact.id.startswith(_RECOMMENDATION_PREFIX):
        return None
    payload = _payload(fact)
    return PolicyRequest(
        principal=EntityUid(type="Agent", id=fact.provenance),
        action=EntityUid(type="Action", id="recommend"),
        resource=EntityUid(type="Vendor", id=str(payload["vendor"])),
        context={
            "annual_cost": payload["annual_cost"],
            "certifications": payload["certifications"],
            "risk_level": payload["risk_level"],
        },
    )


# The commitment


def _allowed(ctx: Context) -> tuple[Fact, Fact] | None:
    """The recommendation the policy allowed, with its decision, if any."""
    for recommendation in ctx.get(ContextKey.STRATEGIES):
        if not recommendation.id.startswith(_RECOMMENDATION_PREFIX):
            continue
        decision = ctx.find(ContextKey.CONSTRAINTS, f"{POLICY_GATE}:{recommendation.id}")
        if decision is not None and _payload(decision)["decision"] == "allow":
            return recommendation, decision
    return None


def _commitment_due(ctx: Context) -> ProposedFact | None:
    if (
        ctx.find(ContextKey.STRATEGIES, _COMMITMENT_ID) is not None
        or ctx.find(ContextKey.DIAGNOSTIC, f"hitl-rejected:{_COMMITMENT_ID}") is not None
    ):
        return None
    allowed = _allowed(ctx)
    if allowed is None:
        return None
    recommendation, decision = allowed
    payload = _payload(recommendation)
    spend = payload["annual_cost"]
    assert isinstance(spend, int)
    return ProposedFact(
        key=ContextKey.STRATEGIES,
        id=_COMMITMENT_ID,
        content=f"Commit to {payload['name']} for {spend:,} a year",
        payload={"vendor": payload["vendor"], "name": payload["name"], "spend": spend},
        provenance="commitment",
        evidence=(recommendation.ref, decision.ref),
    )


@suggestor(
    name="commitment",
    dependencies=[ContextKey.CONSTRAINTS],
    accepts=lambda ctx: _commitment_due(ctx) is not None,
    writes=[ContextKey.STRATEGIES],
)
async def _commitment(ctx: Context) -> list[ProposedFact]:
    proposal = _commitment_due(ctx)
    return [] if proposal is None else [proposal]


def needs_approval(proposal: ProposedFact, *, review_above: int = REVIEW_ABOVE) -> bool:
    """The HITL predicate: the commitment, when its annual spend is above `review_above`."""
    if proposal.key is not ContextKey.STRATEGIES or proposal.id != _COMMITMENT_ID:
        return False
    payload = proposal.payload
    if not isinstance(payload, dict):
        return True  # a commitment without a spend: let a person look at it
    spend = payload.get("spend")
    return not isinstance(spend, int) or spend > review_above


@final
class _CommitmentIsAllowed:
    """ACCEPTANCE: a commitment names a vendor the policy allowed, and cites that decision."""

    name = "commitment-is-allowed"
    invariant_class = InvariantClass.ACCEPTANCE

    def check(self, ctx: Context, /) -> InvariantResult:
        commitment = ctx.find(ContextKey.STRATEGIES, _COMMITMENT_ID)
        if commitment is None:
            return InvariantResult.ok()
        vendor = _payload(commitment)["vendor"]
        decision_id = f"{POLICY_GATE}:{_RECOMMENDATION_PREFIX}{vendor}"
        decision = ctx.find(ContextKey.CONSTRAINTS, decision_id)
        if decision is None or _payload(decision)["decision"] != "allow":
            return InvariantResult.violated(f"the policy did not allow {vendor}")
        if decision.ref not in commitment.evidence:
            return InvariantResult.violated(f"the commitment does not cite {decision.ref}")
        return InvariantResult.ok()


def build_formation(
    vendors: Sequence[Vendor] = VENDORS,
    *,
    weights: Mapping[Criterion, int] = WEIGHTS,
    review_above: int = REVIEW_ABOVE,
    policies: str = POLICIES,
) -> Formation:
    """The vendor selection over `vendors`.

    Args:
        vendors: The bids, one input fact each.
        weights: The weight of each criterion in the consensus (at least one positive).
        review_above: A commitment whose annual spend is above this waits for a human.
        policies: The Cedar policy set the recommendations are checked against.

    Raises:
        ValueError: `weights` does not weigh exactly the four criteria, or weighs nothing.
    """
    if set(weights) != set(CRITERIA) or any(w < 0 for w in weights.values()):
        raise ValueError(f"weights must give each of {', '.join(CRITERIA)} a weight >= 0")
    if sum(weights.values()) <= 0:
        raise ValueError("weights must not all be 0")
    evaluators = tuple(
        RuleSuggestor(
            f"{criterion}-evaluator",
            dependencies=[ContextKey.SEEDS],
            when=_is_vendor,
            then=_EVALUATORS[criterion],
            writes=[ContextKey.EVALUATIONS],
        )
        for criterion in CRITERIA
    )
    policy_gate = PolicySuggestor(
        policies,
        watch=ContextKey.STRATEGIES,
        request=recommendation_request,
        output_key=ContextKey.CONSTRAINTS,
        name=POLICY_GATE,
    )
    bids = tuple(
        ProposedFact(
            key=ContextKey.SEEDS,
            id=f"{_VENDOR_PREFIX}{vendor.id}",
            content=f"{vendor.name} bids {vendor.annual_cost:,} a year, "
            f"delivery in {vendor.delivery_weeks} weeks",
            payload=vendor.model_dump(mode="json"),
            provenance="input:procurement",
        )
        for vendor in vendors
    )
    return Formation(
        name="vendor_selection",
        description=(
            "Four evaluators score each vendor in parallel, a consensus ranks them, a Cedar "
            "policy checks the recommendation, and a human approves a large commitment."
        ),
        suggestors=(
            *evaluators,
            _consensus(weights),
            policy_gate,
            _commitment,
        ),
        invariants=(_CommitmentIsAllowed(),),
        hitl=HitlPolicy(
            predicate=lambda proposal: needs_approval(proposal, review_above=review_above)
        ),
        inputs=bids,
    )


formation: Formation = build_formation()
"""The default bids (`VENDORS`): `dune` is denied, `acme` allowed; pauses in cycle 6 for the
commitment (420,000 a year); approved, converges in cycle 7."""
