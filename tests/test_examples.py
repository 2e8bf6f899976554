"""The bundled demos and the example scripts run and end as their docs say."""

import dataclasses
import importlib
import pkgutil
import re
import runpy
import subprocess
import sys
from datetime import date
from pathlib import Path
from types import ModuleType

import pytest

import converge_suggestors.demos
from converge import (
    AnyKey,
    Checkpoint,
    ContextKey,
    ConvergeResult,
    Formation,
    GateDecision,
    ProposedFact,
    StopReason,
    verify,
)
from converge._cli._main import DEFAULT_DEMO
from converge_suggestors import AssignmentPlan
from converge_suggestors.demos import (
    DEMOS,
    adaptive_gap_loop,
    fixed_point_vs_budget,
    hello_convergence,
    loan_application,
    reconciliation,
    vendor_selection,
)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def demo(name: str) -> ModuleType:
    return importlib.import_module(f"converge_suggestors.demos.{name}")


def refs(result: ConvergeResult, key: AnyKey) -> list[str]:
    return [fact.id for fact in result.context.get(key)]


# The demos package


def test_demos_lists_every_demo_module() -> None:
    modules = {
        info.name
        for info in pkgutil.iter_modules(converge_suggestors.demos.__path__)
        if not info.name.startswith("_")
    }
    assert set(DEMOS) == modules
    assert len(DEMOS) == len(set(DEMOS))
    assert converge_suggestors.demos.__all__ == ["DEMOS"]


@pytest.mark.parametrize("name", DEMOS)
def test_demo_exposes_a_documented_formation(name: str) -> None:
    module = demo(name)
    assert "formation" in module.__all__
    assert all(hasattr(module, public) for public in module.__all__)
    formation = module.formation
    assert isinstance(formation, Formation)
    assert formation.name == name
    assert formation.description
    assert module.__doc__


def test_importing_the_packages_imports_no_demo() -> None:
    code = (
        "import sys, converge_suggestors; a = 'converge_suggestors.demos' in sys.modules; "
        "import converge_suggestors.demos; "
        "b = any(m.startswith('converge_suggestors.demos.') for m in sys.modules); print(a, b)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("name", DEMOS)
async def test_demo_run_is_deterministic(name: str) -> None:
    formation: Formation = demo(name).formation
    first, second = await formation.run(), await formation.run()
    assert first.run_id != second.run_id
    assert first.stop_reason is second.stop_reason
    assert first.cycles == second.cycles
    assert first.integrity == second.integrity


@pytest.mark.parametrize("name", DEMOS)
async def test_demo_run_replays_to_the_same_root(name: str) -> None:
    formation: Formation = demo(name).formation
    result = await formation.run()
    assert verify(result.context, result.integrity)
    replayed = await formation.engine().replay(result.trace)
    assert replayed.integrity.merkle_root == result.integrity.merkle_root
    assert verify(replayed.context, result.integrity)


# hello_convergence


def test_hello_convergence_converges_in_three_cycles(capsys: pytest.CaptureFixture[str]) -> None:
    namespace = runpy.run_path(str(EXAMPLES / "hello_convergence.py"))
    result = namespace["main"]()
    assert result.stop_reason is StopReason.CONVERGED
    assert result.cycles == 3
    answer = result.context.find(ContextKey.HYPOTHESES, "answer")
    assert answer is not None
    assert answer.evidence == ("seeds/question",)
    out = capsys.readouterr().out
    assert "stop reason : converged" in out
    assert "verified    : True" in out


def test_hello_convergence_runs_as_a_script() -> None:
    completed = subprocess.run(
        [sys.executable, str(EXAMPLES / "hello_convergence.py")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "cycle 2: ran react:hypotheses/answer; promoted hypotheses/answer" in completed.stdout
    assert completed.stderr == ""


async def test_hello_convergence_demo_is_the_example_formation() -> None:
    result = await hello_convergence.formation.run()
    assert (result.stop_reason, result.cycles) == (StopReason.CONVERGED, 3)
    assert [fact.ref for fact in result.context.facts()] == ["seeds/question", "hypotheses/answer"]


# loan_application

GATE = "gate:3:evaluations/decision"


async def test_loan_application_runs_the_checks_in_one_cycle_and_pauses_for_one_gate() -> None:
    paused = await loan_application.formation.run()
    assert paused.stop_reason is StopReason.AWAITING_HUMAN
    assert paused.cycles == 3
    checks = ("identity-check", "income-check", "credit-check")
    assert [cycle.eligible for cycle in paused.trace.cycles] == [
        checks,
        ("underwriter",),
        ("ValidationAgent",),
    ]
    assert refs(paused, ContextKey.SIGNALS) == ["identity", "income", "credit"]
    staged = paused.context.find(ContextKey.PROPOSALS, "decision")
    assert staged is not None
    assert staged.target is ContextKey.EVALUATIONS
    assert staged.evidence == ("signals/identity", "signals/income", "signals/credit")
    assert staged.provenance == "underwriter:scripted-underwriter"
    [request] = paused.pending
    assert request.gate_id == GATE
    assert request.suggestor == "ValidationAgent"
    assert request.proposal.confidence == 0.6
    assert request.summary.startswith("Approve:")
    assert paused.context.find(ContextKey.EVALUATIONS, "decision") is None
    assert paused.checkpoint is not None


async def test_loan_application_converges_when_the_officer_approves() -> None:
    engine = loan_application.formation.engine()
    paused = await engine.run(inputs=loan_application.formation.inputs)
    assert paused.checkpoint is not None
    approve = [GateDecision.approve(GATE, by="loan-officer")]
    resumed = await engine.resume(paused.checkpoint, approve)
    assert resumed.stop_reason is StopReason.CONVERGED
    assert resumed.cycles == 4
    assert resumed.pending == ()
    decision = resumed.context.find(ContextKey.EVALUATIONS, "decision")
    assert decision is not None
    assert decision.payload == {"decision": "approve"}
    assert decision.promotion.gate == "human"
    assert decision.promotion.approved_by == "loan-officer"
    again = await loan_application.formation.engine().resume(paused.checkpoint, approve)
    assert again.integrity == resumed.integrity


async def test_loan_application_resumes_from_json_in_a_fresh_engine() -> None:
    paused = await loan_application.formation.run()
    assert paused.checkpoint is not None
    checkpoint = Checkpoint.model_validate_json(paused.checkpoint.model_dump_json())
    engine = loan_application.build_formation().engine()
    resumed = await engine.resume(checkpoint, [GateDecision.approve(GATE, by="loan-officer")])
    assert resumed.stop_reason is StopReason.CONVERGED
    assert resumed.run_id == paused.run_id
    replayed = await engine.replay(resumed.trace)
    assert replayed.integrity.merkle_root == resumed.integrity.merkle_root


async def test_loan_application_rejected_decision_leaves_no_decision() -> None:
    paused = await loan_application.formation.run()
    assert paused.checkpoint is not None
    reject = [GateDecision.reject(GATE, by="loan-officer", reason="ask for a co-signer")]
    resumed = await loan_application.formation.engine().resume(paused.checkpoint, reject)
    assert resumed.stop_reason is StopReason.CONVERGED
    assert resumed.context.find(ContextKey.EVALUATIONS, "decision") is None
    assert refs(resumed, ContextKey.DIAGNOSTIC) == ["hitl-rejected:decision"]


@pytest.mark.parametrize(
    ("changes", "decision", "confidence"),
    [
        ({"credit_score": 720}, "approve", 0.92),
        ({"credit_score": 600}, "decline", 0.85),
        ({"monthly_debts": 2_000}, "decline", 0.9),
        ({"documents_match": False}, "decline", 0.95),
    ],
)
async def test_loan_application_confident_decisions_need_no_human(
    changes: dict[str, object], decision: str, confidence: float
) -> None:
    applicant = loan_application.Applicant.model_validate(
        {**loan_application.APPLICANT.model_dump(), **changes}
    )
    result = await loan_application.build_formation(applicant).run()
    assert result.stop_reason is StopReason.CONVERGED
    assert result.cycles == 4
    fact = result.context.find(ContextKey.EVALUATIONS, "decision")
    assert fact is not None
    assert fact.payload == {"decision": decision}
    assert fact.confidence == confidence
    assert fact.promotion.gate == "engine"


def test_loan_application_gates_only_validated_low_confidence_proposals() -> None:
    needs_review = loan_application.needs_review

    def proposal(key: ContextKey, confidence: float) -> ProposedFact:
        target = ContextKey.EVALUATIONS if key is ContextKey.PROPOSALS else None
        return ProposedFact(
            key=key, id="d", content="c", provenance="p", confidence=confidence, target=target
        )

    assert needs_review(proposal(ContextKey.EVALUATIONS, 0.6))
    assert not needs_review(proposal(ContextKey.EVALUATIONS, 0.75))
    assert not needs_review(proposal(ContextKey.PROPOSALS, 0.6))


# fixed_point_vs_budget


async def test_fixed_point_vs_budget_converges_with_the_generous_budget() -> None:
    result = await fixed_point_vs_budget.formation.run()
    assert result.stop_reason is StopReason.CONVERGED
    assert result.cycles == 7
    assert refs(result, ContextKey.HYPOTHESES) == ["x1", "x2", "x3", "x4", "x5"]
    answer = result.context.find(ContextKey.EVALUATIONS, "answer")
    assert answer is not None
    assert answer.content == "sqrt(2) = 1.414213562373 (settled at x5)"
    assert answer.evidence == ("hypotheses/x5",)


async def test_fixed_point_vs_budget_stops_with_the_tight_budget_and_keeps_partial_work() -> None:
    generous = await fixed_point_vs_budget.formation.run()
    tight = await fixed_point_vs_budget.tight_formation.run()
    assert tight.stop_reason is StopReason.CYCLE_BUDGET_EXHAUSTED
    assert tight.detail == "max_cycles (4)"
    assert tight.cycles == 4
    assert refs(tight, ContextKey.HYPOTHESES) == ["x1", "x2", "x3", "x4"]
    assert tight.context.find(ContextKey.EVALUATIONS, "answer") is None
    prefix = [fact.digest for fact in generous.context.facts()][:5]
    assert [fact.digest for fact in tight.context.facts()] == prefix


@pytest.mark.parametrize(
    ("max_cycles", "stop_reason"),
    [(6, StopReason.CYCLE_BUDGET_EXHAUSTED), (7, StopReason.CONVERGED)],
)
async def test_fixed_point_vs_budget_needs_seven_cycles(
    max_cycles: int, stop_reason: StopReason
) -> None:
    formation = fixed_point_vs_budget.with_budget(max_cycles)
    assert dataclasses.replace(formation, budget=fixed_point_vs_budget.formation.budget) == (
        fixed_point_vs_budget.formation
    )
    result = await formation.run()
    assert result.stop_reason is stop_reason


# adaptive_gap_loop


async def test_adaptive_gap_loop_converges_in_twelve_cycles_with_no_open_gap() -> None:
    result = await adaptive_gap_loop.formation.run()
    assert result.stop_reason is StopReason.CONVERGED
    assert result.cycles == 12
    assert refs(result, ContextKey.CONSTRAINTS) == [
        "gap:app",
        "gap:api",
        "gap:web",
        "gap:auth",
        "gap:db",
    ]
    closed = {gap.removeprefix("gap:") for gap in refs(result, ContextKey.CONSTRAINTS)}
    assert {c.removeprefix("closed:") for c in refs(result, ContextKey.EVALUATIONS)} == closed
    surveyed = refs(result, ContextKey.SIGNALS)
    assert "surveyed:legacy-cli" not in surveyed
    assert surveyed.count("surveyed:crypto") == 1
    assert refs(result, ContextKey.STRATEGIES).count("survey:crypto") == 1


@pytest.mark.parametrize(("depth", "cycles"), [(1, 2), (2, 6), (5, 15)])
async def test_adaptive_gap_loop_cycles_grow_with_the_depth_of_the_graph(
    depth: int, cycles: int
) -> None:
    chain = {f"a{i}": (f"a{i + 1}",) if i + 1 < depth else () for i in range(depth)}
    result = await adaptive_gap_loop.build_formation(chain, root="a0").run()
    assert result.stop_reason is StopReason.CONVERGED
    assert result.cycles == cycles
    assert result.context.count(ContextKey.SIGNALS) == depth


async def test_adaptive_gap_loop_fails_acceptance_while_a_gap_stays_open() -> None:
    formation = adaptive_gap_loop.formation
    without_closer = dataclasses.replace(
        formation, suggestors=tuple(s for s in formation.suggestors if s.name != "gap-closer")
    )
    result = await without_closer.run()
    assert result.stop_reason is StopReason.INVARIANT_VIOLATED
    assert [v.invariant for v in result.trace.cycles[-1].violations] == ["no-open-gap"]


# reconciliation

EXPECTED_MATCHES = [
    "B-01:INV-1001",
    "B-02:INV-1002",
    "B-03:INV-1003",
    "B-04:INV-1004",
    "B-05:INV-1007",
    "B-06:INV-1005",
]


async def test_reconciliation_matches_six_pairs_and_reports_both_leftovers() -> None:
    result = await reconciliation.formation.run()
    assert result.stop_reason is StopReason.CONVERGED
    assert result.cycles == 4
    assert [cycle.eligible for cycle in result.trace.cycles] == [
        ("cost-matrix",),
        ("assignment",),
        ("match-reporter",),
        (),
    ]
    assert refs(result, reconciliation.MATCHES) == EXPECTED_MATCHES
    assert refs(result, reconciliation.LEFTOVERS) == ["bank:B-07", "invoice:INV-1006"]
    assert refs(result, ContextKey.DIAGNOSTIC) == []
    b02 = result.context.find(reconciliation.MATCHES, "B-02:INV-1002")
    assert b02 is not None
    assert reconciliation.MATCHES.of(b02) == reconciliation.Match(
        bank="B-02", invoice="INV-1002", cost=0.455, amount_difference_cents=-500, days=2
    )
    assert b02.evidence == (
        "strategies/assignment:ledger-costs",
        "recon.bank/B-02",
        "recon.invoices/INV-1002",
    )
    leftover = result.context.find(reconciliation.LEFTOVERS, "invoice:INV-1006")
    assert leftover is not None
    assert reconciliation.LEFTOVERS.of(leftover) == reconciliation.Leftover(
        ledger="invoice", line="INV-1006"
    )
    assert leftover.content == (
        "invoice INV-1006 (Wayne Enterprises, 2,200.00 issued 2024-03-10) has no payment"
    )


async def test_reconciliation_assignment_is_optimal_where_greedy_is_not() -> None:
    result = await reconciliation.formation.run()
    [problem] = reconciliation.PROBLEMS.read(result.context)
    plan_fact = result.context.find(ContextKey.STRATEGIES, "assignment:ledger-costs")
    assert plan_fact is not None
    plan = plan_fact.payload_as(AssignmentPlan)
    assert len(problem.rows) == len(problem.columns) == 14
    b01 = problem.costs[problem.rows.index("B-01")]
    # B-01's cheapest pair is INV-1007, but only INV-1007 fits B-05: the exact solution
    # gives B-01 to INV-1001, which a greedy cheapest-first matcher would leave unpaid.
    assert (b01[problem.columns.index("INV-1001")], b01[problem.columns.index("INV-1007")]) == (
        1.0,
        0.1,
    )
    b05 = problem.costs[problem.rows.index("B-05")]
    assert b05[problem.columns.index("INV-1001")] is None
    assert plan.total_cost == pytest.approx(5.891)
    assert plan.unassigned_rows == plan.unassigned_columns == ()


def test_reconciliation_costs_combine_amount_date_and_name() -> None:
    bank = {line.id: line for line in reconciliation.BANK_LINES}
    invoices = {invoice.number: invoice for invoice in reconciliation.INVOICES}
    assert reconciliation.name_dissimilarity("GLOBEX LIMITED", "Globex Ltd") == 0.0
    assert reconciliation.name_dissimilarity("UMBRELA HEALTH", "Umbrella Health") == 0.034
    assert reconciliation.match_cost(bank["B-04"], invoices["INV-1004"]) == 0.168
    assert reconciliation.match_cost(bank["B-06"], invoices["INV-1005"]) == 1.468
    assert reconciliation.match_cost(bank["B-07"], invoices["INV-1006"]) is None  # amount
    assert reconciliation.match_cost(bank["B-05"], invoices["INV-1001"]) is None  # 13 days
    assert reconciliation.match_cost(bank["B-03"], invoices["INV-1006"]) is None  # payee


@pytest.mark.parametrize(
    ("bank_lines", "invoices", "leftovers"),
    [
        (2, 0, ["bank:B-01", "bank:B-02"]),
        (0, 2, ["invoice:INV-1001", "invoice:INV-1002"]),
        (7, 5, ["bank:B-05", "bank:B-07"]),
    ],
)
async def test_reconciliation_reports_every_leftover_when_the_ledgers_differ_in_length(
    bank_lines: int, invoices: int, leftovers: list[str]
) -> None:
    formation = reconciliation.build_formation(
        reconciliation.BANK_LINES[:bank_lines], reconciliation.INVOICES[:invoices]
    )
    result = await formation.run()
    assert result.stop_reason is StopReason.CONVERGED
    assert result.cycles == 4
    assert refs(result, reconciliation.LEFTOVERS) == leftovers


async def test_reconciliation_with_no_lines_has_nothing_to_do() -> None:
    result = await reconciliation.build_formation((), ()).run()
    assert (result.stop_reason, result.cycles) == (StopReason.CONVERGED, 1)


async def test_reconciliation_prefers_leaving_a_line_over_a_costly_match() -> None:
    line = reconciliation.BankLine(
        id="B-1", booked=date(2024, 3, 10), amount_cents=101_900, payee="NORTHWIND"
    )
    invoice = reconciliation.Invoice(
        number="I-1", issued=date(2024, 3, 1), amount_cents=100_000, customer="Northwind Traders"
    )
    cost = reconciliation.match_cost(line, invoice)
    assert cost is not None
    assert cost > 2 * reconciliation.UNMATCHED_COST
    result = await reconciliation.build_formation([line], [invoice]).run()
    assert refs(result, reconciliation.MATCHES) == []
    assert refs(result, reconciliation.LEFTOVERS) == ["bank:B-1", "invoice:I-1"]


async def test_reconciliation_fails_acceptance_when_lines_go_unreported() -> None:
    formation = reconciliation.formation
    without_reporter = dataclasses.replace(
        formation, suggestors=tuple(s for s in formation.suggestors if s.name != "match-reporter")
    )
    result = await without_reporter.run()
    assert result.stop_reason is StopReason.INVARIANT_VIOLATED
    [violation] = result.trace.cycles[-1].violations
    assert violation.invariant == "every-line-accounted-for"
    assert violation.reason is not None
    assert violation.reason.startswith(
        "not accounted for exactly once: recon.bank/B-01, recon.bank/B-02, "
    )


# vendor_selection

COMMITMENT_GATE = "gate:6:vendor.commitments/acme"
EVALUATORS = ("price-evaluator", "compliance-evaluator", "risk-evaluator", "timeline-evaluator")


def test_vendor_selection_is_the_default_demo() -> None:
    assert DEFAULT_DEMO == "vendor_selection"
    assert DEMOS[-1] == DEFAULT_DEMO


async def test_vendor_selection_evaluates_in_parallel_and_pauses_on_the_commitment() -> None:
    paused = await vendor_selection.formation.run()
    assert paused.stop_reason is StopReason.AWAITING_HUMAN
    assert paused.cycles == 6
    assert [cycle.eligible for cycle in paused.trace.cycles] == [
        EVALUATORS,
        ("consensus",),
        ("policy-gate",),
        ("consensus",),
        ("policy-gate",),
        ("commitment",),
    ]
    vendors = ("acme", "birch", "cobalt", "dune")
    assert refs(paused, vendor_selection.EVALUATIONS) == [
        f"{criterion}:{vendor}" for criterion in vendor_selection.CRITERIA for vendor in vendors
    ]
    assert refs(paused, vendor_selection.RECOMMENDATIONS) == ["dune", "acme"]
    decisions = {
        fact.id: (fact.payload["decision"], fact.payload["policies"])
        for fact in paused.context.get(ContextKey.CONSTRAINTS)
        if isinstance(fact.payload, dict)
    }
    assert decisions == {
        "policy-gate:dune": ("deny", ["spend-limit"]),
        "policy-gate:acme": ("allow", ["consensus-recommends"]),
    }
    acme = paused.context.find(vendor_selection.RECOMMENDATIONS, "acme")
    assert acme is not None
    ranking = vendor_selection.RECOMMENDATIONS.of(acme).ranking
    assert [(entry.vendor, entry.score) for entry in ranking] == [
        ("dune", 79.0),
        ("acme", 74.75),
        ("birch", 70.05),
        ("cobalt", 63.25),
    ]
    assert acme.evidence[-1] == "vendor.recommendations/dune"
    [request] = paused.pending
    assert request.gate_id == COMMITMENT_GATE
    assert request.suggestor == "commitment"
    assert vendor_selection.COMMITMENTS.of(request.proposal) == vendor_selection.Commitment(
        vendor="acme", name="Acme Cloud", spend=420_000
    )
    assert request.proposal.evidence == (
        "vendor.recommendations/acme",
        "constraints/policy-gate:acme",
    )
    assert not paused.context.has(vendor_selection.COMMITMENTS)
    assert paused.checkpoint is not None


async def test_vendor_selection_converges_when_the_commitment_is_approved() -> None:
    engine = vendor_selection.formation.engine()
    paused = await engine.run(inputs=vendor_selection.formation.inputs)
    assert paused.checkpoint is not None
    approve = [GateDecision.approve(COMMITMENT_GATE, by="jane")]
    resumed = await engine.resume(paused.checkpoint, approve)
    assert resumed.stop_reason is StopReason.CONVERGED
    assert resumed.cycles == 7
    assert resumed.pending == ()
    commitment = resumed.context.find(vendor_selection.COMMITMENTS, "acme")
    assert commitment is not None
    assert commitment.content == "Commit to Acme Cloud for 420,000 a year"
    assert commitment.promotion.gate == "human"
    assert commitment.promotion.approved_by == "jane"
    assert verify(resumed.context, resumed.integrity)
    assert resumed.integrity.merkle_root == (
        "058379eb6d357f0fcb2032cfb43fccc96b553a821b6e36b326fede2ad18650e5"
    )
    checkpoint = Checkpoint.model_validate_json(paused.checkpoint.model_dump_json())
    fresh = vendor_selection.build_formation().engine()
    again = await fresh.resume(checkpoint, approve)
    assert again.integrity == resumed.integrity
    replayed = await fresh.replay(again.trace)
    assert replayed.integrity.merkle_root == resumed.integrity.merkle_root


async def test_vendor_selection_rejected_commitment_leaves_no_commitment() -> None:
    paused = await vendor_selection.formation.run()
    assert paused.checkpoint is not None
    reject = [GateDecision.reject(COMMITMENT_GATE, by="jane", reason="renegotiate the price")]
    resumed = await vendor_selection.formation.engine().resume(paused.checkpoint, reject)
    assert resumed.stop_reason is StopReason.CONVERGED
    assert not resumed.context.has(vendor_selection.COMMITMENTS)
    assert refs(resumed, ContextKey.DIAGNOSTIC) == ["hitl-rejected:acme"]


def _vendor(vendor_id: str, **changes: object) -> vendor_selection.Vendor:
    [vendor] = [v for v in vendor_selection.VENDORS if v.id == vendor_id]
    return vendor_selection.Vendor.model_validate({**vendor.model_dump(), **changes})


async def test_vendor_selection_skips_a_vendor_without_the_certification() -> None:
    price_only: dict[vendor_selection.Criterion, int] = {
        "price": 100,
        "compliance": 0,
        "risk": 0,
        "timeline": 0,
    }
    formation = vendor_selection.build_formation(weights=price_only, review_above=400_000)
    result = await formation.run()
    assert result.stop_reason is StopReason.CONVERGED
    assert result.cycles == 7
    assert refs(result, vendor_selection.RECOMMENDATIONS) == ["birch", "cobalt"]
    birch = result.context.find(ContextKey.CONSTRAINTS, "policy-gate:birch")
    assert birch is not None
    assert isinstance(birch.payload, dict)
    assert birch.payload["policies"] == ["certification-required"]
    commitment = result.context.find(vendor_selection.COMMITMENTS, "cobalt")
    assert commitment is not None
    assert vendor_selection.COMMITMENTS.of(commitment) == vendor_selection.Commitment(
        vendor="cobalt", name="Cobalt Data", spend=380_000
    )
    assert commitment.promotion.gate == "engine"  # 380,000 is not above 400,000


async def test_vendor_selection_small_spend_commits_without_a_human() -> None:
    cheap = _vendor("acme", annual_cost=200_000)
    result = await vendor_selection.build_formation([cheap]).run()
    assert result.stop_reason is StopReason.CONVERGED
    assert result.cycles == 5
    commitment = result.context.find(vendor_selection.COMMITMENTS, "acme")
    assert commitment is not None
    assert commitment.promotion.gate == "engine"


@pytest.mark.parametrize(
    ("vendor", "policy"),
    [
        (_vendor("birch"), "certification-required"),
        (_vendor("dune"), "spend-limit"),
        (_vendor("acme", financial_rating="C", incidents_last_year=3), "no-high-risk-vendor"),
    ],
)
async def test_vendor_selection_reports_when_no_vendor_passes_the_policy(
    vendor: vendor_selection.Vendor, policy: str
) -> None:
    result = await vendor_selection.build_formation([vendor]).run()
    assert result.stop_reason is StopReason.CONVERGED
    assert result.cycles == 5
    decision = result.context.find(ContextKey.CONSTRAINTS, f"policy-gate:{vendor.id}")
    assert decision is not None
    assert isinstance(decision.payload, dict)
    assert (decision.payload["decision"], decision.payload["policies"]) == ("deny", [policy])
    assert refs(result, ContextKey.DIAGNOSTIC) == ["no-eligible-vendor"]
    assert not result.context.has(vendor_selection.COMMITMENTS)


def test_vendor_selection_gates_only_a_high_spend_commitment() -> None:
    needs_approval = vendor_selection.needs_approval

    def proposal(key: AnyKey, spend: int | str) -> ProposedFact:
        return ProposedFact(
            key=key,
            id="acme",
            content="c",
            provenance="p",
            payload={"vendor": "acme", "name": "Acme Cloud", "spend": spend},
        )

    commitment = vendor_selection.COMMITMENTS
    assert needs_approval(proposal(commitment, 250_001))
    assert not needs_approval(proposal(commitment, 250_000))
    assert not needs_approval(proposal(commitment, 300_000), review_above=300_000)
    assert needs_approval(proposal(commitment, "a lot"))
    assert not needs_approval(proposal(ContextKey.STRATEGIES, 900_000))


def test_vendor_selection_weights_must_cover_the_four_criteria() -> None:
    with pytest.raises(ValueError, match="weights must give each"):
        vendor_selection.build_formation(weights={"price": 1})
    with pytest.raises(ValueError, match="must not all be 0"):
        vendor_selection.build_formation(
            weights={"price": 0, "compliance": 0, "risk": 0, "timeline": 0}
        )


def _converge(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from converge.cli import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True, check=False
    )


@pytest.mark.slow
def test_vendor_selection_pauses_and_resumes_from_the_command_line(tmp_path: Path) -> None:
    demo_run = _converge(tmp_path, "demo")
    assert demo_run.returncode == 6, demo_run.stderr
    assert "converge: running vendor_selection" in demo_run.stdout
    assert f"{COMMITMENT_GATE}: Commit to Acme Cloud for 420,000 a year" in demo_run.stdout
    found = re.search(r"saved run\s+(\w+)", demo_run.stdout)
    assert found is not None
    run_id = found[1]
    review = _converge(tmp_path, "review", run_id)
    assert review.returncode == 6
    assert f"gate {COMMITMENT_GATE}" in review.stdout
    resume = _converge(tmp_path, "resume", run_id, "--approve", COMMITMENT_GATE, "--by", "jane")
    assert resume.returncode == 0, resume.stderr
    assert "stop reason  converged" in resume.stdout
    root = "058379eb6d357f0fcb2032cfb43fccc96b553a821b6e36b326fede2ad18650e5"
    checked = _converge(tmp_path, "verify", run_id)
    assert (checked.returncode, checked.stdout) == (
        0,
        f"verified: run {run_id}, 25 facts, clock 25, root {root}; "
        "not authenticated (no signing key is set)\n",
    )
    replayed = _converge(tmp_path, "replay", run_id)
    assert (replayed.returncode, replayed.stdout) == (
        0,
        f"replayed: run {run_id}, 7 cycles, no suggestor called, same root {root}\n",
    )


# The example scripts


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("hello_convergence", ["stop reason : converged (fixed point reached)"]),
        (
            "loan_application",
            [
                f"pending     : {GATE} from ValidationAgent",
                "stop reason : converged (fixed point reached)",
            ],
        ),
        (
            "fixed_point_vs_budget",
            [
                "max_cycles=20: converged (fixed point reached) after 7 cycles",
                "max_cycles=4: cycle_budget_exhausted (max_cycles (4)) after 4 cycles",
            ],
        ),
        ("adaptive_gap_loop", ["cycles      : 12", "pending     : 0"]),
        pytest.param(
            "reconciliation",
            [
                "matches (6):",
                "  bank line B-07 (CLOUDHOST SUBSCRIPTION, 49.99 on 2024-03-14) matches no invoice",
                "total cost  : 5.891",
            ],
            marks=pytest.mark.slow,
        ),
        (
            "vendor_selection",
            [
                f"pending     : {COMMITMENT_GATE} from commitment",
                "vendor.commitments/acme: Commit to Acme Cloud for 420,000 a year "
                "[approved by procurement-lead]",
                "stop reason : converged (fixed point reached)",
            ],
        ),
    ],
)
def test_example_script_runs(name: str, expected: list[str]) -> None:
    completed = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr == ""
    for line in expected:
        assert line in completed.stdout


def test_every_demo_has_an_example_script() -> None:
    scripts = {path.stem for path in EXAMPLES.glob("*.py")}
    assert set(DEMOS) <= scripts
