"""Reconciliation: two noisy ledgers matched by an exact assignment, the leftovers reported.

The inputs are two ledgers that should agree but do not quite: the bank statement
(`seeds/bank:{id}`, a `BankLine` each) and the invoices (`seeds/invoice:{number}`, an
`Invoice` each). Amounts differ by a fee, dates by a few days, payees are spelled the bank's
way. Then:

1. Cycle 1: `cost-matrix` prices every (bank line, invoice) pair: the amount difference, the
   date distance and the payee's dissimilarity, each scaled to 0..1 by its tolerance
   (`AMOUNT_TOLERANCE`, `DATE_WINDOW_DAYS`, `NAME_TOLERANCE`), summed; a pair outside any
   tolerance is `None`, not allowed. Each line may also stay unmatched, for `UNMATCHED_COST`.
   The matrix is proposed as an [`AssignmentProblem`][converge_suggestors.AssignmentProblem]:
   `hypotheses/ledger-costs`.
2. Cycle 2: the [`AssignmentSuggestor`][converge_suggestors.AssignmentSuggestor] solves it
   exactly (SciPy's `linear_sum_assignment`): `strategies/assignment:ledger-costs`.
3. Cycle 3: `match-reporter` turns the plan into `evaluations/match:{bank}:{invoice}` facts
   and reports each line left over, on either side, as `signals/unmatched:{line}`.
4. Cycle 4: nothing is left to do; the run converges.

The ACCEPTANCE invariant `every-line-accounted-for` requires every bank line and every
invoice to be matched exactly once or reported unmatched.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import date
from difflib import SequenceMatcher
from typing import ClassVar, Final, final

from pydantic import BaseModel, ConfigDict, Field

from converge import (
    Context,
    ContextKey,
    Fact,
    Formation,
    InvariantClass,
    InvariantResult,
    ProposedFact,
    suggestor,
)
from converge_suggestors import AssignmentPlan, AssignmentProblem, AssignmentSuggestor

__all__ = [
    "AMOUNT_TOLERANCE",
    "BANK_LINES",
    "DATE_WINDOW_DAYS",
    "INVOICES",
    "NAME_TOLERANCE",
    "UNMATCHED_COST",
    "BankLine",
    "Invoice",
    "build_formation",
    "formation",
    "match_cost",
    "name_dissimilarity",
]

AMOUNT_TOLERANCE: Final = 0.02
"""The largest relative amount difference a match may have (2%: fees, rounding)."""
DATE_WINDOW_DAYS: Final = 10
"""The most days a payment may be from its invoice's date."""
NAME_TOLERANCE: Final = 0.5
"""The largest payee dissimilarity a match may have (0 same name, 1 nothing in common)."""
UNMATCHED_COST: Final = 1.0
"""What leaving one line unmatched costs: a pair dearer than two leftovers stays unmatched."""

_BANK: Final = "bank:"
_INVOICE: Final = "invoice:"
_PROBLEM_ID: Final = "ledger-costs"
_PLAN_ID: Final = f"assignment:{_PROBLEM_ID}"
_SKIP: Final = "unmatched:"
_SUFFIXES: Final = frozenset({"inc", "ltd", "limited", "llc", "corp", "corporation", "co", "gmbh"})


@final
class BankLine(BaseModel, frozen=True):
    """A line of the bank statement, the payload of the input fact `seeds/bank:{id}`."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[A-Za-z0-9-]+$")
    """The statement line's reference."""
    booked: date
    """When the bank booked it."""
    amount_cents: int = Field(gt=0)
    """The amount received, in cents."""
    payee: str
    """The counterparty as the bank spells it."""


@final
class Invoice(BaseModel, frozen=True):
    """An invoice, the payload of the input fact `seeds/invoice:{number}`."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    number: str = Field(pattern=r"^[A-Za-z0-9-]+$")
    """The invoice number."""
    issued: date
    """When it was issued."""
    amount_cents: int = Field(gt=0)
    """The amount due, in cents."""
    customer: str
    """Who owes it, as the invoicing system spells it."""


BANK_LINES: Final[tuple[BankLine, ...]] = (
    BankLine(id="B-01", booked=date(2024, 3, 11), amount_cents=125_000, payee="ACME CORP"),
    BankLine(id="B-02", booked=date(2024, 3, 5), amount_cents=97_540, payee="GLOBEX LIMITED"),
    BankLine(id="B-03", booked=date(2024, 3, 11), amount_cents=430_000, payee="INITECH"),
    BankLine(id="B-04", booked=date(2024, 3, 7), amount_cents=61_575, payee="UMBRELA HEALTH"),
    BankLine(id="B-05", booked=date(2024, 3, 14), amount_cents=125_000, payee="ACME CORPORATION"),
    BankLine(id="B-06", booked=date(2024, 3, 15), amount_cents=1_195_000, payee="STARK IND"),
    BankLine(
        id="B-07", booked=date(2024, 3, 14), amount_cents=4_999, payee="CLOUDHOST SUBSCRIPTION"
    ),
)
"""The default statement: a bank fee, a typo, two Acme payments, and a card charge."""
INVOICES: Final[tuple[Invoice, ...]] = (
    Invoice(
        number="INV-1001", issued=date(2024, 3, 1), amount_cents=125_000, customer="Acme Corp."
    ),
    Invoice(number="INV-1002", issued=date(2024, 3, 3), amount_cents=98_040, customer="Globex Ltd"),
    Invoice(
        number="INV-1003", issued=date(2024, 3, 5), amount_cents=430_000, customer="Initech LLC"
    ),
    Invoice(
        number="INV-1004", issued=date(2024, 3, 6), amount_cents=61_575, customer="Umbrella Health"
    ),
    Invoice(
        number="INV-1005",
        issued=date(2024, 3, 8),
        amount_cents=1_200_000,
        customer="Stark Industries",
    ),
    Invoice(
        number="INV-1006",
        issued=date(2024, 3, 10),
        amount_cents=220_000,
        customer="Wayne Enterprises",
    ),
    Invoice(
        number="INV-1007", issued=date(2024, 3, 12), amount_cents=125_000, customer="Acme Corp."
    ),
)
"""The default invoices: six are paid; INV-1006 (Wayne Enterprises) is not."""


def _normalized(name: str) -> str:
    words = re.sub(r"[^a-z0-9 ]+", " ", name.lower()).split()
    return " ".join(word for word in words if word not in _SUFFIXES)


def name_dissimilarity(a: str, b: str) -> float:
    """How different two payee names are: 0 for the same name, up to 1 for nothing in common.

    Case, punctuation and company suffixes (`Ltd`, `Corp.`, ...) are ignored; the result is 1
    minus difflib's similarity ratio, to 3 decimals.
    """
    return round(1 - SequenceMatcher(None, _normalized(a), _normalized(b)).ratio(), 3)


def match_cost(line: BankLine, invoice: Invoice) -> float | None:
    """What matching `line` with `invoice` costs, or `None` when they cannot be the same payment.

    The sum of three parts, each scaled to 0..1 by its tolerance: the relative amount
    difference over `AMOUNT_TOLERANCE`, the days between the dates over `DATE_WINDOW_DAYS`,
    the payees' `name_dissimilarity` over `NAME_TOLERANCE`; rounded to 3 decimals. `None` when
    any part is above 1.
    """
    amount = abs(line.amount_cents - invoice.amount_cents) / invoice.amount_cents
    days = abs((line.booked - invoice.issued).days)
    name = name_dissimilarity(line.payee, invoice.customer)
    parts = (amount / AMOUNT_TOLERANCE, days / DATE_WINDOW_DAYS, name / NAME_TOLERANCE)
    if any(part > 1 for part in parts):
        return None
    return round(sum(parts), 3)


def _ledgers(ctx: Context) -> tuple[list[Fact], list[Fact]]:
    seeds = ctx.get(ContextKey.SEEDS)
    return (
        [fact for fact in seeds if fact.id.startswith(_BANK)],
        [fact for fact in seeds if fact.id.startswith(_INVOICE)],
    )


def _problem(lines: Sequence[BankLine], invoices: Sequence[Invoice]) -> AssignmentProblem:
    """The square problem: real pairs, plus one "leave it unmatched" option per line.

    Rows are the bank lines then one `unmatched:{invoice}` row per invoice; columns the
    invoices then one `unmatched:{line}` column per bank line. A bank line may take its own
    `unmatched:` column, an invoice its own `unmatched:` row, each for `UNMATCHED_COST`; two
    `unmatched:` labels pair up for free. So every line is either matched or left over, and
    a complete assignment always exists.
    """
    costs: list[tuple[float | None, ...]] = []
    for i, line in enumerate(lines):
        real = tuple(match_cost(line, invoice) for invoice in invoices)
        skip = tuple(UNMATCHED_COST if j == i else None for j in range(len(lines)))
        costs.append(real + skip)
    for i in range(len(invoices)):
        real = tuple(UNMATCHED_COST if j == i else None for j in range(len(invoices)))
        costs.append(real + (0.0,) * len(lines))
    return AssignmentProblem(
        rows=(*(line.id for line in lines), *(f"{_SKIP}{inv.number}" for inv in invoices)),
        columns=(*(inv.number for inv in invoices), *(f"{_SKIP}{line.id}" for line in lines)),
        costs=tuple(costs),
    )


def _problem_due(ctx: Context) -> ProposedFact | None:
    if ctx.find(ContextKey.HYPOTHESES, _PROBLEM_ID) is not None:
        return None
    bank, invoices = _ledgers(ctx)
    if not bank and not invoices:
        return None
    problem = _problem(
        [fact.payload_as(BankLine) for fact in bank],
        [fact.payload_as(Invoice) for fact in invoices],
    )
    allowed = sum(cost is not None for line in problem.costs[: len(bank)] for cost in line)
    return ProposedFact(
        key=ContextKey.HYPOTHESES,
        id=_PROBLEM_ID,
        content=(
            f"Match {len(bank)} bank lines with {len(invoices)} invoices: "
            f"{allowed - len(bank)} plausible pairs"
        ),
        payload=problem.model_dump(mode="json"),
        provenance="cost-matrix",
        evidence=tuple(fact.ref for fact in (*bank, *invoices)),
    )


@suggestor(
    name="cost-matrix",
    dependencies=[ContextKey.SEEDS],
    accepts=lambda ctx: _problem_due(ctx) is not None,
    writes=[ContextKey.HYPOTHESES],
)
async def _cost_matrix(ctx: Context) -> list[ProposedFact]:
    proposal = _problem_due(ctx)
    return [] if proposal is None else [proposal]


def _money(cents: int) -> str:
    return f"{cents / 100:,.2f}"


def _reports_due(ctx: Context) -> list[ProposedFact]:
    plan_fact = ctx.find(ContextKey.STRATEGIES, _PLAN_ID)
    if plan_fact is None:
        return []
    plan = plan_fact.payload_as(AssignmentPlan)
    bank = {fact.id.removeprefix(_BANK): fact for fact in _ledgers(ctx)[0]}
    invoices = {fact.id.removeprefix(_INVOICE): fact for fact in _ledgers(ctx)[1]}
    proposals: list[ProposedFact] = []
    for pair in plan.pairs:
        if pair.row in bank and pair.column in invoices:
            line_fact, invoice_fact = bank[pair.row], invoices[pair.column]
            line, invoice = line_fact.payload_as(BankLine), invoice_fact.payload_as(Invoice)
            difference = line.amount_cents - invoice.amount_cents
            days = (line.booked - invoice.issued).days
            proposals.append(
                ProposedFact(
                    key=ContextKey.EVALUATIONS,
                    id=f"match:{line.id}:{invoice.number}",
                    content=(
                        f"{line.id} ({line.payee}, {_money(line.amount_cents)}) pays "
                        f"{invoice.number} ({invoice.customer}, "
                        f"{_money(invoice.amount_cents)}): cost {pair.cost:.3f}"
                    ),
                    payload={
                        "bank": line.id,
                        "invoice": invoice.number,
                        "cost": pair.cost,
                        "amount_difference_cents": difference,
                        "days": days,
                    },
                    provenance="match-reporter",
                    evidence=(plan_fact.ref, line_fact.ref, invoice_fact.ref),
                )
            )
        elif pair.row in bank:
            line_fact = bank[pair.row]
            line = line_fact.payload_as(BankLine)
            proposals.append(
                _leftover(
                    line_fact,
                    f"bank line {line.id} ({line.payee}, {_money(line.amount_cents)} on "
                    f"{line.booked}) matches no invoice",
                    plan_fact,
                )
            )
        elif pair.column in invoices:
            invoice_fact = invoices[pair.column]
            invoice = invoice_fact.payload_as(Invoice)
            proposals.append(
                _leftover(
                    invoice_fact,
                    f"invoice {invoice.number} ({invoice.customer}, "
                    f"{_money(invoice.amount_cents)} issued {invoice.issued}) has no payment",
                    plan_fact,
                )
            )
    return [p for p in proposals if ctx.find(p.key, p.id) is None]


def _leftover(line: Fact, content: str, plan: Fact) -> ProposedFact:
    side, _, label = line.id.partition(":")
    return ProposedFact(
        key=ContextKey.SIGNALS,
        id=f"{_SKIP}{line.id}",
        content=content,
        payload={"ledger": side, "line": label},
        provenance="match-reporter",
        evidence=(plan.ref, line.ref),
    )


@suggestor(
    name="match-reporter",
    dependencies=[ContextKey.STRATEGIES],
    accepts=lambda ctx: bool(_reports_due(ctx)),
    writes=[ContextKey.EVALUATIONS, ContextKey.SIGNALS],
)
async def _match_reporter(ctx: Context) -> list[ProposedFact]:
    return _reports_due(ctx)


@final
class _EveryLineAccountedFor:
    """ACCEPTANCE: each bank line and invoice is matched exactly once or reported unmatched."""

    name = "every-line-accounted-for"
    invariant_class = InvariantClass.ACCEPTANCE

    def check(self, ctx: Context, /) -> InvariantResult:
        seen: dict[str, int] = {}
        for match in ctx.get(ContextKey.EVALUATIONS):
            _, line, invoice = match.id.split(":", 2)
            for ref in (f"{_BANK}{line}", f"{_INVOICE}{invoice}"):
                seen[ref] = seen.get(ref, 0) + 1
        for leftover in ctx.get(ContextKey.SIGNALS):
            ref = leftover.id.removeprefix(_SKIP)
            seen[ref] = seen.get(ref, 0) + 1
        bank, invoices = _ledgers(ctx)
        wrong = [fact.id for fact in (*bank, *invoices) if seen.get(fact.id, 0) != 1]
        if wrong:
            return InvariantResult.violated(f"not accounted for exactly once: {', '.join(wrong)}")
        return InvariantResult.ok()


def build_formation(
    bank_lines: Sequence[BankLine] = BANK_LINES, invoices: Sequence[Invoice] = INVOICES
) -> Formation:
    """The reconciliation of `bank_lines` against `invoices`."""
    statement = tuple(
        ProposedFact(
            key=ContextKey.SEEDS,
            id=f"{_BANK}{line.id}",
            content=f"{line.booked}: {_money(line.amount_cents)} from {line.payee}",
            payload=line.model_dump(mode="json"),
            provenance="input:bank-statement",
        )
        for line in bank_lines
    )
    ledger = tuple(
        ProposedFact(
            key=ContextKey.SEEDS,
            id=f"{_INVOICE}{invoice.number}",
            content=(
                f"{invoice.issued}: {invoice.number} to {invoice.customer}, "
                f"{_money(invoice.amount_cents)}"
            ),
            payload=invoice.model_dump(mode="json"),
            provenance="input:invoicing",
        )
        for invoice in invoices
    )
    return Formation(
        name="reconciliation",
        description=(
            "Match a bank statement with the invoices by an exact minimum-cost assignment "
            "over amount, date and payee; report what is left over on either side."
        ),
        suggestors=(_cost_matrix, AssignmentSuggestor(ContextKey.HYPOTHESES), _match_reporter),
        invariants=(_EveryLineAccountedFor(),),
        inputs=(*statement, *ledger),
    )


formation: Formation = build_formation()
"""The default ledgers: six matches, B-07 and INV-1006 left over; converges in 4 cycles."""
