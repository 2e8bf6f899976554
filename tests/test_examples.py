"""The bundled demos and the example scripts run and end as their docs say."""

import dataclasses
import importlib
import pkgutil
import runpy
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import converge_suggestors.demos
from converge import (
    Checkpoint,
    ContextKey,
    ConvergeResult,
    Formation,
    GateDecision,
    ProposedFact,
    StopReason,
)
from converge_suggestors.demos import (
    DEMOS,
    adaptive_gap_loop,
    fixed_point_vs_budget,
    hello_convergence,
    loan_application,
)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def demo(name: str) -> ModuleType:
    return importlib.import_module(f"converge_suggestors.demos.{name}")


def refs(result: ConvergeResult, key: ContextKey) -> list[str]:
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
    replayed = await formation.engine().replay(result.trace)
    assert replayed.integrity.merkle_root == result.integrity.merkle_root


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
