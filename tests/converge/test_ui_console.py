"""The review console without a browser: reviewers and tokens, CSRF, decisions, the event stream."""

from __future__ import annotations

import os
import stat
import sys
import time
from collections.abc import Generator
from contextlib import aclosing, contextmanager
from pathlib import Path
from urllib.parse import quote

import anyio
import pytest
from starlette.testclient import TestClient

from converge import RunStatus, SqliteRunStore
from converge._formation import load_formation
from converge.ui import (
    ConsoleSettings,
    Reviewer,
    Reviewers,
    Sessions,
    create_app,
    token_digest,
)
from converge.ui._live import event_stream
from tests.cli_runs import cli, run_id_of

HERE = Path(__file__).resolve().parent
PLAN = str(HERE / "cli_formation.py")
CHAIN = str(HERE / "durable_formation.py")
GATE = "gate:2:strategies/costly"


def csrf_of(html: str) -> str:
    return html.split('name="csrf" value="')[1].split('"')[0]


def version_of(html: str) -> str:
    return html.split('name="version" value="')[1].split('"')[0]


@pytest.fixture
def paused(tmp_path: Path) -> tuple[str, str]:
    store = str(tmp_path / "runs.db")
    code, out = cli("--store", store, "run", PLAN)
    assert code == 6
    return store, run_id_of(out)


@pytest.fixture
def two(tmp_path: Path) -> tuple[Path, str, str]:
    users = tmp_path / "reviewers.json"
    return users, Reviewers.add(users, "ana"), Reviewers.add(users, "bo")


@contextmanager
def client_for(
    store: str,
    reviewers: Reviewers,
    *,
    token: str | None = None,
    sessions: Sessions | None = None,
    trust_unsigned: bool = True,
) -> Generator[TestClient]:
    """A console on `store` and a client of it, signed in with `token` when one is given.

    The console imports the formation each (unsigned) record names, as `--trust-unsigned`.
    """
    settings = ConsoleSettings(
        store=SqliteRunStore(store),
        reviewers=reviewers,
        poll_seconds=0.05,
        sessions=Sessions() if sessions is None else sessions,
        trust_unsigned=trust_unsigned,
    )
    with TestClient(create_app(settings), base_url="http://127.0.0.1:8765") as client:
        if token is not None:
            client.headers["authorization"] = f"Bearer {token}"
        yield client


def gate_url(run_id: str, gate: str = GATE) -> str:
    return f"/runs/{quote(run_id, safe='')}/gates/{quote(gate, safe='')}"


# --- reviewers ----------------------------------------------------------------------------------


def test_the_reviewers_file_keeps_digests_only_owner_readable(two: tuple[Path, str, str]) -> None:
    users, ana, bo = two
    text = users.read_text()
    assert ana not in text
    assert bo not in text
    assert token_digest(ana) in text
    assert stat.S_IMODE(users.stat().st_mode) == 0o600
    reviewers = Reviewers.load(users)
    assert [r.name for r in reviewers.all()] == ["ana", "bo"]
    assert reviewers.find(ana) == Reviewer(name="ana", token_sha256=token_digest(ana))
    assert reviewers.find(bo).name == "bo"  # type: ignore[union-attr]
    assert reviewers.find("nope") is None
    assert reviewers.find("") is None
    assert reviewers.find(None) is None


def test_a_reviewer_is_added_once_and_a_bad_file_is_named(two: tuple[Path, str, str]) -> None:
    users, _, _ = two
    with pytest.raises(ValueError, match="already names 'ana'"):
        Reviewers.add(users, "ana")
    users.write_text('{"reviewers": [{"name": "x", "token_sha256": "short"}]}')
    with pytest.raises(ValueError, match=rf"reviewers file {users}"):
        Reviewers.load(users)
    with pytest.raises(ValueError, match="printable"):
        Reviewer(name="ana\u202e", token_sha256="0" * 64)


def test_csrf_tokens_differ_per_reviewer_and_per_console(two: tuple[Path, str, str]) -> None:
    users, ana, bo = two
    console, again = Reviewers.load(users), Reviewers.load(users)
    a, b = console.find(ana), console.find(bo)
    assert a is not None
    assert b is not None
    assert console.csrf(a) != console.csrf(b)
    assert console.csrf(a) != again.csrf(a)  # a restarted console voids old forms
    assert console.csrf_holds(a, console.csrf(a))
    assert not console.csrf_holds(a, console.csrf(b))
    assert not console.csrf_holds(a, None)


def test_converge_ui_add_prints_the_token_once(tmp_path: Path) -> None:
    users = tmp_path / "reviewers.json"
    code, out = cli("ui", "--users", str(users), "--add", "ana")
    assert code == 0
    token = out.split("token (shown once; the file keeps only its digest): ")[1].strip()
    assert Reviewers.load(users).find(token) is not None
    assert cli("ui", "--users", str(users), "--add", "ana")[0] == 1
    assert cli("ui", "--add", "ana")[0] == 1  # --add needs --users


def test_converge_ui_without_the_extra_says_which_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "converge.ui", None)
    assert cli("ui")[0] == 1
    err = capsys.readouterr().err
    assert "the review console needs the 'ui' extra" in err
    assert "pip install 'converge-engine[ui]'" in err


# --- signing in and deciding -------------------------------------------------------------------


def test_the_link_becomes_a_strict_session_cookie_and_leaves_the_address(
    paused: tuple[str, str], two: tuple[Path, str, str]
) -> None:
    store, run_id = paused
    users, ana, _ = two
    reviewers, sessions = Reviewers.load(users), Sessions()
    code = sessions.link(reviewers.find(ana))  # type: ignore[arg-type]
    with client_for(store, reviewers, sessions=sessions) as client:
        response = client.get(f"/?token={code}&status=paused", follow_redirects=False)
        assert response.status_code == 303
        assert response.headers["location"] == "/?status=paused"
        cookie = response.headers["set-cookie"].lower()
        assert cookie.startswith("converge-console-8765=")
        assert ana.lower() not in cookie
        assert code.lower() not in cookie
        assert "httponly" in cookie
        assert "samesite=strict" in cookie
        assert "max-age=43200" in cookie
        page = client.get("/?status=paused")
        assert page.status_code == 200
        assert run_id in page.text
        headers = page.headers
        assert "default-src 'none'" in headers["content-security-policy"]
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert headers["x-frame-options"] == "DENY"
        assert headers["cache-control"] == "no-store"
        assert run_id not in client.get("/?status=finished").text


def test_the_decision_is_recorded_as_the_signed_in_reviewer_whatever_the_form_says(
    paused: tuple[str, str], two: tuple[Path, str, str]
) -> None:
    store, run_id = paused
    users, _, bo = two
    with client_for(store, Reviewers.load(users), token=bo) as client:
        page = client.get(gate_url(run_id)).text
        assert "250000" in page  # the held proposal's payload
        response = client.post(
            gate_url(run_id),
            data={
                "csrf": csrf_of(page),
                "version": version_of(page),
                f"gate:{GATE}": "approve",
                "by": "mallory",
                "approved_by": "mallory",
            },
            follow_redirects=False,
        )
        assert response.status_code == 303
    _, out = cli("--store", store, "show", run_id)
    assert "approved by bo" in out
    assert "mallory" not in out


def test_a_form_shown_before_someone_else_decided_is_refused_with_who_decided(
    paused: tuple[str, str], two: tuple[Path, str, str]
) -> None:
    store, run_id = paused
    users, ana, _ = two
    with client_for(store, Reviewers.load(users), token=ana) as client:
        page = client.get(gate_url(run_id)).text
        code, _ = cli("--store", store, "resume", run_id, "--reject", GATE, "--by", "cli-cat")
        assert code == 0
        form = {"csrf": csrf_of(page), "version": version_of(page), f"gate:{GATE}": "approve"}
        response = client.post(gate_url(run_id), data=form)
        assert response.status_code == 409
        assert "already decided by cli-cat: rejected" in response.text
        again = client.get(gate_url(run_id))
        assert again.status_code == 409
        assert "already decided by cli-cat" in again.text
    decisions = anyio.run(SqliteRunStore(store).load, run_id).trace.decisions
    assert [(d.by, d.approved) for d in decisions] == [("cli-cat", False)]


def test_an_unknown_run_or_gate_is_not_found_and_a_form_needs_a_choice(
    paused: tuple[str, str], two: tuple[Path, str, str]
) -> None:
    store, run_id = paused
    users, ana, _ = two
    with client_for(store, Reviewers.load(users), token=ana) as client:
        assert client.get("/runs/nope").status_code == 404
        assert client.get(f"/runs/{run_id}/elsewhere").status_code == 404
        assert client.get(gate_url(run_id, "gate:9:x/y")).status_code == 409
        page = client.get(gate_url(run_id)).text
        response = client.post(
            gate_url(run_id), data={"csrf": csrf_of(page), "version": version_of(page)}
        )
        assert response.status_code == 400
        assert "Choose approve or reject" in response.text
    assert cli("--store", store, "review", run_id)[0] == 6


def test_an_interrupted_run_continues_from_the_console(
    tmp_path: Path, two: tuple[Path, str, str]
) -> None:
    store = str(tmp_path / "runs.db")
    formation = load_formation(CHAIN)

    async def interrupted() -> str:
        engine = formation.engine(store=SqliteRunStore(store), formation=CHAIN)
        with anyio.move_on_after(0.4):
            await engine.run(run_id="chain-1", inputs=formation.inputs)
        return "chain-1"

    run_id = anyio.run(interrupted)
    users, ana, _ = two
    with client_for(store, Reviewers.load(users), token=ana) as client:
        page = client.get(f"/runs/{run_id}")
        assert "This run was interrupted (cancelled)" in page.text
        response = client.post(
            f"/runs/{run_id}/continue",
            data={"csrf": csrf_of(page.text), "version": version_of(page.text)},
            follow_redirects=False,
        )
        assert response.status_code == 303

        async def status() -> RunStatus:
            return (await SqliteRunStore(store).load(run_id)).status

        deadline = time.monotonic() + 20
        while anyio.run(status) is not RunStatus.FINISHED:
            assert time.monotonic() < deadline, "the continued run did not finish"
            time.sleep(0.05)
    record = anyio.run(SqliteRunStore(store).load, run_id)
    assert record.outcome == "converged"
    assert [c.cause for c in record.trace.continuations] == ["cancelled"]


async def test_the_event_stream_says_changed_when_the_run_is_saved_again(
    paused: tuple[str, str],
) -> None:
    store, run_id = paused
    opened = SqliteRunStore(store)
    record = await opened.load(run_id)
    async with aclosing(event_stream(opened, run_id, record.version, 0.02)) as events:
        assert await anext(events) == "retry: 2000\n\n"
        code, _ = await anyio.to_thread.run_sync(
            lambda: cli("--store", store, "resume", run_id, "--approve", GATE, "--by", "jo")
        )
        assert code == 0
        with anyio.fail_after(5):
            said = await anext(events)
        assert said.startswith("event: changed\ndata: ")
        assert '"status": "finished"' in said
    finished = await opened.load(run_id)
    async with aclosing(event_stream(opened, run_id, finished.version, 0.02)) as events:
        await anext(events)
        assert (await anext(events)).startswith("event: end\n")
        with pytest.raises(StopAsyncIteration):
            await anext(events)


def test_the_users_file_mode_is_not_world_readable_even_with_a_loose_umask(tmp_path: Path) -> None:
    previous = os.umask(0)
    try:
        Reviewers.add(tmp_path / "r.json", "ana")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o600


def test_the_link_redirect_keeps_the_rest_of_the_query_encoded(
    paused: tuple[str, str], two: tuple[Path, str, str]
) -> None:
    store, _ = paused
    users, ana, _ = two
    reviewers, sessions = Reviewers.load(users), Sessions()
    code = sessions.link(reviewers.find(ana))  # type: ignore[arg-type]
    with client_for(store, reviewers, sessions=sessions) as client:
        response = client.get(f"/?token={code}&text=a%26b%3Dc", follow_redirects=False)
        assert response.headers["location"] == "/?text=a%26b%3Dc"


def test_an_expired_gate_is_left_to_its_timeout_and_the_run_resumes(
    tmp_path: Path, two: tuple[Path, str, str]
) -> None:
    formation = tmp_path / "expiring.py"
    formation.write_text(
        Path(PLAN)
        .read_text()
        .replace(
            "hitl=HitlPolicy(confidence_below=0.5)",
            "hitl=HitlPolicy(confidence_below=0.5, timeout=timedelta(seconds=0.2))",
        )
        .replace("from converge import", "from datetime import timedelta\nfrom converge import")
    )
    store = str(tmp_path / "runs.db")
    code, out = cli("--store", store, "run", str(formation))
    assert code == 6
    run_id = run_id_of(out)
    time.sleep(0.3)
    users, ana, _ = two
    with client_for(store, Reviewers.load(users), token=ana) as client:
        page = client.get(gate_url(run_id)).text
        assert "1 gate(s) passed their deadline" in page
        assert 'name="gate:' not in page  # nothing left to choose
        response = client.post(
            gate_url(run_id),
            data={"csrf": csrf_of(page), "version": version_of(page)},
            follow_redirects=False,
        )
        assert response.status_code == 303, response.text
        deadline = time.monotonic() + 20
        while (record := anyio.run(SqliteRunStore(store).load, run_id)).status is not (
            RunStatus.FINISHED
        ):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert [(d.by, d.approved) for d in record.trace.decisions] == [("timeout", False)]


def test_with_a_signing_key_an_unsigned_run_is_shown_under_a_banner_and_not_decided(
    paused: tuple[str, str], two: tuple[Path, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, run_id = paused  # saved without a key: unsigned
    monkeypatch.setenv("CONVERGE_SIGNING_KEY", "k")
    users, ana, _ = two
    reviewers = Reviewers.load(users)
    csrf = reviewers.csrf(reviewers.find(ana))  # type: ignore[arg-type]
    with client_for(store, reviewers, token=ana) as client:
        # the run page checks the record, the gate page the paused run's head alone
        for url, what in ((f"/runs/{run_id}", "record"), (gate_url(run_id), "head")):
            response = client.get(url)
            assert response.status_code == 200, url
            assert 'data-signature="failed"' in response.text
            assert f"the stored {what} is unsigned, but a signing key is set" in response.text
        assert "data-decision-form" not in client.get(gate_url(run_id)).text
        form = {"csrf": csrf, "version": "1", f"gate:{GATE}": "approve"}
        response = client.post(gate_url(run_id), data=form)
        assert response.status_code == 409
        assert "Nothing was decided" in response.text
    assert cli("--store", store, "review", run_id)[0] != 0  # still paused and refused


def test_a_run_the_console_resumes_gets_the_commands_default_call_deadline(
    tmp_path: Path, two: tuple[Path, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A suggestor that stalls after the decision is stopped at the deadline `converge run`
    gives (shortened here), not awaited for ever by the console's task."""
    store = str(tmp_path / "runs.db")
    code, out = cli("--store", store, "run", str(HERE / "slow_after_gate_formation.py"))
    assert code == 6
    run_id = run_id_of(out)
    monkeypatch.setattr("converge._formation.DEFAULT_SUGGESTOR_TIMEOUT", 0.3)
    users, ana, _ = two
    with client_for(store, Reviewers.load(users), token=ana) as client:
        page = client.get(gate_url(run_id)).text
        data = {"csrf": csrf_of(page), "version": version_of(page), f"gate:{GATE}": "approve"}
        assert client.post(gate_url(run_id), data=data, follow_redirects=False).status_code == 303
        deadline = time.monotonic() + 20
        record = anyio.run(SqliteRunStore(store).load, run_id)
        while record.status is not RunStatus.FINISHED and time.monotonic() < deadline:
            time.sleep(0.1)
            record = anyio.run(SqliteRunStore(store).load, run_id)
    assert record.status is RunStatus.FINISHED
    [failure] = record.trace.failures()
    assert (failure.suggestor, failure.outcome) == ("stalls", "timed_out")


def test_the_runs_list_finds_a_paused_run_behind_more_newer_runs_than_it_reads(
    paused: tuple[str, str], two: tuple[Path, str, str]
) -> None:
    """Filters go into the store's query: a paused run older than the newest `limit` runs
    is found by its status and by its own id."""
    store, run_id = paused
    for _ in range(3):
        assert cli("--store", store, "run", CHAIN)[0] == 0
    users, ana, _ = two
    settings = ConsoleSettings(
        store=SqliteRunStore(store), reviewers=Reviewers.load(users), limit=2
    )
    with TestClient(create_app(settings), base_url="http://127.0.0.1:8765") as client:
        client.headers["authorization"] = f"Bearer {ana}"

        def listed(**params: str) -> str:
            """The runs list of the page, below the inbox of the unfiltered first page."""
            return client.get("/", params=params).text.split("</section>")[-1]

        assert run_id not in listed()  # the newest two are others
        assert run_id in listed(status="paused")
        assert run_id in listed(stop="awaiting_human")
        assert run_id in listed(text=run_id[5:17].upper())
        assert run_id not in listed(status="finished")
        assert run_id not in listed(status="no-such")


def test_the_first_page_lists_every_waiting_gate_oldest_first(
    paused: tuple[str, str], two: tuple[Path, str, str]
) -> None:
    store, first = paused
    second = run_id_of(cli("--store", store, "run", PLAN)[1])
    users, ana, _ = two
    settings = ConsoleSettings(store=SqliteRunStore(store), reviewers=Reviewers.load(users))
    with TestClient(create_app(settings), base_url="http://127.0.0.1:8765") as client:
        client.headers["authorization"] = f"Bearer {ana}"
        html = client.get("/").text
        inbox = html.split('<section class="inbox">')[1].split("</section>")[0]
        assert "Waiting for a human (2)" in inbox
        assert inbox.index(gate_url(first)) < inbox.index(gate_url(second))
        assert client.get(gate_url(first)).status_code == 200
        assert '<section class="inbox">' not in client.get("/", params={"text": first}).text
