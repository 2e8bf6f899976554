"""A loan application: parallel checks, a model's decision staged for validation, a human gate.

The input is one application (`seeds/application`, with an `Applicant` as payload). Then:

1. Cycle 1: three verification checks (identity, income, credit) run in the same cycle, each
   a [`RuleSuggestor`][converge_suggestors.RuleSuggestor] writing one `SIGNALS` fact.
2. Cycle 2: the `underwriter`, an [`LlmSuggestor`][converge_suggestors.LlmSuggestor], is shown
   the three checks and stages its decision under `PROPOSALS` (target `EVALUATIONS`). Offline
   it talks to a [`ScriptedChatProvider`][converge_suggestors.ScriptedChatProvider] whose reply
   is a pure function of the prompt; pass a real provider to `build_formation` to ask a model.
3. Cycle 3: the [`ValidationAgent`][converge_suggestors.ValidationAgent] promotes the decision
   to `evaluations/decision`. The HITL policy holds any decision the model is less than
   `REVIEW_BELOW` sure of: the default applicant's credit score is borderline, the model's
   confidence is 0.6, so the run pauses `AWAITING_HUMAN` with one pending gate.
4. Approved on resume, the decision becomes a fact and the run converges in cycle 4.

The ACCEPTANCE invariant `decision-cites-every-check` requires the decision to cite all three
checks as evidence.
"""

from __future__ import annotations

import json
import re
from typing import ClassVar, Final, final

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
)
from converge_suggestors import (
    ChatProvider,
    ChatRequest,
    LlmSuggestor,
    RuleSuggestor,
    ScriptedChatProvider,
    ValidationAgent,
    ValidationConfig,
)

__all__ = [
    "ANNUAL_RATE",
    "APPLICANT",
    "AUTO_APPROVE_SCORE",
    "INSTRUCTIONS",
    "MAX_DEBT_TO_INCOME",
    "REVIEW_BELOW",
    "Applicant",
    "build_formation",
    "formation",
    "needs_review",
    "scripted_underwriter",
]

AUTO_APPROVE_SCORE: Final = 680
"""Credit scores at or above this are approved without doubt."""
MAX_DEBT_TO_INCOME: Final = 0.40
"""The highest share of monthly income that may go to debt, the new loan included."""
ANNUAL_RATE: Final = 0.07
"""The interest rate used to work out the monthly payment."""
REVIEW_BELOW: Final = 0.75
"""A validated decision with a confidence below this waits for a human."""

INSTRUCTIONS: Final = (
    "You are a loan underwriter. From the verification checks, decide whether to approve or "
    'decline the application. Propose exactly one decision, with id "decision", a one-sentence '
    'reason as content, your confidence, and the payload {"decision": "approve" | "decline"}.'
)
"""The underwriter's system prompt."""

_APPLICATION_ID: Final = "application"
_DECISION_ID: Final = "decision"
_CHECKS: Final = ("identity", "income", "credit")


@final
class Applicant(BaseModel, frozen=True):
    """A loan application, the payload of the input fact `seeds/application`."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    name: str
    """Who applies."""
    amount: int = Field(gt=0)
    """The amount requested."""
    term_months: int = Field(gt=0)
    """Over how many months it is repaid."""
    monthly_income: int = Field(gt=0)
    """Verified income per month."""
    monthly_debts: int = Field(ge=0)
    """Existing debt payments per month."""
    credit_score: int = Field(ge=300, le=850)
    """The bureau's credit score."""
    documents_match: bool = True
    """Whether the identity documents match the application."""

    def monthly_payment(self) -> int:
        """The new loan's monthly payment, at `ANNUAL_RATE`, rounded to a whole unit."""
        rate = ANNUAL_RATE / 12
        return round(self.amount * rate / (1 - (1 + rate) ** -self.term_months))

    def debt_to_income(self) -> float:
        """The share of monthly income spent on debt with the new loan, to two decimals."""
        return round((self.monthly_debts + self.monthly_payment()) / self.monthly_income, 2)


APPLICANT: Final = Applicant(
    name="Ada Lovelace",
    amount=24_000,
    term_months=36,
    monthly_income=5_200,
    monthly_debts=900,
    credit_score=655,
)
"""The default applicant: documents and income check out; the credit score is borderline."""


def _is_application(fact: Fact) -> bool:
    return fact.id == _APPLICATION_ID


def _check(check: str, content: str, *, passed: bool, **payload: JsonValue) -> ProposedFact:
    return ProposedFact(
        key=ContextKey.SIGNALS,
        id=check,
        content=content,
        payload={"passed": passed, **payload},
        provenance=f"{check}-check",
    )


def _identity(fact: Fact) -> ProposedFact:
    applicant = fact.payload_as(Applicant)
    if applicant.documents_match:
        return _check("identity", f"Identity verified for {applicant.name}", passed=True)
    return _check("identity", f"Identity not verified for {applicant.name}", passed=False)


def _income(fact: Fact) -> ProposedFact:
    applicant = fact.payload_as(Applicant)
    payment, ratio = applicant.monthly_payment(), applicant.debt_to_income()
    return _check(
        "income",
        f"Income {applicant.monthly_income:,}/month; with the new payment of {payment:,}/month, "
        f"debt-to-income is {ratio:.2f} (limit {MAX_DEBT_TO_INCOME:.2f})",
        passed=ratio <= MAX_DEBT_TO_INCOME,
        monthly_payment=payment,
        debt_to_income=ratio,
    )


def _credit(fact: Fact) -> ProposedFact:
    score = fact.payload_as(Applicant).credit_score
    return _check(
        "credit",
        f"Credit score {score} (auto-approval from {AUTO_APPROVE_SCORE})",
        passed=score >= AUTO_APPROVE_SCORE,
        score=score,
    )


def _decision(decision: str, reason: str, confidence: float) -> str:
    proposal = {
        "id": _DECISION_ID,
        "content": f"{decision.capitalize()}: {reason}",
        "confidence": confidence,
        "payload": {"decision": decision},
    }
    return json.dumps({"proposals": [proposal]})


def scripted_underwriter(request: ChatRequest) -> str:
    """The offline model: a pure function from the prompt (the checks) to a JSON decision.

    Declines an unverified identity (0.95) or a debt-to-income above the limit (0.9);
    approves a score at or above `AUTO_APPROVE_SCORE` (0.92); approves a score within 60
    points of it with a confidence of 0.6, enough to pass validation but not the human gate;
    declines lower scores (0.85).
    """
    facts = request.messages[-1].content
    ratio = re.search(r"debt-to-income is (\d+\.\d+)", facts)
    score = re.search(r"Credit score (\d+)", facts)
    if "Identity verified" not in facts or ratio is None or score is None:
        return _decision("decline", "the identity or income could not be verified", 0.95)
    if float(ratio[1]) > MAX_DEBT_TO_INCOME:
        return _decision("decline", f"debt-to-income {ratio[1]} is above the limit", 0.9)
    if int(score[1]) >= AUTO_APPROVE_SCORE:
        return _decision("approve", "identity, income and credit all check out", 0.92)
    if int(score[1]) >= AUTO_APPROVE_SCORE - 60:
        return _decision(
            "approve",
            f"identity and income check out, but credit score {score[1]} is borderline",
            0.6,
        )
    return _decision("decline", f"credit score {score[1]} is too low", 0.85)


def needs_review(proposal: ProposedFact) -> bool:
    """The HITL predicate: a validated proposal (not a staged one) below `REVIEW_BELOW`.

    Staged proposals under `PROPOSALS` are not gated: the `ValidationAgent` promotes them
    with the same confidence, so gating both would ask the human twice.
    """
    return proposal.key is not ContextKey.PROPOSALS and proposal.confidence < REVIEW_BELOW


@final
class _DecisionCitesEveryCheck:
    """ACCEPTANCE: the decision, if any, cites every verification check."""

    name = "decision-cites-every-check"
    invariant_class = InvariantClass.ACCEPTANCE

    def check(self, ctx: Context, /) -> InvariantResult:
        decision = ctx.find(ContextKey.EVALUATIONS, _DECISION_ID)
        if decision is None:
            return InvariantResult.ok()
        missing = [c for c in _CHECKS if f"{ContextKey.SIGNALS.value}/{c}" not in decision.evidence]
        if missing:
            return InvariantResult.violated(f"the decision does not cite {', '.join(missing)}")
        return InvariantResult.ok()


def build_formation(
    applicant: Applicant = APPLICANT, *, provider: ChatProvider | None = None
) -> Formation:
    """The loan formation for `applicant`, asking `provider` (default: the scripted model)."""
    checks = tuple(
        RuleSuggestor(
            f"{check}-check",
            dependencies=[ContextKey.SEEDS],
            when=_is_application,
            then=then,
            writes=[ContextKey.SIGNALS],
        )
        for check, then in zip(_CHECKS, (_identity, _income, _credit), strict=True)
    )
    underwriter = LlmSuggestor(
        "underwriter",
        provider or ScriptedChatProvider(scripted_underwriter, model="scripted-underwriter"),
        dependencies=[ContextKey.SIGNALS],
        target=ContextKey.EVALUATIONS,
        instructions=INSTRUCTIONS,
    )
    application = ProposedFact(
        key=ContextKey.SEEDS,
        id=_APPLICATION_ID,
        content=(
            f"{applicant.name} applies for {applicant.amount:,} over {applicant.term_months} months"
        ),
        payload=applicant.model_dump(mode="json"),
        provenance="input:loan-portal",
    )
    return Formation(
        name="loan_application",
        description=(
            "Identity, income and credit checks in parallel, a model's decision staged and "
            "validated, and a human gate when the model is unsure."
        ),
        suggestors=(*checks, underwriter, ValidationAgent(ValidationConfig(min_confidence=0.5))),
        invariants=(_DecisionCitesEveryCheck(),),
        hitl=HitlPolicy(predicate=needs_review),
        inputs=(application,),
    )


formation: Formation = build_formation()
"""The default applicant (`APPLICANT`): pauses in cycle 3 with one gate; approved, converges."""
