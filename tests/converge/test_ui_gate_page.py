"""A gate's page: the rule that held the proposal, what each button does, every gate's detail."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from urllib.parse import quote

import pytest

from converge.ui import Reviewers
from tests.cli_runs import cli, run_id_of
from tests.converge.test_ui_console import client_for, csrf_of, version_of

HERE = Path(__file__).resolve().parent
PLAN = str(HERE / "cli_formation.py")
GATE = "gate:2:strategies/costly"

FOUR = textwrap.dedent(
    '''
    """Four proposals held at once, each with its own payload and evidence."""
    from converge import AgentEffect, Context, ContextKey, Formation, HitlPolicy, ProposedFact
    from converge_suggestors import SeedSuggestor

    class Four:
        name = "four"
        dependencies = (ContextKey.SEEDS,)

        def accepts(self, ctx: Context, /) -> bool:
            return not ctx.has(ContextKey.STRATEGIES)

        async def execute(self, ctx: Context, /) -> AgentEffect:
            return AgentEffect.with_proposals([
                ProposedFact(
                    key=ContextKey.STRATEGIES, id=f"plan-{n}", provenance="four",
                    content=f"Plan number {n}", payload={"spend": 1000 * (n + 1), "n": n},
                    evidence=(f"seeds/s{n}",),
                )
                for n in range(4)
            ])

    formation = Formation(
        name="four",
        suggestors=(*(SeedSuggestor(f"s{n}", f"Seed {n}") for n in range(4)), Four()),
        hitl=HitlPolicy(gated_keys=frozenset({ContextKey.STRATEGIES})),
    )
    '''
)


def gate_url(run_id: str, gate: str) -> str:
    return f"/runs/{quote(run_id, safe='')}/gates/{quote(gate, safe='')}"


@pytest.fixture
def reviewer() -> tuple[Reviewers, str]:
    return Reviewers.single("ana")


def test_ui_gate_page_names_the_rule_that_held_it_and_what_each_button_does(
    tmp_path: Path, reviewer: tuple[Reviewers, str]
) -> None:
    store = str(tmp_path / "runs.db")
    code, out = cli("--store", store, "run", PLAN)
    assert code == 6
    run_id = run_id_of(out)
    reviewers, token = reviewer
    with client_for(store, reviewers, token=token) as client:
        page = client.get(gate_url(run_id, GATE)).text
    assert (
        f'data-rule="{GATE}">held because its confidence 0.4 is below '
        "HitlPolicy.confidence_below 0.5</dd>"
    ) in page
    [said] = re.findall(r'<div class="next" data-next="[^"]*">(.*?)</div>', page)
    assert (
        "<b>Approve</b>: the proposal becomes the fact <code>strategies/costly</code>, approved "
        "by <b>ana</b>, in cycle 2; the run continues from cycle 3." in said
    )
    assert (
        "<b>Reject</b>: the proposal is refused for the rest of the run; the fact "
        "<code>diagnostic/hitl-rejected:costly</code> records your name and reason; the run "
        "continues from cycle 3." in said
    )


def test_ui_gate_page_deciding_four_gates_shows_each_ones_payload_and_evidence(
    tmp_path: Path, reviewer: tuple[Reviewers, str]
) -> None:
    formation = tmp_path / "four.py"
    formation.write_text(FOUR)
    store = str(tmp_path / "runs.db")
    code, out = cli("--store", store, "run", str(formation))
    assert code == 6, out
    run_id = run_id_of(out)
    gates = [f"gate:2:strategies/plan-{n}" for n in range(4)]
    reviewers, token = reviewer
    with client_for(store, reviewers, token=token) as client:
        page = client.get(gate_url(run_id, gates[0])).text
        assert "this form decides them all" in page
        for n, gate in enumerate(gates):
            payload = re.search(
                rf'<table class="payload" data-payload="strategies/plan-{n}">(.*?)</table>', page
            )
            assert payload is not None, gate
            assert f'<td class="wrap">{1000 * (n + 1)}</td>' in payload.group(1)
            assert f'data-evidence="seeds/s{n}"><code>seeds/s{n}</code>: Seed {n}' in page
            assert f'data-rule="{gate}">held because its key strategies is in' in page
            assert f'data-next="{gate}"' in page
            assert f'data-decide="{gate}"' in page
        assert "once the 3 other gate(s) of this form are decided too" in page
        form = {"csrf": csrf_of(page), "version": version_of(page)}
        form |= {f"gate:{gate}": "approve" if n % 2 else "reject" for n, gate in enumerate(gates)}
        response = client.post(gate_url(run_id, gates[0]), data=form, follow_redirects=False)
        assert response.status_code == 303, response.text
