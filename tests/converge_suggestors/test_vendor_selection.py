"""The default demo without Cedar: its policy gate checks the same rules in Python, and says so.

`pip install converge-engine` brings no `cedarpy` (the `policy` extra). The demo's formation
then uses `DemoRules`, which must decide every request as Cedar decides it under `POLICIES`,
so the run reaches the same human gate; other policies still need Cedar.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from converge import ContextKey, GateDecision, StopReason
from converge_suggestors import EntityUid, PolicyRequest, PolicySuggestor
from converge_suggestors.demos import vendor_selection
from converge_suggestors.demos.vendor_selection import (
    POLICIES,
    POLICY_GATE,
    RECOMMENDATIONS,
    SPEND_LIMIT,
    WITHOUT_CEDAR,
    DemoRules,
    build_formation,
)

GATE = "gate:6:vendor.commitments/acme"


@pytest.fixture
def without_cedar(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a venv without the `policy` extra: `cedarpy` cannot be imported."""
    monkeypatch.setitem(sys.modules, "cedarpy", None)
    assert not vendor_selection.cedar_installed()


def requests() -> list[PolicyRequest]:
    """Requests around each rule's edge, and some no rule expects."""
    grid = itertools.product(
        ("consensus", "intruder"),
        ("recommend", "approve"),
        (SPEND_LIMIT - 1, SPEND_LIMIT, SPEND_LIMIT + 1),
        ((), ("ISO-27001",), ("SOC2", "GDPR"), ("ISO-27001", "SOC2")),
        ("low", "medium", "high"),
    )
    return [
        PolicyRequest(
            principal=EntityUid(type="Agent", id=principal),
            action=EntityUid(type="Action", id=action),
            resource=EntityUid(type="Vendor", id="v"),
            context={
                "annual_cost": cost,
                "certifications": list(certifications),
                "risk_level": risk,
            },
        )
        for principal, action, cost, certifications, risk in grid
    ]


def test_demo_rules_decide_every_request_as_cedar_does() -> None:
    pytest.importorskip("cedarpy")
    cedar = PolicySuggestor(
        POLICIES,
        watch=RECOMMENDATIONS,
        request=vendor_selection.recommendation_request,
        output_key=ContextKey.CONSTRAINTS,
    )
    rules = DemoRules()
    for request in requests():
        assert rules.decide(request) == cedar.decide(request), request


@pytest.mark.usefixtures("without_cedar")
async def test_the_default_demo_without_cedar_pauses_at_the_same_gate_and_says_why() -> None:
    formation = build_formation()
    assert formation.description.endswith(f" {WITHOUT_CEDAR}.")
    assert [type(s).__name__ for s in formation.suggestors].count("DemoRules") == 1
    paused = await formation.run()
    assert paused.stop_reason is StopReason.AWAITING_HUMAN
    assert paused.cycles == 6
    assert [request.gate_id for request in paused.pending] == [GATE]
    assert paused.ok is False  # it has not converged yet; nothing failed
    assert paused.failures == ()
    decisions = {
        fact.id: (fact.payload["decision"], fact.payload["policies"], fact.content)
        for fact in paused.context.get(ContextKey.CONSTRAINTS)
        if isinstance(fact.payload, dict)
    }
    assert {ident: decision[:2] for ident, decision in decisions.items()} == {
        f"{POLICY_GATE}:dune": ("deny", ["spend-limit"]),
        f"{POLICY_GATE}:acme": ("allow", ["consensus-recommends"]),
    }
    assert decisions[f"{POLICY_GATE}:acme"][2].startswith(
        "The demo's rules, checked in Python without Cedar, allow "
    )
    assert paused.checkpoint is not None
    resumed = await formation.engine().resume(
        paused.checkpoint, [GateDecision.approve(GATE, by="jane")]
    )
    assert resumed.ok
    assert resumed.cycles == 7


@pytest.mark.usefixtures("without_cedar")
def test_other_policies_without_cedar_say_they_need_the_policy_extra() -> None:
    with pytest.raises(ImportError, match=r"install the 'policy' extra"):
        build_formation(policies=POLICIES.replace("500000", "600000"))


@pytest.mark.slow
def test_converge_demo_without_cedar_pauses_for_a_human_and_says_why(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['cedarpy'] = None\n"
        "from converge.cli import main\n"
        "sys.exit(main(['demo']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 6, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("converge: running vendor_selection (")
    assert first.endswith(f"{WITHOUT_CEDAR}.)")
    assert f"  {GATE}: Commit to Acme Cloud for 420,000 a year" in done.stdout
