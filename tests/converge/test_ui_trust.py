"""What the console trusts: every page checks the record's signature, and no formation is
imported from a record nobody authenticated (unless the console was told to)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote

import anyio
import pytest

from converge import SqliteRunStore
from converge._formation import load_formation
from converge.ui import Reviewers
from tests.cli_runs import cli, run_id_of
from tests.converge.test_trust_review import forge_pending, stored_json, write_json
from tests.converge.test_ui_console import client_for, csrf_of, version_of
from tests.converge.ui_console import serving, stop_console

HERE = Path(__file__).resolve().parent
PLAN = str(HERE / "cli_formation.py")
CHAIN = str(HERE / "durable_formation.py")
GATE = "gate:2:strategies/costly"
KEY = "console-trust-key"


def gate_url(run_id: str, gate: str = GATE) -> str:
    return f"/runs/{quote(run_id, safe='')}/gates/{quote(gate, safe='')}"


def signature_of(html: str) -> str:
    found = re.search(r'data-signature="([a-z]+)"', html)
    assert found is not None, "the page says nothing of the record's signature"
    return found.group(1)


@pytest.fixture
def reviewer() -> tuple[Reviewers, str]:
    return Reviewers.single("ana")


@pytest.fixture
def paused(tmp_path: Path) -> tuple[str, str]:
    store = str(tmp_path / "runs.db")
    code, out = cli("--store", store, "run", PLAN)
    assert code == 6
    return store, run_id_of(out)


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[Path, Path]:
    """A module that leaves a marker file when imported, and the marker's path."""
    marker = tmp_path / "imported"
    module = tmp_path / "hostile.py"
    module.write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('x')\n")
    return module, marker


# --- the signature ------------------------------------------------------------------------------


def test_ui_record_forged_in_the_store_shows_a_banner_on_every_page_when_a_key_is_set(
    paused: tuple[str, str], reviewer: tuple[Reviewers, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", KEY)
    store, _ = paused
    code, out = cli("--store", store, "run", PLAN)  # saved with the key: signed
    assert code == 6
    run_id = run_id_of(out)
    record = stored_json(store, run_id)
    forge_pending(record, also_checkpoint=True)
    write_json(store, run_id, record)
    reviewers, token = reviewer
    csrf = reviewers.csrf(reviewers.all()[0])
    with client_for(store, reviewers, token=token, trust_unsigned=False) as client:
        listing = client.get("/").text
        assert "2 record(s) below failed their signature check" in listing  # forged + unsigned
        row = listing.split(f'<tr data-run="{run_id}"')[1].split("</tr>")[0]
        assert 'data-signature="failed">signature check failed' in row
        run_page = client.get(f"/runs/{run_id}").text
        assert signature_of(run_page) == "failed"
        assert "the stored record has a bad signature" in run_page
        assert "This console will not resume this run" in run_page
        gate = client.get(gate_url(run_id))
        assert gate.status_code == 200
        assert signature_of(gate.text) == "failed"
        assert "Buy the small plan" in gate.text  # what the forger wrote, under the banner
        assert "data-decision-form" not in gate.text
        assert "You cannot decide here" in gate.text
        form = {"csrf": csrf, "version": "1", f"gate:{GATE}": "approve"}
        response = client.post(gate_url(run_id), data=form)
        assert response.status_code == 409
        assert "Nothing was decided" in response.text
        assert signature_of(response.text) == "failed"
    code, _ = cli("--store", store, "review", run_id)
    assert code == 1  # still refused, and nothing decided


def test_ui_forged_decider_of_a_finished_run_is_shown_under_a_banner_when_a_key_is_set(
    tmp_path: Path, reviewer: tuple[Reviewers, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", KEY)
    store = str(tmp_path / "runs.db")
    _, out = cli("--store", store, "run", PLAN)
    run_id = run_id_of(out)
    assert cli("--store", store, "resume", run_id, "--approve", GATE, "--by", "ana")[0] == 0
    record = stored_json(store, run_id)
    trace = record["trace"]
    assert isinstance(trace, dict)
    trace["decisions"][0]["by"] = "mallory"
    write_json(store, run_id, record)
    reviewers, token = reviewer
    with client_for(store, reviewers, token=token) as client:
        page = client.get(f"/runs/{run_id}").text
        assert signature_of(page) == "failed"
        decided = client.get(gate_url(run_id))
        assert decided.status_code == 409
        assert "already decided by mallory" in decided.text
        assert signature_of(decided.text) == "failed"


def test_ui_without_a_key_every_page_says_the_record_is_not_authenticated(
    paused: tuple[str, str], reviewer: tuple[Reviewers, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CONVERGE_SIGNING_KEY", raising=False)
    store, run_id = paused
    reviewers, token = reviewer
    with client_for(store, reviewers, token=token, trust_unsigned=False) as client:
        for url in ("/", f"/runs/{run_id}", gate_url(run_id)):
            page = client.get(url).text
            assert signature_of(page) == "unchecked", url
            assert "Not authenticated: no signing key is set" in page
            assert 'class="banner"' not in page


def test_ui_with_a_key_a_signed_record_verifies_and_its_formation_is_imported(
    tmp_path: Path, reviewer: tuple[Reviewers, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", KEY)
    store = str(tmp_path / "runs.db")
    _, out = cli("--store", store, "run", PLAN)
    run_id = run_id_of(out)
    reviewers, token = reviewer
    with client_for(store, reviewers, token=token, trust_unsigned=False) as client:
        page = client.get(gate_url(run_id)).text
        assert signature_of(page) == "verified"
        assert (
            f"<code data-formation-path>{PLAN}</code>, named by the record; its signature "
            "verified; the console imports it to resume the run" in page
        )
        form = {"csrf": csrf_of(page), "version": version_of(page), f"gate:{GATE}": "approve"}
        response = client.post(gate_url(run_id), data=form, follow_redirects=False)
        assert response.status_code == 303, response.text


# --- formations a record names ------------------------------------------------------------------


def test_ui_record_naming_another_module_is_not_imported_when_no_key_is_set(
    paused: tuple[str, str],
    reviewer: tuple[Reviewers, str],
    hostile: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CONVERGE_SIGNING_KEY", raising=False)
    store, run_id = paused
    module, marker = hostile
    record = stored_json(store, run_id)
    record["formation"] = str(module)
    write_json(store, run_id, record)
    reviewers, token = reviewer
    csrf = reviewers.csrf(reviewers.all()[0])
    with client_for(store, reviewers, token=token, trust_unsigned=False) as client:
        page = client.get(gate_url(run_id)).text
        assert f"<code data-formation-path>{module}</code>" in page
        assert "its signature was not checked (no signing key is set)" in page
        assert "the console will not import it" in page
        assert "data-decision-form" not in page
        form = {"csrf": csrf, "version": "1", f"gate:{GATE}": "approve"}
        response = client.post(gate_url(run_id), data=form)
        assert response.status_code == 409
        said = response.text
        assert "Nothing was decided" in said
        assert "--trust-unsigned" in said
        assert "CONVERGE_SIGNING_KEY" in said
        assert "--formation" in said
    assert not marker.exists()
    assert cli("--store", store, "review", run_id)[0] == 6  # still waiting


def test_ui_interrupted_run_naming_a_module_is_not_continued_when_no_key_is_set(
    tmp_path: Path,
    reviewer: tuple[Reviewers, str],
    hostile: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CONVERGE_SIGNING_KEY", raising=False)
    store = str(tmp_path / "runs.db")
    module, marker = hostile
    formation = load_formation(CHAIN)

    async def interrupted() -> None:
        engine = formation.engine(store=SqliteRunStore(store), formation=str(module))
        with anyio.move_on_after(0.3):
            await engine.run(run_id="chain-1", inputs=formation.inputs)

    anyio.run(interrupted)
    reviewers, token = reviewer
    csrf = reviewers.csrf(reviewers.all()[0])
    with client_for(store, reviewers, token=token, trust_unsigned=False) as client:
        page = client.get("/runs/chain-1").text
        assert "Continue the run" not in page
        assert "This console will not resume this run" in page
        response = client.post("/runs/chain-1/continue", data={"csrf": csrf, "version": "0"})
        assert response.status_code == 409
        assert "--trust-unsigned" in response.text
    assert not marker.exists()


def test_ui_trust_unsigned_imports_the_module_an_unauthenticated_record_names(
    paused: tuple[str, str],
    reviewer: tuple[Reviewers, str],
    hostile: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CONVERGE_SIGNING_KEY", raising=False)
    store, run_id = paused
    module, marker = hostile
    record = stored_json(store, run_id)
    record["formation"] = str(module)
    write_json(store, run_id, record)
    reviewers, token = reviewer
    with client_for(store, reviewers, token=token, trust_unsigned=True) as client:
        page = client.get(gate_url(run_id)).text
        assert "the console imports it because it was started with --trust-unsigned" in page
        form = {"csrf": csrf_of(page), "version": version_of(page), f"gate:{GATE}": "approve"}
        client.post(gate_url(run_id), data=form)
    assert marker.exists()  # what the flag says it does: the record's module was imported


@pytest.mark.slow
def test_converge_ui_says_on_stderr_what_it_trusts_when_no_key_is_set(
    paused: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CONVERGE_SIGNING_KEY", raising=False)
    store, _ = paused
    for extra, said in (
        ((), "note: no signing key is set: records are not authenticated"),
        (("--trust-unsigned",), "warning: --trust-unsigned: no signing key is set"),
    ):
        with serving(store, *extra) as served:
            err = stop_console(served)
        assert said in err, err
    code, _ = cli("--store", store, "ui", "--origin", "ftp://x")
    assert code == 1
