"""Vendor selection: four evaluators in parallel, a consensus, a Cedar policy gate, a human.

The demo's data lives under keys of its own, each typed by a frozen model: the bids
(`vendor.bids/{id}`, a `Vendor` each: price, certifications, risk indicators and delivery
time), the scores (`vendor.evaluations`, an `Evaluation` each), the recommendations
(`vendor.recommendations`) and the commitment (`vendor.commitments`). Then:

1. Cycle 1: four evaluators (price, compliance, risk, timeline), each a
   [`RuleSuggestor`][converge_suggestors.RuleSuggestor], score every vendor from 0 to 100
   in the same cycle: `vendor.evaluations/{criterion}:{vendor}`.
2. Cycle 2: once every vendor has all four scores (a `ready` join), the `consensus` ranks
   the vendors by their weighted score (`WEIGHTS`) and recommends the best one:
   `vendor.recommendations/{vendor}`.
3. Cycle 3: the `policy-gate`, a [`PolicySuggestor`][converge_suggestors.PolicySuggestor],
   checks the recommendation against the Cedar policy set `POLICIES` (an ISO-27001
   certification is required, the annual cost may not exceed `SPEND_LIMIT`, no high-risk
   vendor) and records its decision: `constraints/policy-gate:{vendor}`.
   The default top-ranked vendor, `dune`, costs more than the limit and is denied, so in
   cycle 4 the consensus recommends the next one, `acme`, which cycle 5 allows.
4. Cycle 6: the `commitment` suggestor commits to the allowed vendor
   (`vendor.commitments/{vendor}`). Its spend is above `REVIEW_ABOVE`, so the HITL policy
   holds it and the run pauses `AWAITING_HUMAN` with one gate,
   `gate:6:vendor.commitments/acme`.
5. Approved on resume, the commitment becomes a fact and the run converges in cycle 7.

The ACCEPTANCE invariant `commitment-is-allowed` requires any commitment to name a vendor
whose recommendation the policy allowed, and to cite that decision.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar, Final, Literal, final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from converge import (
    AgentEffect,
    AnyKey,
    Context,
    ContextKey,
    Fact,
    Formation,
    HitlPolicy,
    InvariantClass,
    InvariantResult,
    Key,
    ProposedFact,
    Suggestor,
    ready,
    suggestor,
)
from converge_suggestors import (
    EntityUid,
    PolicyDecision,
    PolicyRequest,
    PolicySuggestor,
    RuleSuggestor,
)

__all__ = [
    "BIDS",
    "CERTIFICATION_POINTS",
    "COMMITMENTS",
    "CRITERIA",
    "DEADLINE_WEEKS",
    "EVALUATIONS",
    "POLICIES",
    "POLICY_GATE",
    "PRICE_CEILING",
    "PRICE_FLOOR",
    "RECOMMENDATIONS",
    "REQUIRED_CERTIFICATION",
    "REVIEW_ABOVE",
    "SPEND_LIMIT",
    "VENDORS",
    "WEIGHTS",
    "WITHOUT_CEDAR",
    "Commitment",
    "Criterion",
    "DemoRules",
    "Evaluation",
    "Ranked",
    "Recommendation",
    "RiskLevel",
    "Vendor",
    "build_formation",
    "cedar_installed",
    "formation",
    "needs_approval",
    "recommendation_request",
]

Criterion = Literal["price", "compliance", "risk", "timeline"]
"""What a vendor is scored on."""
RiskLevel = Literal["low", "medium", "high"]
"""The risk evaluator's verdict, which the policy reads."""

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

_NO_VENDOR_ID: Final = "no-eligible-vendor"
_RATING_PENALTY: Final[Mapping[str, int]] = {"A": 0, "B": 15, "C": 40}


@final
class Vendor(BaseModel, frozen=True):
    """A vendor's bid, the payload of the input fact `vendor.bids/{id}`."""

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


@final
class Evaluation(BaseModel, frozen=True):
    """One score of one vendor, the payload of `vendor.evaluations/{criterion}:{vendor}`."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    vendor: str
    """The vendor's id."""
    criterion: Criterion
    """What was scored."""
    score: int = Field(ge=0, le=100)
    """The score, from 0 to 100."""
    risk_level: RiskLevel | None = None
    """The risk evaluator's verdict (`None` from the other evaluators)."""


@final
class Ranked(BaseModel, frozen=True):
    """One line of the consensus's ranking."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    vendor: str
    """The vendor's id."""
    score: float
    """Its weighted score."""


@final
class Recommendation(BaseModel, frozen=True):
    """The consensus's choice, the payload of `vendor.recommendations/{vendor}`.

    It carries what the policy reads (cost, certifications, risk level) and the ranking.
    """

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    vendor: str
    """The recommended vendor's id."""
    name: str
    """Its name."""
    rank: int = Field(ge=1)
    """Its place in the ranking."""
    score: float
    """Its weighted score."""
    annual_cost: int
    """What it costs a year."""
    certifications: tuple[str, ...]
    """The certifications it holds."""
    risk_level: RiskLevel
    """The risk evaluator's verdict."""
    ranking: tuple[Ranked, ...]
    """Every vendor with its weighted score, best first."""


@final
class Commitment(BaseModel, frozen=True):
    """The decision to contract, the payload of `vendor.commitments/{vendor}`."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    vendor: str
    """The vendor's id."""
    name: str
    """Its name."""
    spend: int
    """The annual spend committed to."""


BIDS: Final = Key("vendor.bids", payload=Vendor)
"""The bids, one per vendor (id: the vendor's id); the inputs."""
EVALUATIONS: Final = Key("vendor.evaluations", payload=Evaluation)
"""The scores (id: `{criterion}:{vendor}`)."""
RECOMMENDATIONS: Final = Key("vendor.recommendations", payload=Recommendation)
"""The consensus's recommendations (id: the vendor's id), in the order made."""
COMMITMENTS: Final = Key("vendor.commitments", payload=Commitment)
"""The commitment (id: the vendor's id); gated above `REVIEW_ABOVE`."""


# The evaluators


def _evaluation(
    criterion: Criterion, vendor: Vendor, score: int, why: str, risk: RiskLevel | None = None
) -> ProposedFact:
    return ProposedFact(
        key=EVALUATIONS,
        id=f"{criterion}:{vendor.id}",
        content=f"{vendor.name}: {criterion} {score}/100 ({why})",
        payload=Evaluation(vendor=vendor.id, criterion=criterion, score=score, risk_level=risk),
        provenance=f"{criterion}-evaluator",
    )


def _price(vendor: Vendor) -> ProposedFact:
    span = PRICE_CEILING - PRICE_FLOOR
    score = max(0, min(100, round(100 * (PRICE_CEILING - vendor.annual_cost) / span)))
    return _evaluation("price", vendor, score, f"{vendor.annual_cost:,} a year")


def _compliance(vendor: Vendor) -> ProposedFact:
    score = sum(CERTIFICATION_POINTS.get(name, 0) for name in vendor.certifications)
    held = ", ".join(vendor.certifications) or "no certification"
    return _evaluation("compliance", vendor, min(score, 100), held)


def _risk(vendor: Vendor) -> ProposedFact:
    score = 100 - _RATING_PENALTY[vendor.financial_rating] - 10 * vendor.incidents_last_year
    if vendor.years_in_business < 3:
        score -= 20
    score = max(0, score)
    level: RiskLevel = "low" if score >= 75 else "medium" if score >= 50 else "high"
    return _evaluation(
        "risk",
        vendor,
        score,
        f"{level} risk: rating {vendor.financial_rating}, "
        f"{vendor.incidents_last_year} incident(s), {vendor.years_in_business} years trading",
        level,
    )


def _timeline(vendor: Vendor) -> ProposedFact:
    weeks = vendor.delivery_weeks
    if weeks > DEADLINE_WEEKS:
        score, why = 0, f"{weeks} weeks, past the {DEADLINE_WEEKS}-week deadline"
    else:
        score, why = min(100, 100 - 8 * (weeks - 4)), f"{weeks} weeks"
    return _evaluation("timeline", vendor, score, why)


_EVALUATORS: Final[Mapping[Criterion, Callable[[Vendor], ProposedFact]]] = {
    "price": _price,
    "compliance": _compliance,
    "risk": _risk,
    "timeline": _timeline,
}


def _evaluator(criterion: Criterion) -> RuleSuggestor:
    evaluate = _EVALUATORS[criterion]
    return RuleSuggestor(
        f"{criterion}-evaluator",
        dependencies=[BIDS],
        when=lambda _: True,
        then=lambda bid: evaluate(BIDS.of(bid)),
        writes=[EVALUATIONS],
    )


# The consensus


def _scores(vendor: str) -> tuple[str, ...]:
    """The references of `vendor`'s four evaluations."""
    return tuple(EVALUATIONS / f"{criterion}:{vendor}" for criterion in CRITERIA)


def _verdict(ctx: Context, vendor: str) -> str | None:
    """`"allow"`, `"deny"` (a failed decision counts as one), or `None` while undecided."""
    decision = ctx.find(ContextKey.CONSTRAINTS, f"{POLICY_GATE}:{vendor}")
    if decision is not None and isinstance(decision.payload, Mapping):
        return str(decision.payload["decision"])
    if ctx.find(ContextKey.DIAGNOSTIC, f"{POLICY_GATE}:{vendor}:failed") is not None:
        return "deny"
    return None


def _ranking(
    ctx: Context, bids: Sequence[Vendor], weights: Mapping[Criterion, int]
) -> list[tuple[Vendor, float]]:
    """Every vendor with its weighted score, best first (ties by id)."""
    points = {(e.vendor, e.criterion): e.score for e in EVALUATIONS.read(ctx)}
    total = sum(weights.values())
    ranked = [
        (bid, round(sum(weights[c] * points[bid.id, c] for c in CRITERIA) / total, 2))
        for bid in bids
    ]
    return sorted(ranked, key=lambda entry: (-entry[1], entry[0].id))


def _recommendation_due(ctx: Context, weights: Mapping[Criterion, int]) -> ProposedFact | None:
    """The next recommendation, or the note that no vendor passes.

    Due once every vendor has all four scores, while every earlier recommendation is denied.
    """
    bids = BIDS.read(ctx)
    every_score = [ref for bid in bids for ref in _scores(bid.id)]
    outcomes = [*(RECOMMENDATIONS / bid.id for bid in bids), ContextKey.DIAGNOSTIC / _NO_VENDOR_ID]
    if not bids or not ready(ctx, needs=every_score, makes=outcomes):
        return None
    ranking = _ranking(ctx, bids, weights)
    denied: list[str] = []
    for rank, (vendor, score) in enumerate(ranking, start=1):
        if ctx.find(RECOMMENDATIONS, vendor.id) is None:
            return _recommend(ctx, vendor, rank, score, ranking, denied)
        if _verdict(ctx, vendor.id) != "deny":
            return None  # waiting for the policy, or allowed: nothing more to recommend
        denied.append(vendor.id)
    return ProposedFact(
        key=ContextKey.DIAGNOSTIC,
        id=_NO_VENDOR_ID,
        content=f"No vendor passes the policy: {len(denied)} recommendation(s) denied",
        provenance="consensus",
        evidence=tuple(RECOMMENDATIONS / vendor for vendor in denied),
    )


def _recommend(
    ctx: Context,
    vendor: Vendor,
    rank: int,
    score: float,
    ranking: Sequence[tuple[Vendor, float]],
    denied: Sequence[str],
) -> ProposedFact:
    risk = ctx.find(EVALUATIONS, f"risk:{vendor.id}")
    level = None if risk is None else EVALUATIONS.of(risk).risk_level
    assert level is not None  # every score is in, and the risk evaluator gives a level
    content = f"Recommend {vendor.name}: rank {rank} of {len(ranking)}, weighted score {score:.2f}"
    if denied:
        content += f" ({', '.join(denied)} denied by the policy)"
    return ProposedFact(
        key=RECOMMENDATIONS,
        id=vendor.id,
        content=content,
        payload=Recommendation(
            vendor=vendor.id,
            name=vendor.name,
            rank=rank,
            score=score,
            annual_cost=vendor.annual_cost,
            certifications=vendor.certifications,
            risk_level=level,
            ranking=tuple(Ranked(vendor=entry.id, score=total) for entry, total in ranking),
        ),
        provenance="consensus",
        evidence=(*_scores(vendor.id), *(RECOMMENDATIONS / other for other in denied)),
    )


def _consensus(weights: Mapping[Criterion, int]) -> Suggestor:
    @suggestor(
        name="consensus",
        dependencies=[EVALUATIONS, ContextKey.CONSTRAINTS, ContextKey.DIAGNOSTIC],
        accepts=lambda ctx: _recommendation_due(ctx, weights) is not None,
        writes=[RECOMMENDATIONS, ContextKey.DIAGNOSTIC],
    )
    async def consensus(ctx: Context) -> list[ProposedFact]:
        proposal = _recommendation_due(ctx, weights)
        return [] if proposal is None else [proposal]

    return consensus


# The policy gate


def recommendation_request(fact: Fact) -> PolicyRequest:
    """The Cedar request for a recommendation (a fact of `RECOMMENDATIONS`).

    The principal is the agent that recommends (its provenance), the action
    `Action::"recommend"`, the resource the vendor; the context carries what the policies
    read: `annual_cost`, `certifications` (a set) and `risk_level`.
    """
    recommendation = RECOMMENDATIONS.of(fact)
    return PolicyRequest(
        principal=EntityUid(type="Agent", id=fact.provenance),
        action=EntityUid(type="Action", id="recommend"),
        resource=EntityUid(type="Vendor", id=recommendation.vendor),
        context={
            "annual_cost": recommendation.annual_cost,
            "certifications": list(recommendation.certifications),
            "risk_level": recommendation.risk_level,
        },
    )


@final
class DemoRules:
    """The `policy-gate` when Cedar (the `policy` extra) is not installed.

    The four rules of `POLICIES`, checked in Python, proposing what a `PolicySuggestor` over
    them would: each recommendation gets the decision fact `constraints/policy-gate:{vendor}`
    (the same id, payload shape and evidence as Cedar's), whose content says that Cedar was
    not used. It knows only `POLICIES`: `build_formation` with other policies needs Cedar.
    """

    name: str = POLICY_GATE
    """The policy gate's name, as Cedar's would have."""
    dependencies: tuple[AnyKey, ...] = (RECOMMENDATIONS,)
    """The recommendations."""
    writes: tuple[AnyKey, ...] = (ContextKey.CONSTRAINTS,)
    """The decisions."""

    def accepts(self, ctx: Context, /) -> bool:
        """True while a recommendation has no decision."""
        return any(True for _ in self._pending(ctx))

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Decide every recommendation without a decision."""
        return AgentEffect.with_proposals([self._decided(fact) for fact in self._pending(ctx)])

    def decide(self, request: PolicyRequest, /) -> PolicyDecision:
        """What Cedar decides for `request` under `POLICIES`.

        A `forbid` that applies denies; else the `permit` allows when it applies; else nothing
        permits it (deny).
        """
        context = request.context
        recommend = str(request.action) == 'Action::"recommend"'
        certifications = context.get("certifications")
        held = certifications if isinstance(certifications, list) else []
        cost = context.get("annual_cost")
        forbidden = sorted(
            rule
            for rule, applies in (
                ("certification-required", REQUIRED_CERTIFICATION not in held),
                ("spend-limit", isinstance(cost, int) and cost > SPEND_LIMIT),
                ("no-high-risk-vendor", context.get("risk_level") == "high"),
            )
            if recommend and applies
        )
        if forbidden:
            return PolicyDecision(decision="deny", policies=tuple(forbidden))
        if recommend and str(request.principal) == 'Agent::"consensus"':
            return PolicyDecision(decision="allow", policies=("consensus-recommends",))
        return PolicyDecision(decision="deny", policies=())

    def _pending(self, ctx: Context) -> list[Fact]:
        return [
            fact
            for fact in ctx.get(RECOMMENDATIONS)
            if ctx.find(ContextKey.CONSTRAINTS, f"{POLICY_GATE}:{fact.id}") is None
        ]

    def _decided(self, fact: Fact) -> ProposedFact:
        request = recommendation_request(fact)
        decision = self.decide(request)
        verb = "allow" if decision.allowed else "deny"
        why = (
            ("permitted by " if decision.allowed else "forbidden by ")
            + ", ".join(decision.policies)
            if decision.policies
            else "no policy permits it"
        )
        return ProposedFact(
            key=ContextKey.CONSTRAINTS,
            id=f"{POLICY_GATE}:{fact.id}",
            content=(
                f"The demo's rules, checked in Python without Cedar, {verb} "
                f"{request.principal} {request.action} on {request.resource} for {fact.ref} "
                f"({why})"
            ),
            payload={
                "decision": decision.decision,
                "policies": list(decision.policies),
                "errors": [],
                "request": request.model_dump(mode="json"),
            },
            provenance=POLICY_GATE,
            evidence=(fact.ref, *(f"policy:{policy}" for policy in decision.policies)),
        )


def cedar_installed() -> bool:
    """Whether Cedar (`cedarpy`, the `policy` extra) can be imported."""
    return importlib.util.find_spec("cedarpy") is not None


WITHOUT_CEDAR: Final = (
    "Cedar, the 'policy' extra, is not installed: the policy gate checks the same four rules "
    'in Python (pip install "converge-engine[policy]" to use Cedar)'
)
"""What the formation's description adds when it runs without Cedar."""


# The commitment


def _commitment_due(ctx: Context) -> ProposedFact | None:
    """The commitment to the recommendation the policy allowed, once, unless refused."""
    for fact in ctx.get(RECOMMENDATIONS):
        recommendation = RECOMMENDATIONS.of(fact)
        vendor = recommendation.vendor
        if _verdict(ctx, vendor) != "allow":
            continue
        if ctx.has(COMMITMENTS) or ctx.find(ContextKey.DIAGNOSTIC, f"hitl-rejected:{vendor}"):
            return None
        return ProposedFact(
            key=COMMITMENTS,
            id=vendor,
            content=f"Commit to {recommendation.name} for {recommendation.annual_cost:,} a year",
            payload=Commitment(
                vendor=vendor, name=recommendation.name, spend=recommendation.annual_cost
            ),
            provenance="commitment",
            evidence=(fact.ref, ContextKey.CONSTRAINTS / f"{POLICY_GATE}:{vendor}"),
        )
    return None


@suggestor(
    name="commitment",
    dependencies=[ContextKey.CONSTRAINTS],
    accepts=lambda ctx: _commitment_due(ctx) is not None,
    writes=[COMMITMENTS],
)
async def _commitment(ctx: Context) -> list[ProposedFact]:
    proposal = _commitment_due(ctx)
    return [] if proposal is None else [proposal]


def needs_approval(proposal: ProposedFact, *, review_above: int = REVIEW_ABOVE) -> bool:
    """The HITL predicate: a commitment whose annual spend is above `review_above`."""
    if proposal.key != COMMITMENTS:
        return False
    try:
        return COMMITMENTS.of(proposal).spend > review_above
    except ValidationError:
        return True  # a commitment without a readable spend: let a person look at it


@final
class _CommitmentIsAllowed:
    """ACCEPTANCE: a commitment names a vendor the policy allowed, and cites that decision."""

    name = "commitment-is-allowed"
    invariant_class = InvariantClass.ACCEPTANCE

    def check(self, ctx: Context, /) -> InvariantResult:
        for fact in ctx.get(COMMITMENTS):
            vendor = COMMITMENTS.of(fact).vendor
            if _verdict(ctx, vendor) != "allow" or ctx.find(RECOMMENDATIONS, vendor) is None:
                return InvariantResult.violated(f"the policy did not allow {vendor}")
            decision = ContextKey.CONSTRAINTS / f"{POLICY_GATE}:{vendor}"
            if decision not in fact.evidence:
                return InvariantResult.violated(f"the commitment does not cite {decision}")
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
    description = (
        "Four evaluators score each vendor in parallel, a consensus ranks them, a Cedar "
        "policy checks the recommendation, and a human approves a large commitment."
    )
    policy_gate: Suggestor
    if policies == POLICIES and not cedar_installed():
        policy_gate = DemoRules()
        description = f"{description} {WITHOUT_CEDAR}."
    else:
        policy_gate = PolicySuggestor(
            policies,
            watch=RECOMMENDATIONS,
            request=recommendation_request,
            output_key=ContextKey.CONSTRAINTS,
            name=POLICY_GATE,
        )
    bids = tuple(
        ProposedFact(
            key=BIDS,
            id=vendor.id,
            content=f"{vendor.name} bids {vendor.annual_cost:,} a year, "
            f"delivery in {vendor.delivery_weeks} weeks",
            payload=vendor,
            provenance="input:procurement",
        )
        for vendor in vendors
    )
    return Formation(
        name="vendor_selection",
        description=description,
        suggestors=(*map(_evaluator, CRITERIA), _consensus(weights), policy_gate, _commitment),
        invariants=(_CommitmentIsAllowed(),),
        hitl=HitlPolicy(
            predicate=lambda proposal: needs_approval(proposal, review_above=review_above)
        ),
        inputs=bids,
    )


formation: Formation = build_formation()
"""The default bids (`VENDORS`): `dune` is denied, `acme` allowed; pauses in cycle 6 for the
commitment (420,000 a year); approved, converges in cycle 7."""
