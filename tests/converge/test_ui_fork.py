"""The console's lineage: a run's parent and forks, forking from a cycle, and the diff page."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import cast
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from converge import SqliteRunStore
from converge.ui import ConsoleSettings, Reviewers, Sessions, create_app
from tests.cli_runs import cli
from tests.converge.forgery import stored_json, write_json

HERE = Path(__file__).resolve().parent
FORMATION = str(HERE / "fork_formation.py")
KEY = "fork-console-key"
BASE = "http://127.0.0.1:8765"


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", KEY)
    monkeypatch.chdir(tmp_path)
    return str(tmp_path / "runs.db")


@pytest.fixture
def parent(store: str) -> str:
    code, out = cli("--store", store, "run", FORMATION, "--json")
    assert code == 0, out
    run_id: str = json.loads(out)["run_id"]
    return run_id


@pytest.fixture
def token(tmp_path: Path) -> tuple[Reviewers, str]:
    users = tmp_path / "reviewers.json"
    ana = Reviewers.add(users, "ana")
    return Reviewers.load(users), ana


@contextmanager
def console(store: str, reviewers: Reviewers, token: str | None) -> Generator[TestClient]:
    settings = ConsoleSettings(
        store=SqliteRunStore(store), reviewers=reviewers, sessions=Sessions(), poll_seconds=0.05
    )
    with TestClient(create_app(settings), base_url=BASE, follow_redirects=False) as client:
        if token is not None:
            client.headers["authorization"] = f"Bearer {token}"
        yield client


def run_ids(store: str) -> list[str]:
    with sqlite3.connect(store) as connection:
        rows = connection.execute("SELECT run_id FROM converge_runs ORDER BY run_id").fetchall()
    connection.close()
    return [str(row[0]) for row in rows]


def fork_path(run_id: str) -> str:
    return f"/runs/{quote(run_id, safe='')}/fork"


def csrf_of(html: str) -> str:
    return html.split('name="csrf" value="')[1].split('"')[0]


def post_fork(client: TestClient, run_id: str, **fields: str) -> tuple[int, str, str]:
    """Post the fork form of `run_id` with its CSRF token; status, body, location."""
    page = client.get(fork_path(run_id), params={"at": fields.get("at", "2")})
    assert page.status_code == 200, page.text
    data = {"csrf": csrf_of(page.text), **fields}
    answer = client.post(fork_path(run_id), data=data, headers={"origin": BASE})
    return answer.status_code, answer.text, answer.headers.get("location", "")


def message_of(html: str) -> str:
    return html.split("data-message><p>")[1].split("</p>")[0]


def test_console_forks_from_a_cycle_with_changes_and_shows_the_lineage_both_ways(
    store: str, parent: str, token: tuple[Reviewers, str]
) -> None:
    reviewers, ana = token
    with console(store, reviewers, ana) as client:
        page = client.get(f"/runs/{parent}")
        assert "data-fork-from" in page.text
        assert "Fork from this cycle" in page.text
        assert "data-family" not in page.text  # no parent, no fork yet
        inputs = json.dumps(
            [{"key": "fork_bids", "id": "b1", "content": "a bid", "payload": {"amount": 5}}]
        )
        status, _, location = post_fork(
            client,
            parent,
            at="3",
            inputs=inputs,
            retract="evaluations/tally-1\n\n",
            max_cycles="20",
        )
        assert status == 303
        fork_id = location.rsplit("/", 1)[1]
        assert fork_id != parent
        record = stored_json(store, fork_id)
        lineage = record["lineage"]
        assert isinstance(lineage, dict)
        assert lineage["parent_run_id"] == parent
        assert lineage["at_cycle"] == 3
        facts = cast("list[dict[str, object]]", record["facts"])
        bid = next(f for f in facts if f["id"] == "b1")
        assert bid["provenance"] == "ana"  # who typed it, when the form gave none
        refs = {f"{f['key']}/{f['id']}" for f in facts}
        assert "evaluations/tally-1" not in refs
        # the fork's page names its parent and links the diff; the parent's lists the fork
        shown = client.get(location).text
        assert f'data-parent="{parent}"' in shown
        assert 'data-fork-cycle="3"' in shown
        assert f'href="/runs/{parent}" data-parent-link' in shown
        assert 'data-lineage="verified"' in shown
        assert "the parent's record has that root there too" in shown
        assert f"/diff?a={parent}&amp;b={fork_id}" in shown
        listed = client.get(f"/runs/{parent}").text
        assert f'data-fork="{fork_id}"' in listed
        assert 'data-forks="1"' in listed
        # the diff page says what `converge diff` prints
        diff = client.get("/diff", params={"a": parent, "b": fork_id})
        assert diff.status_code == 200
        assert 'data-first-difference="3"' in diff.text
        assert 'data-diff-key="fork_bids"' in diff.text
        assert 'data-only="b"' in diff.text
        assert 'data-only="a"' in diff.text  # tally-1, retracted
        narrowed = client.get("/diff", params={"a": parent, "b": fork_id, "key": "evaluations"})
        assert 'data-diff-key="evaluations"' in narrowed.text
        assert 'data-diff-key="fork_bids"' not in narrowed.text
        assert 'name="key" value="evaluations"' in narrowed.text
        one = client.get("/diff", params={"a": parent, "b": fork_id, "limit": "1"}).text
        assert one.count('data-changed="') == 1
        assert "more changed" in one
        code, out = cli("--store", store, "diff", parent, fork_id)
        assert code == 0
        assert "first difference at the end of cycle 3" in out
        code, out = cli("--store", store, "verify", fork_id)
        assert code == 0, out


def test_console_fork_without_changes_reaches_the_parents_root(
    store: str, parent: str, token: tuple[Reviewers, str]
) -> None:
    reviewers, ana = token
    with console(store, reviewers, ana) as client:
        status, body, location = post_fork(client, parent, at="1")
        assert status == 303, body
        fork_id = location.rsplit("/", 1)[1]
        diff = client.get("/diff", params={"a": parent, "b": fork_id}).text
        assert "No fact differs." in diff
    mine, theirs = stored_json(store, parent), stored_json(store, fork_id)
    assert mine["integrity"] == theirs["integrity"]


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"at": "99"}, "has no cycle 99: it ran cycles 0 to"),
        ({"at": "x"}, "cycle: must be a cycle number, got 'x'"),
        ({"at": "٣"}, "cycle: must be a cycle number"),
        ({"at": "9" * 5000}, "cycle: must be from 0 to 1_000_000_000, got 9999"),
        ({"at": "2", "max_cycles": "-3"}, "max cycles: must be at least 1, got -3"),
        ({"at": "2", "max_cycles": "9" * 5000}, "max cycles: must be at most 1_000_000_000"),
        ({"at": "2", "retract": "hypotheses/nope"}, "nope"),
        ({"at": "2", "max_cycles": "0"}, "max cycles: must be at least 1, got 0"),
        ({"at": "2", "max_cycles": "ten"}, "max cycles: must be a whole number, got 'ten'"),
        ({"at": "2", "inputs": "[{"}, "inputs: not JSON"),
        ({"at": "2", "inputs": '{"key": "signals"}'}, "inputs: expected a JSON list"),
        (
            {"at": "2", "inputs": '[{"key": "nowhere", "id": "n", "content": "c"}]'},
            "inputs[0] (nowhere/n)",
        ),
        (
            {
                "at": "2",
                "inputs": '[{"key": "fork_bids", "id": "b", "content": "c", '
                '"payload": {"amount": "many"}}]',
            },
            "inputs[0] (fork_bids/b): payload does not fit Bid",
        ),
        (
            {"at": "2", "inputs": '[{"key": "signals", "id": "s"}]'},
            "inputs[0] (signals/s): content",
        ),
    ],
)
def test_console_fork_refuses_bad_input_in_one_line_and_writes_nothing(
    store: str,
    parent: str,
    token: tuple[Reviewers, str],
    fields: dict[str, str],
    said: str,
) -> None:
    reviewers, ana = token
    before = run_ids(store)
    with console(store, reviewers, ana) as client:
        page = client.get(fork_path(parent))
        data = {"csrf": csrf_of(page.text), **fields}
        answer = client.post(fork_path(parent), data=data, headers={"origin": BASE})
    assert answer.status_code == 400, answer.text
    error = answer.text.split("data-fork-error><p>")[1].split("</p>")[0]
    assert said in error.replace("&#x27;", "'")
    assert error.startswith("error: ")
    assert error.endswith("; nothing was forked")
    assert "\n" not in error
    assert run_ids(store) == before
    # what was typed is shown again
    if "inputs" in fields:
        assert '<textarea name="inputs"' in answer.text


def test_console_fork_form_at_a_huge_cycle_says_so(
    store: str, parent: str, token: tuple[Reviewers, str]
) -> None:
    reviewers, ana = token
    with console(store, reviewers, ana) as client:
        page = client.get(fork_path(parent), params={"at": "9" * 5000})
    assert page.status_code == 400
    assert "cycle: must be from 0 to 1_000_000_000" in page.text


def test_console_fork_needs_a_signed_in_reviewer(
    store: str, parent: str, token: tuple[Reviewers, str]
) -> None:
    reviewers, _ = token
    before = run_ids(store)
    with console(store, reviewers, None) as client:
        assert client.get(fork_path(parent)).status_code == 401
        assert client.get("/diff", params={"a": parent, "b": parent}).status_code == 401
        posted = client.post(fork_path(parent), data={"at": "1"}, headers={"origin": BASE})
        assert posted.status_code == 401
    with console(store, reviewers, "not-a-token") as client:
        posted = client.post(fork_path(parent), data={"at": "1"}, headers={"origin": BASE})
        assert posted.status_code == 401
    assert run_ids(store) == before


def test_console_fork_without_csrf_or_from_another_origin_forks_nothing(
    store: str, parent: str, token: tuple[Reviewers, str]
) -> None:
    reviewers, ana = token
    before = run_ids(store)
    with console(store, reviewers, ana) as client:
        page = client.get(fork_path(parent))
        csrf = csrf_of(page.text)
        forged = client.post(
            fork_path(parent), data={"at": "1", "csrf": "forged"}, headers={"origin": BASE}
        )
        assert forged.status_code == 403
        assert "CSRF token: nothing was forked" in forged.text
        missing = client.post(fork_path(parent), data={"at": "1"}, headers={"origin": BASE})
        assert missing.status_code == 403
        elsewhere = client.post(
            fork_path(parent),
            data={"at": "1", "csrf": csrf},
            headers={"origin": "http://127.0.0.1:9999"},
        )
        assert elsewhere.status_code == 403
        assert "Refused" in elsewhere.text
    assert run_ids(store) == before


def test_console_refuses_to_fork_or_diff_a_parent_whose_signature_fails(
    store: str, parent: str, token: tuple[Reviewers, str]
) -> None:
    reviewers, ana = token
    with console(store, reviewers, ana) as client:
        csrf = csrf_of(client.get(fork_path(parent)).text)
    record = stored_json(store, parent)
    write_json(store, parent, {**record, "name": "changed by hand"})
    before = run_ids(store)
    with console(store, reviewers, ana) as client:
        page = client.get(fork_path(parent))
        assert 'data-signature="failed"' in page.text
        assert "data-cannot-fork" in page.text
        answer = client.post(
            fork_path(parent), data={"at": "1", "csrf": csrf}, headers={"origin": BASE}
        )
        assert answer.status_code == 409
        assert "Nothing was forked" in answer.text
        assert 'data-signature="failed"' in answer.text
        diff = client.get("/diff", params={"a": parent, "b": parent})
        assert diff.status_code == 409
        assert "Not compared" in diff.text
    assert run_ids(store) == before


def test_console_fork_page_shows_a_fork_whose_parent_fails_and_a_missing_parent(
    store: str, parent: str, token: tuple[Reviewers, str]
) -> None:
    """The fork's own page still names its parent when the parent's record was changed or
    deleted; the diff then refuses or finds no run."""
    reviewers, ana = token
    with console(store, reviewers, ana) as client:
        _, _, location = post_fork(client, parent, at="2")
        fork_id = location.rsplit("/", 1)[1]
        record = stored_json(store, parent)
        facts = cast("list[object]", record["facts"])
        write_json(store, parent, {**record, "facts": facts[:-1]})
        shown = client.get(location).text
        assert f'data-parent="{parent}"' in shown
        assert 'data-parent-signature="failed"' in shown
        assert "data-diff-link" not in shown
        assert 'data-lineage="verified"' in shown  # the fork's own facts still give the root
        assert "checked against the fork alone: the parent's signature check failed" in shown
        diff = client.get("/diff", params={"a": parent, "b": fork_id})
        assert diff.status_code == 409
        with sqlite3.connect(store) as connection:
            connection.execute("DELETE FROM converge_runs WHERE run_id = ?", (parent,))
        connection.close()
        shown = client.get(location).text
        assert "(not in this store)" in shown
        assert "data-diff-link" not in shown
        missing = client.get("/diff", params={"a": parent, "b": fork_id})
        assert missing.status_code == 404
        assert client.get("/diff").status_code == 400
        assert (
            client.get("/diff", params={"a": fork_id, "b": fork_id, "limit": "0"}).status_code
            == 400
        )
        assert (
            client.get("/diff", params={"a": fork_id, "b": fork_id, "key": "nokey"}).status_code
            == 400
        )


def test_console_marks_a_fork_whose_lineage_was_edited(
    store: str, parent: str, token: tuple[Reviewers, str]
) -> None:
    reviewers, ana = token
    with console(store, reviewers, ana) as client:
        _, _, location = post_fork(client, parent, at="2")
        fork_id = location.rsplit("/", 1)[1]
        record = stored_json(store, fork_id)
        lineage = cast("dict[str, object]", record["lineage"])
        write_json(store, fork_id, {**record, "lineage": {**lineage, "parent_root": "0" * 64}})
        shown = client.get(location).text
        assert 'data-signature="failed"' in shown
        assert 'data-lineage="failed"' in shown
        assert "Lineage does not verify" in shown
        listed = client.get(f"/runs/{parent}").text
        assert f'data-fork="{fork_id}"' in listed
        assert "(signature check failed)" in listed
        code, _ = cli("--store", store, "verify", fork_id)
        assert code == 7


def test_console_fork_form_posted_twice_forks_once(
    store: str, parent: str, token: tuple[Reviewers, str]
) -> None:
    reviewers, ana = token
    with console(store, reviewers, ana) as client:
        page = client.get(fork_path(parent), params={"at": "2"}).text
        once = page.split('name="once" value="')[1].split('"')[0]
        data = {"csrf": csrf_of(page), "once": once, "at": "2"}
        first = client.post(fork_path(parent), data=data, headers={"origin": BASE})
        again = client.post(fork_path(parent), data=data, headers={"origin": BASE})
        assert first.status_code == again.status_code == 303
        assert first.headers["location"] == again.headers["location"]
        assert len(run_ids(store)) == 2
        # a refused form can be fixed and posted again with the same field
        bad = {**data, "once": "other", "at": "99"}
        assert client.post(fork_path(parent), data=bad, headers={"origin": BASE}).status_code == 400
        fixed = client.post(fork_path(parent), data={**bad, "at": "1"}, headers={"origin": BASE})
        assert fixed.status_code == 303
        assert fixed.headers["location"] != first.headers["location"]
        assert len(run_ids(store)) == 3
        assert page.count('name="once"') == 1
        assert once not in client.get(fork_path(parent)).text  # each form its own


def test_console_fork_of_a_paused_run_waits_on_its_gate_again(
    store: str, token: tuple[Reviewers, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORK_TEST_HELD", "3")
    code, out = cli("--store", store, "run", FORMATION, "--json")
    assert code == 6, out
    paused = str(json.loads(out)["run_id"])
    reviewers, ana = token
    with console(store, reviewers, ana) as client:
        shown = client.get(f"/runs/{paused}").text
        assert "data-fork-from" in shown
        assert "data-waiting" in shown
        status, body, location = post_fork(client, paused, at="1")
        assert status == 303, body
        fork = client.get(location).text
        assert 'data-status="paused"' in fork
        assert "data-waiting" in fork
        assert f'data-parent="{paused}"' in fork


def test_console_fork_refuses_a_formation_that_can_no_longer_be_imported(
    store: str, tmp_path: Path, token: tuple[Reviewers, str]
) -> None:
    moved = tmp_path / "gone_formation.py"
    moved.write_text(Path(FORMATION).read_text())
    code, out = cli("--store", store, "run", str(moved), "--json")
    assert code == 0, out
    parent = str(json.loads(out)["run_id"])
    moved.unlink()
    reviewers, ana = token
    before = run_ids(store)
    with console(store, reviewers, ana) as client:
        status, body, _ = post_fork(client, parent, at="1")
    assert status == 409
    said = message_of(body)
    assert said.startswith("Nothing was forked: formation ")
    assert f"no formation file at {moved}" in said
    assert run_ids(store) == before


def test_console_without_a_key_does_not_fork_by_the_formation_a_record_names(
    store: str, parent: str, token: tuple[Reviewers, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a signing key the record is unauthenticated: the console imports nothing it
    names unless it trusts unsigned records."""
    monkeypatch.delenv("CONVERGE_SIGNING_KEY")
    reviewers, ana = token
    before = run_ids(store)
    with console(store, reviewers, ana) as client:
        page = client.get(fork_path(parent)).text
        assert "data-cannot-fork" in page
        assert 'data-signature="unchecked"' in page
        status, body, _ = post_fork(client, parent, at="1")
    assert status == 409
    assert "does not import the formation" in body
    assert run_ids(store) == before
