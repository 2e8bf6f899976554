"""Reconciliation: two noisy ledgers matched by an exact assignment, the leftovers reported.

The inputs are two ledgers that should agree but do not quite, each under a key of its own:
the bank statement (`recon.bank/{id}`, a `BankLine` each) and the invoices
(`recon.invoices/{number}`, an `Invoice` each). Amounts differ by a fee, dates by a few days,
payees are spelled the bank's way. Then:

1. Cycle 1: `cost-matrix` prices every (bank line, invoice) pair: the amount difference, the
   date distance and the payee's dissimilarity, each scaled to 0..1 by its tolerance
   (`AMOUNT_TOLERANCE`, `DATE_WINDOW_DAYS`, `NAME_TOLERANCE`), summed; a pair outside any
   tolerance is `None`, not allowed. Each line may also stay unmatched, for `UNMATCHED_COST`.
   The matrix is proposed as an [`AssignmentProblem`][converge_suggestors.AssignmentProblem]:
   `recon.problems/ledger-costs`.
2. Cycle 2: the [`AssignmentSuggestor`][converge_suggestors.AssignmentSuggestor] solves it
   exactly (SciPy's `linear_sum_assignment`): `strategies/assignment:ledger-costs`.
3. Cycle 3: `match-reporter` turns the plan into `recon.matches/{bank}:{invoice}` facts (a
   `Match` each) and reports each line left over, on either side, as
   `recon.leftovers/{ledger}:{line}` (a `Leftover` each).
4. Cycle 4: nothing is left to do; the run converges.

The ACCEPTANCE invariant `every-line-accounted-for` requires every bank line and every
invoice to be matched exactly once or reported unmatched.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import date
from difflib import SequenceMatcher
from typing import ClassVar, Final, Literal, final

from pydantic import BaseModel, ConfigDict, Field

from converge import (
    Context,
    ContextKey,
    Fact,
    Formation,
    InvariantClass,
    InvariantResult,
    Key,
    ProposedFact,
    ready,
    suggestor,
)
from converge_suggestors import AssignmentPlan, AssignmentProblem, AssignmentSuggestor

__all__ = [
    "AMOUNT_TOLERANCE",
    "BANK",
    "BANK_LINES",
    "DATE_WINDOW_DAYS",
    "INVOICED",
    "INVOICES",
    "LEFTOVERS",
    "MATCHES",
    "NAME_TOLERANCE",
    "PROBLEMS",
    "UNMATCHED_COST",
    "BankLine",
    "Invoice",
    "Leftover",
    "Match",
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

_PROBLEM_ID: Final = "ledger-costs"
_PLAN_ID: Final = f"assignment:{_PROBLEM_ID}"
_SKIP: Final = "unmatched:"
_SUFFIXES: Final = frozenset({"inc", "ltd", "limited", "llc", "corp", "corporation", "co", "gmbh"})


@final
class BankLine(BaseModel, frozen=True):
    """A line of the bank statement, the payload of the input fact `recon.bank/{id}`."""

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
    """An invoice, the payload of the input fact `recon.invoices/{number}`."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    number: str = Field(pattern=r"^[A-Za-z0-9-]+$")
    """The invoice number."""
    issued: date
    """When it was issued."""
    amount_cents: int = Field(gt=0)
    """The amount due, in cents."""
    customer: str
    """Who owes it, as the invoicing system spells it."""


@final
class Match(BaseModel, frozen=True):
    """A bank line paying an invoice, the payload of `recon.matches/{bank}:{invoice}`."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    bank: str
    """The bank line's id."""
    invoice: str
    """The invoice number."""
    cost: float
    """The pair's `match_cost`."""
    amount_difference_cents: int
    """The amount received minus the amount due, in cents."""
    days: int
    """Days from the invoice's issue to the booking."""


@final
class Leftover(BaseModel, frozen=True):
    """A line no match accounts for, the payload of `recon.leftovers/{ledger}:{line}`."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    ledger: Literal["bank", "invoice"]
    """Which side it is on."""
    line: str
    """The bank line's id or the invoice number."""


BANK: Final = Key("recon.bank", payload=BankLine)
"""The bank statement, one fact per line (id: the line's id); an input."""
INVOICED: Final = Key("recon.invoices", payload=Invoice)
"""The invoices, one fact each (id: the invoice number); an input."""
PROBLEMS: Final = Key("recon.problems", payload=AssignmentProblem)
"""The matching problem (id: `ledger-costs`), for the `AssignmentSuggestor`."""
MATCHES: Final = Key("recon.matches", payload=Match)
"""The matches (id: `{bank}:{invoice}`)."""
LEFTOVERS: Final = Key("recon.leftovers", payload=Leftover)
"""The lines left over (id: `bank:{id}` or `invoice:{number}`)."""


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
    bank, invoices = ctx.get(BANK), ctx.get(INVOICED)
    if not (bank or invoices) or not ready(ctx, needs=(), makes=PROBLEMS / _PROBLEM_ID):
        return None
    problem = _problem([BANK.of(fact) for fact in bank], [INVOICED.of(fact) for fact in invoices])
    allowed = sum(cost is not None for line in problem.costs[: len(bank)] for cost in line)
    return ProposedFact(
        key=PROBLEMS,
        id=_PROBLEM_ID,
        content=(
            f"Match {len(bank)} bank lines with {len(invoices)} invoices: "
            f"{allowed - len(bank)} plausible pairs"
        ),
        payload=problem,
        provenance="cost-matrix",
        evidence=tuple(fact.ref for fact in (*bank, *invoices)),
    )


@suggestor(
    name="cost-matrix",
    dependencies=[BANK, INVOICED],
    accepts=lambda ctx: _problem_due(ctx) is not None,
    writes=[PROBLEMS],
)
async def _cost_matrix(ctx: Context) -> list[ProposedFact]:
    proposal = _problem_due(ctx)
    return [] if proposal is None else [proposal]


def _money(cents: int) -> str:
    return f"{cents / 100:,.2f}"


def _report(ctx: Context, plan_fact: Fact, row: str, column: str, cost: float) -> ProposedFact:
    """What the plan says of one (row, column) pair: a match, a leftover, or nothing."""
    line_fact, invoice_fact = ctx.find(BANK, row), ctx.find(INVOICED, column)
    if line_fact is not None and invoice_fact is not None:
        line, invoice = BANK.of(line_fact), INVOICED.of(invoice_fact)
        return ProposedFact(
            key=MATCHES,
            id=f"{line.id}:{invoice.number}",
            content=(
                f"{line.id} ({line.payee}, {_money(line.amount_cents)}) pays "
                f"{invoice.number} ({invoice.customer}, "
                f"{_money(invoice.amount_cents)}): cost {cost:.3f}"
            ),
            payload=Match(
                bank=line.id,
                invoice=invoice.number,
                cost=cost,
                amount_difference_cents=line.amount_cents - invoice.amount_cents,
                days=(line.booked - invoice.issued).days,
            ),
            provenance="match-reporter",
            evidence=(plan_fact.ref, line_fact.ref, invoice_fact.ref),
        )
    if line_fact is not None:
        line = BANK.of(line_fact)
        why = (
            f"bank line {line.id} ({line.payee}, {_money(line.amount_cents)} on "
            f"{line.booked}) matches no invoice"
        )
        return _leftover(Leftover(ledger="bank", line=line.id), why, plan_fact, line_fact)
    assert invoice_fact is not None
    invoice = INVOICED.of(invoice_fact)
    why = (
        f"invoice {invoice.number} ({invoice.customer}, "
        f"{_money(invoice.amount_cents)} issued {invoice.issued}) has no payment"
    )
    return _leftover(Leftover(ledger="invoice", line=invoice.number), why, plan_fact, invoice_fact)


def _leftover(leftover: Leftover, content: str, plan: Fact, line: Fact) -> ProposedFact:
    return ProposedFact(
        key=LEFTOVERS,
        id=f"{leftover.ledger}:{leftover.line}",
        content=content,
        payload=leftover,
        provenance="match-reporter",
        evidence=(plan.ref, line.ref),
    )


def _reports_due(ctx: Context) -> list[ProposedFact]:
    """Every match and leftover the plan implies, once the plan is in and until all are made."""
    plan_fact = ctx.find(ContextKey.STRATEGIES, _PLAN_ID)
    if plan_fact is None:
        return []
    plan = plan_fact.payload_as(AssignmentPlan)
    real = [
        pair
        for pair in plan.pairs
        if ctx.find(BANK, pair.row) is not None or ctx.find(INVOICED, pair.column) is not None
    ]
    reports = [_report(ctx, plan_fact, pair.row, pair.column, pair.cost) for pair in real]
    if not ready(ctx, needs=[plan_fact.ref], makes=[r.ref for r in reports]):
        return []
    return [r for r in reports if ctx.find(r.key, r.id) is None]


@suggestor(
    name="match-reporter",
    dependencies=[ContextKey.STRATEGIES],
    accepts=lambda ctx: bool(_reports_due(ctx)),
    writes=[MATCHES, LEFTOVERS],
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
        accounted = [
            *(
                ref
                for match in MATCHES.read(ctx)
                for ref in (BANK / match.bank, INVOICED / match.invoice)
            ),
            *(
                BANK / left.line if left.ledger == "bank" else INVOICED / left.line
                for left in LEFTOVERS.read(ctx)
            ),
        ]
        for ref in accounted:
            seen[ref] = seen.get(ref, 0) + 1
        lines = (*ctx.get(BANK), *ctx.get(INVOICED))
        wrong = [fact.ref for fact in lines if seen.get(fact.ref, 0) != 1]
        if wrong:
            return InvariantResult.violated(f"not accounted for exactly once: {', '.join(wrong)}")
        return InvariantResult.ok()


def build_formation(
    bank_lines: Sequence[BankLine] = BANK_LINES, invoices: Sequence[Invoice] = INVOICES
) -> Formation:
    """The reconciliation of `bank_lines` against `invoices`."""
    statement = tuple(
        ProposedFact(
            key=BANK,
            id=line.id,
            content=f"{line.booked}: {_money(line.amount_cents)} from {line.payee}",
            payload=line,
            provenance="input:bank-statement",
        )
        for line in bank_lines
    )
    ledger = tuple(
        ProposedFact(
            key=INVOICED,
            id=invoice.number,
            content=(
                f"{invoice.issued}: {invoice.number} to {invoice.customer}, "
                f"{_money(invoice.amount_cents)}"
            ),
            payload=invoice,
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
        suggestors=(_cost_matrix, AssignmentSuggestor(PROBLEMS), _match_reporter),
        invariants=(_EveryLineAccountedFor(),),
        inputs=(*statement, *ledger),
    )


formation: Formation = build_formation()
"""The default ledgers: six matches, B-07 and INV-1006 left over; converges in 4 cycles."""
