"""The console's sign-in and sessions.

Attacked from outside, with a real `converge ui` process on loopback, httpx clients and raw
sockets: the cookie, the one-time link, sign-out, restarts, removed reviewers, redirects,
`Origin`, `Host` and form bounds. Then the session table, the reviewers file and the origin
rules on their own.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from converge.ui import Reviewers, Sessions
from converge.ui._origin import Origin, local_path
from tests.cli_runs import cli, run_id_of
from tests.converge.test_ui_console import client_for
from tests.converge.ui_console import Served, serving, start_console, stop_console

HERE = Path(__file__).resolve().parent
PLAN = str(HERE / "cli_formation.py")
GATE = "gate:2:strategies/costly"


@pytest.fixture
def paused(tmp_path: Path) -> tuple[str, str]:
    store = str(tmp_path / "runs.db")
    code, out = cli("--store", store, "run", PLAN)
    assert code == 6
    return store, run_id_of(out)


@pytest.fixture
def users(tmp_path: Path) -> tuple[Path, str, str]:
    path = tmp_path / "reviewers.json"
    return path, Reviewers.add(path, "ana"), Reviewers.add(path, "bo")


@pytest.fixture
def console(paused: tuple[str, str]) -> Generator[Served]:
    with serving(paused[0], "--reviewer", "ana", "--formation", PLAN) as served:
        yield served


def cookie_name(served: Served) -> str:
    return f"converge-console-{served.port}"


def gate_path(run_id: str) -> str:
    return f"/runs/{quote(run_id, safe='')}/gates/{quote(GATE, safe='')}"


def field(html: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert found is not None, f"no {name} field in the page"
    return found.group(1)


@contextmanager
def by_link(served: Served) -> Generator[httpx.Client]:
    """A browser-like client signed in with the printed one-time link."""
    with httpx.Client(base_url=served.base) as client:
        response = client.get(served.link, follow_redirects=False)
        assert response.status_code == 303, response.text
        yield client


@contextmanager
def by_form(served: Served, token: str) -> Generator[httpx.Client]:
    """A browser-like client signed in with the sign-in form."""
    with httpx.Client(base_url=served.base) as client:
        response = client.post(
            "/sign-in",
            data={"token": token, "next": "/"},
            headers={"origin": served.base},
            follow_redirects=False,
        )
        assert response.status_code == 303, response.text
        yield client


def raw_get(served: Served, target: str, headers: str = "") -> tuple[int, dict[str, str]]:
    """Send `GET target` as written (no client-side normalising); the status and headers."""
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        sock.sendall(
            f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\n{headers}"
            "Connection: close\r\n\r\n".encode("latin-1")
        )
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    status = int(head[0].split()[1])
    return status, {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in head[1:])}


# --- the cookie ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_console_cookie_holds_a_session_id_never_the_token_when_signed_in_by_link(
    console: Served,
) -> None:
    with by_link(console) as client:
        cookies = list(client.cookies.jar)
        assert [cookie.name for cookie in cookies] == [cookie_name(console)]
        session = cookies[0].value
        assert session is not None
        assert console.token not in session
        assert console.link.partition("?token=")[2] not in session
        assert len(session) >= 43  # 32 random bytes
        assert "reviewer <b>ana</b>" in client.get("/").text
    response = httpx.get(console.base + "/", cookies={cookie_name(console): console.token})
    assert response.status_code == 401  # the token is no session


@pytest.mark.slow
def test_console_sign_out_revokes_the_session_when_its_cookie_is_replayed(
    console: Served,
) -> None:
    with by_link(console) as client:
        session = client.cookies[cookie_name(console)]
        page = client.get("/").text
        refused = client.post(
            "/sign-out", data={"csrf": "0" * 64}, headers={"origin": console.base}
        )
        assert refused.status_code == 403  # a forged sign-out ends nothing
        assert client.get("/").status_code == 200
        out = client.post(
            "/sign-out",
            data={"csrf": field(page, "csrf")},
            headers={"origin": console.base},
            follow_redirects=False,
        )
        assert out.status_code == 303
        assert f'{cookie_name(console)}=""' in out.headers["set-cookie"]
    replayed = httpx.get(console.base + "/", cookies={cookie_name(console): session})
    assert replayed.status_code == 401
    assert "Sign in" in replayed.text


@pytest.mark.slow
def test_console_restart_signs_everyone_out_when_the_tokens_stay_valid(
    paused: tuple[str, str], users: tuple[Path, str, str]
) -> None:
    store, _ = paused
    path, ana, _ = users
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    first = start_console(store, "--users", str(path), "--port", port)
    try:
        with by_form(first, ana) as client:
            session = client.cookies[cookie_name(first)]
            assert client.get("/").status_code == 200
    finally:
        stop_console(first)
    with serving(store, "--users", str(path), "--port", port) as again:
        assert again.port == first.port
        replayed = httpx.get(again.base + "/", cookies={cookie_name(again): session})
        assert replayed.status_code == 401
        bearer = httpx.get(again.base + "/", headers={"authorization": f"Bearer {ana}"})
        assert bearer.status_code == 200


@pytest.mark.slow
def test_console_removed_reviewer_is_signed_out_without_a_restart(
    paused: tuple[str, str], users: tuple[Path, str, str]
) -> None:
    store, _ = paused
    path, ana, bo = users
    with serving(store, "--users", str(path)) as served:
        assert "sign in with your token" in served.printed
        with by_form(served, ana) as client:
            assert client.get("/").status_code == 200
            code, out = cli("ui", "--users", str(path), "--remove", "ana")
            assert code == 0
            assert out == f"removed reviewer ana from {path}\n"
            assert client.get("/").status_code == 401
        for token, status in ((ana, 401), (bo, 200)):
            response = httpx.get(served.base + "/", headers={"authorization": f"Bearer {token}"})
            assert response.status_code == status
    assert [r.name for r in Reviewers.load(path).all()] == ["bo"]
    assert cli("ui", "--users", str(path), "--remove", "ana")[0] == 1  # not in the file


# --- signing in ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_console_one_time_link_signs_in_once(console: Served) -> None:
    with by_link(console) as first:
        assert first.get("/").status_code == 200
    with httpx.Client() as second:
        again = second.get(console.link, follow_redirects=False)
        assert again.status_code == 401
        assert "already used" in again.text
        assert "set-cookie" not in again.headers
        assert second.get(console.base + "/").status_code == 401


@pytest.mark.slow
def test_console_link_does_not_switch_a_signed_in_reviewer_when_it_names_another(
    paused: tuple[str, str], users: tuple[Path, str, str]
) -> None:
    store, _ = paused
    path, ana, bo = users
    with serving(store, "--users", str(path)) as served, by_form(served, ana) as client:
        switched = client.get(f"/?token={bo}", follow_redirects=False)
        assert switched.status_code in (401, 403)
        assert "set-cookie" not in switched.headers
        assert "reviewer <b>ana</b>" in client.get("/").text
        assert "reviewer <b>bo</b>" not in client.get("/").text


@pytest.mark.slow
def test_console_sign_in_form_refuses_a_wrong_token_and_another_origin(
    paused: tuple[str, str], users: tuple[Path, str, str]
) -> None:
    store, _ = paused
    path, ana, _ = users
    with serving(store, "--users", str(path)) as served, httpx.Client() as client:
        form = client.get(served.base + "/")
        assert form.status_code == 401
        assert 'action="/sign-in"' in form.text
        wrong = client.post(
            served.base + "/sign-in", data={"token": "nope"}, headers={"origin": served.base}
        )
        assert wrong.status_code == 401
        assert "That is not a reviewer&#x27;s token of this console." in wrong.text
        for origin in (f"http://127.0.0.1:{served.port + 1}", "null", None):
            headers = {} if origin is None else {"origin": origin}
            response = client.post(served.base + "/sign-in", data={"token": ana}, headers=headers)
            assert response.status_code == 403, origin
            assert "set-cookie" not in response.headers


@pytest.mark.slow
@pytest.mark.parametrize(
    "path", ["//evil.example/", "/\\evil.example/", "/%2F%2Fevil.example/", "/%5Cevil.example/"]
)
def test_console_link_redirects_only_to_a_local_path_when_the_path_is_hostile(
    paused: tuple[str, str], path: str
) -> None:
    with serving(paused[0]) as served:
        code = served.link.partition("?token=")[2]
        status, headers = raw_get(served, f"{path}?token={code}")
        assert status == 303
        location = headers["location"]
        assert location.startswith("/")
        assert not location.startswith(("//", "/\\"))
        assert "\\" not in location


@pytest.mark.slow
def test_console_sign_in_form_redirects_only_to_a_local_path(
    paused: tuple[str, str], users: tuple[Path, str, str]
) -> None:
    store, _ = paused
    path, ana, _ = users
    hostile = [
        "//evil.example/",
        "/\\evil.example/",
        "https://evil.example/",
        "http:evil.example",
        "/\t/evil.example/",
        "javascript:alert(1)",
        "///evil.example",
        " //evil.example",
    ]
    with serving(store, "--users", str(path)) as served, httpx.Client() as client:
        for target in [*hostile, "/runs/x?status=paused"]:
            response = client.post(
                served.base + "/sign-in",
                data={"token": ana, "next": target},
                headers={"origin": served.base},
                follow_redirects=False,
            )
            assert response.status_code == 303, target
            expected = "/runs/x?status=paused" if target.startswith("/runs/") else "/"
            assert response.headers["location"] == expected, target


# --- Origin, Host, form bounds ------------------------------------------------------------------


@pytest.mark.slow
def test_console_refuses_an_origin_other_than_its_exact_scheme_host_and_port(
    console: Served, paused: tuple[str, str]
) -> None:
    store, run_id = paused
    with by_link(console) as client:
        page = client.get(gate_path(run_id)).text
        form = {
            "csrf": field(page, "csrf"),
            "version": field(page, "version"),
            f"gate:{GATE}": "approve",
        }
        port = console.port
        for origin in (
            f"https://127.0.0.1:{port}",
            f"http://127.0.0.1:{port + 1}",
            f"http://localhost:{port}",
            "http://127.0.0.1",
            "null",
            None,  # a browser sends an Origin with every POST: a cookie without one is refused
        ):
            headers = {} if origin is None else {"origin": origin}
            response = client.post(gate_path(run_id), data=form, headers=headers)
            assert response.status_code == 403, origin
        assert cli("--store", store, "review", run_id)[0] == 6  # nothing was decided
        decided = client.post(
            gate_path(run_id), data=form, headers={"origin": console.base}, follow_redirects=False
        )
        assert decided.status_code == 303


@pytest.mark.slow
def test_console_refuses_a_host_other_than_its_bound_address_and_port(console: Served) -> None:
    port = console.port
    bearer = {"authorization": f"Bearer {console.token}"}
    for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1:{port + 1}", "127.0.0.1"):
        for headers in (bearer, {}):
            response = httpx.get(console.base + "/", headers={**headers, "host": host})
            assert response.status_code == 400, host
            assert "Host" in response.text
    for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
        response = httpx.get(console.base + "/", headers={**bearer, "host": host})
        assert response.status_code == 200, host


@pytest.mark.slow
def test_console_form_too_large_in_fields_or_bytes_is_a_400_without_a_traceback(
    console: Served, paused: tuple[str, str]
) -> None:
    _, run_id = paused
    with by_link(console) as client:
        page = client.get(gate_path(run_id)).text
        csrf = field(page, "csrf")
        headers = {"origin": console.base}
        many = "&".join([f"csrf={csrf}", *(f"f{n}=x" for n in range(1000))])
        big = f"csrf={csrf}&reason=" + "x" * (64 * 1024)
        for body, said in ((many, "more than 1000 fields"), (big, "larger than 64 KiB")):
            response = client.post(
                gate_path(run_id),
                content=body.encode(),
                headers={**headers, "content-type": "application/x-www-form-urlencoded"},
            )
            assert response.status_code == 400
            assert said in response.text
        json_body = client.post(gate_path(run_id), json={"csrf": csrf}, headers=headers)
        assert json_body.status_code == 400
        assert "a form" in json_body.text
    err = stop_console(console)
    assert "Traceback" not in err


# --- the session table, the reviewers file, the origin rules ------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_sessions_end_after_idle_time_lifetime_or_sign_out() -> None:
    clock = Clock()
    sessions = Sessions(lifetime_seconds=100, idle_seconds=10, clock=clock)
    reviewers, _ = Reviewers.single("ana")
    ana = reviewers.all()[0]
    first = sessions.start(ana)
    session = sessions.find(first)
    assert session is not None
    assert session.reviewer == ana.token_sha256
    assert len(session.csrf) == 64
    for _ in range(11):  # requests within the idle time keep it, up to its lifetime
        clock.now += 9
        assert sessions.find(first) is not None
    clock.now += 9  # 108 s since it began
    assert sessions.find(first) is None
    second = sessions.start(ana)
    clock.now += 11
    assert sessions.find(second) is None  # idle too long
    third = sessions.start(ana)
    assert sessions.end(third)
    assert sessions.find(third) is None
    assert not sessions.end(third)
    assert sessions.find(None) is None
    assert sessions.find("x" * 500) is None


def test_sessions_keep_at_most_their_limit_ending_the_oldest() -> None:
    sessions = Sessions(limit=2)
    reviewers, _ = Reviewers.single("ana")
    ana = reviewers.all()[0]
    ids = [sessions.start(ana) for _ in range(3)]
    assert [sessions.find(i) is not None for i in ids] == [False, True, True]
    with pytest.raises(ValueError, match="positive"):
        Sessions(idle_seconds=0)


def test_sessions_link_works_once_and_expires_with_the_lifetime() -> None:
    clock = Clock()
    sessions = Sessions(lifetime_seconds=60, clock=clock)
    reviewers, _ = Reviewers.single("ana")
    ana = reviewers.all()[0]
    code = sessions.link(ana)
    assert sessions.link_state(code) == ("valid", ana.token_sha256)
    assert sessions.use_link(code) == ana.token_sha256
    assert sessions.link_state(code) == ("used", None)
    assert sessions.use_link(code) is None
    late = sessions.link(ana)
    clock.now += 61
    assert sessions.link_state(late) == ("unknown", None)
    assert sessions.link_state("never-issued") == ("unknown", None)
    gone = sessions.link(ana)
    sessions.keep_only(lambda digest: False)
    assert sessions.link_state(gone) == ("unknown", None)


def test_reviewers_file_read_again_admits_nobody_when_it_breaks(
    users: tuple[Path, str, str], caplog: pytest.LogCaptureFixture
) -> None:
    path, ana, bo = users
    reviewers = Reviewers.load(path)
    assert not reviewers.refresh()  # unchanged
    Reviewers.remove(path, "bo")
    assert reviewers.refresh()
    assert reviewers.find(bo) is None
    assert reviewers.find(ana) is not None
    path.write_text("{not json")
    with caplog.at_level("WARNING", logger="converge.ui"):
        assert reviewers.refresh()
    assert reviewers.find(ana) is None  # fail closed
    assert "admitting nobody until the reviewers file is fixed" in caplog.text
    path.unlink()
    assert reviewers.refresh()
    assert reviewers.find(ana) is None
    Reviewers.add(path, "ana")
    with pytest.raises(ValueError, match="does not name 'carol'"):
        Reviewers.remove(path, "carol")


@pytest.mark.parametrize(
    ("target", "kept"),
    [
        ("/", True),
        ("/runs/a%2Fb?status=paused&text=x", True),
        ("//evil.example/", False),
        ("/\\evil.example/", False),
        ("/%2F%2Fevil.example/", False),
        ("/%5Cevil.example/", False),
        ("https://evil.example/", False),
        ("http:evil.example", False),
        ("/\t/evil.example", False),
        ("/\n/evil.example", False),
        ("javascript:alert(1)", False),
        ("", False),
        ("runs/x", False),
        ("/" + "a" * 3000, False),
    ],
)
def test_local_path_keeps_only_paths_on_this_console(target: str, kept: bool) -> None:
    assert local_path(target) == (target if kept else "/")


def test_origin_parse_and_hosts_match_what_a_browser_sends() -> None:
    plain = Origin.parse("http://127.0.0.1:8765")
    assert plain.serialized == "http://127.0.0.1:8765"
    assert plain.hosts == {"127.0.0.1:8765"}
    assert plain.cookie == "converge-console-8765"
    public = Origin.parse("https://Review.Example.com/")
    assert public.serialized == "https://review.example.com"
    assert public.hosts == {"review.example.com", "review.example.com:443"}
    assert Origin.parse("http://[::1]:9000").hosts == {"[::1]:9000"}
    for bad in ("ftp://x", "https://x/path", "https://user@x", "x", "https://x:99999"):
        with pytest.raises(ValueError, match="not an origin"):
            Origin.parse(bad)


def test_console_link_for_another_reviewer_asks_before_it_switches_when_signed_in(
    paused: tuple[str, str], users: tuple[Path, str, str]
) -> None:
    store, _ = paused
    path, ana, bo = users
    reviewers, sessions = Reviewers.load(path), Sessions()
    ana_link = sessions.link(reviewers.find(ana))  # type: ignore[arg-type]
    bo_link = sessions.link(reviewers.find(bo))  # type: ignore[arg-type]
    origin = {"origin": "http://127.0.0.1:8765"}
    with client_for(store, reviewers, sessions=sessions) as client:
        assert client.get(f"/?token={ana_link}", follow_redirects=False).status_code == 303
        cookie = client.cookies["converge-console-8765"]
        asked = client.get(f"/runs?token={bo_link}", follow_redirects=False)
        assert asked.status_code == 200
        assert "set-cookie" not in asked.headers
        assert "You are signed in as ana. This link signs in as bo." in asked.text
        assert "reviewer <b>ana</b>" in client.get("/").text  # nothing switched yet
        assert sessions.link_state(bo_link)[0] == "valid"  # and the link is not used up
        switched = client.post(
            "/sign-in",
            data={"link": field(asked.text, "link"), "next": field(asked.text, "next")},
            headers=origin,
            follow_redirects=False,
        )
        assert switched.status_code == 303
        assert switched.headers["location"] == "/runs"
        assert "reviewer <b>bo</b>" in client.get("/").text
        assert sessions.find(cookie) is None  # ana's session ended with the switch
        again = client.post("/sign-in", data={"link": bo_link}, headers=origin)
        assert again.status_code == 401  # used once
        assert "already used or is not valid" in again.text


def test_console_link_opened_from_another_site_asks_before_it_signs_in(
    paused: tuple[str, str], users: tuple[Path, str, str]
) -> None:
    store, _ = paused
    path, ana, _ = users
    reviewers, sessions = Reviewers.load(path), Sessions()
    code = sessions.link(reviewers.find(ana))  # type: ignore[arg-type]
    with client_for(store, reviewers, sessions=sessions) as client:
        for site in ("cross-site", "same-site"):
            asked = client.get(
                f"/?token={code}", headers={"sec-fetch-site": site}, follow_redirects=False
            )
            assert asked.status_code == 200
            assert "set-cookie" not in asked.headers
            assert "opened from another site, signs you in as ana" in asked.text
        assert client.head(f"/?token={code}").status_code == 401  # a HEAD uses no link
        assert sessions.link_state(code)[0] == "valid"
        typed = client.get(f"/?token={code}", headers={"sec-fetch-site": "none"})
        assert typed.status_code == 200
        assert "reviewer <b>ana</b>" in typed.text


def test_console_sign_out_of_a_script_is_a_400_and_ends_nothing(
    paused: tuple[str, str], users: tuple[Path, str, str]
) -> None:
    store, _ = paused
    path, ana, _ = users
    with client_for(store, Reviewers.load(path), token=ana) as client:
        response = client.post("/sign-out", data={"csrf": "x"})
        assert response.status_code == 400
        assert "Nothing to sign out" in response.text
        assert client.get("/").status_code == 200
