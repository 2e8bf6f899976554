"""No credential of a provider, in any form, reaches anything a real `converge` run leaves.

A Hypothesis property: an API key, URL credentials and a key in the base URL's query string,
each of a drawn shape around a random core that nothing else holds; a server on 127.0.0.1
that echoes them, in drawn forms, in every way a careless server might (error answers,
retried `503`s, a form across the error excerpt's 300-character boundary, a malformed reply,
a `200` reply's content and model); and the real command line: `converge run` (its output,
its stderr, the HTML report), `converge run --json`, `converge show`, and the bytes of the
SQLite store. No artefact holds any secret's core, nor the start or end of it, nor its base64
at any alignment.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
from chat_server import ChatServer, Received, Reply, completion
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FORMATION = Path(__file__).with_name("leaky_formation.py")
KEY_DECOR = "-_.~+/=:\"\\'<>&"
"""Characters drawn around the API key's core (a header value: printable ASCII)."""
URL_DECOR = KEY_DECOR + "@%#? é☃"
"""Characters drawn around the other secrets' cores (percent-encoded into the URL)."""
FORMS = ("raw", "percent", "plus", "json", "base64", "urlsafe", "embedded", "header")
GOOD = json.dumps({"proposals": [{"id": "nordics", "content": "Go north.", "confidence": 0.9}]})


@dataclass(frozen=True)
class Secret:
    """One secret: its text, and the random core that only it holds."""

    text: str
    core: str


@dataclass(frozen=True)
class Case:
    """What one example draws: the secrets' shapes, the forms echoed, where they go."""

    key: Secret
    user: Secret
    password: Secret
    token: Secret
    forms: tuple[str, ...]
    boundary: int
    """Where the form echoed across the error excerpt's boundary starts."""
    shift: int
    """Bytes before a secret inside a longer base64 text (its alignment)."""
    pick: int
    """Which echo goes across the boundary."""

    @property
    def secrets(self) -> tuple[Secret, ...]:
        return (self.key, self.user, self.password, self.token)

    def base_url(self, server: ChatServer) -> str:
        host = server.base_url.removeprefix("http://")
        user, password, token = (quote(s.text, safe="") for s in self.secrets[1:])
        return f"http://{user}:{password}@{host}?api-version=2024-06-01&key={token}"

    def echoes(self) -> list[str]:
        """Each secret in each drawn form, as a careless server would say it back."""
        said: list[str] = []
        pair = f"{self.user.text}:{self.password.text}"
        for secret in self.secrets:
            text = secret.text
            data = text.encode()
            for form in self.forms:
                said.append(
                    {
                        "raw": text,
                        "percent": quote(text, safe=""),
                        "plus": quote_plus(text),
                        "json": json.dumps(text)[1:-1],
                        "base64": base64.b64encode(data).decode(),
                        "urlsafe": base64.urlsafe_b64encode(data).decode(),
                        "embedded": base64.b64encode(b"{" * self.shift + data + b"}").decode(),
                        "header": f"Bearer {text}" if secret is self.key else f"key={text}",
                    }[form]
                )
        said.append(f"Basic {base64.b64encode(pair.encode()).decode()}")
        return said


def secret(prefix: str, decor: str) -> st.SearchStrategy[Secret]:
    """A secret of a drawn shape around a fresh random core (not drawn: nothing else holds it)."""

    def make(before: str, after: str) -> Secret:
        core = uuid.uuid4().hex[:16]
        return Secret(f"{before}{prefix}{core}{after}", core)

    around = st.text(alphabet=decor, max_size=3)
    return st.builds(make, around, around)


CASES = st.builds(
    Case,
    key=secret("sk-", KEY_DECOR),
    user=secret("u", URL_DECOR),
    password=secret("p", URL_DECOR),
    token=secret("t", URL_DECOR),
    forms=st.lists(st.sampled_from(FORMS), min_size=1, unique=True).map(tuple),
    boundary=st.integers(min_value=240, max_value=300),
    shift=st.integers(min_value=0, max_value=2),
    pick=st.integers(min_value=0, max_value=100),
)


def responder(case: Case) -> Callable[[Received], Reply]:
    """How the server answers each call of `case`'s run: by the model it asks for."""
    echoes = case.echoes()

    def respond(received: Received) -> Reply:
        said = [received.headers.get("Authorization", ""), received.path, *echoes]
        blob = json.dumps({"error": "denied", "echo": said})
        mode = received.body.get("model")
        if mode == "deny":
            return Reply(401, blob)
        if mode == "busy":
            return Reply(503, blob, {"Retry-After": "0"})
        if mode == "boundary":
            across = echoes[case.pick % len(echoes)]
            return Reply(400, "e" * case.boundary + across + "!" * 400)
        if mode == "malformed":
            return Reply(200, "<html>" + " ".join(said) + "</html>")
        if mode == "content":
            item = {"id": "leak", "content": "it said " + " ".join(said), "confidence": 0.9}
            return completion(json.dumps({"proposals": [item]}))
        if mode == "model":
            return completion(GOOD, model=" ".join(said))
        return completion(GOOD, model="good-model")

    return respond


def needles(case: Case) -> list[bytes]:
    """What no artefact may hold: each core, its start and its end (kept as they are by
    percent-encoding, JSON, HTML and terminal escapes), and each secret's base64."""
    found: list[bytes] = []
    pair = f"{case.user.text}:{case.password.text}".encode()
    for secret in case.secrets:
        found += [secret.core.encode(), secret.core[:8].encode(), secret.core[-8:].encode()]
        for data in (secret.text.encode(), pair):
            for start in range(3):  # any alignment inside a longer base64 text
                for encode in (base64.b64encode, base64.urlsafe_b64encode):
                    found.append(encode(data[start:])[:-4])
    return [needle for needle in found if len(needle) >= 8]


def converge(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "converge.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )


def artefacts(case: Case, server: ChatServer, folder: Path) -> dict[str, bytes]:
    """Everything two real runs leave: output, stderr, JSON, `show`, reports, store bytes."""
    env = {
        **os.environ,
        "LEAKY_BASE_URL": case.base_url(server),
        "OPENAI_API_KEY": case.key.text,
    }
    store = str(folder / "runs.db")
    run = converge(env, "--store", store, "run", str(FORMATION))
    assert run.returncode == 9, run.stdout + run.stderr  # converged, but with failures
    assert "converged, but with failures" in run.stdout
    run_id = next(line.split()[2] for line in run.stdout.splitlines() if line.startswith("saved"))
    as_json = converge(env, "--store", store, "run", "--json", str(FORMATION))
    assert as_json.returncode == 9, as_json.stderr
    shown = converge(env, "--store", store, "show", run_id)
    assert shown.returncode == 0, shown.stderr
    found = {
        "run stdout": run.stdout,
        "run stderr": run.stderr,
        "run --json": as_json.stdout,
        "run --json stderr": as_json.stderr,
        "show": shown.stdout,
        "show stderr": shown.stderr,
    }
    result = {name: text.encode() for name, text in found.items()}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            result[str(path.relative_to(folder))] = path.read_bytes()
    assert any(name.endswith(".html") for name in result), sorted(result)
    return result


def assert_the_echoes_were_refused_or_scrubbed(files: dict[str, bytes]) -> None:
    """The server did echo, and the run says what happened to each echo (no vacuous pass)."""
    record = json.loads(files["run --json"])
    errors = [
        execution["error"]
        for cycle in record["trace"]["cycles"]
        for execution in cycle["executions"]
        if execution.get("error")
    ]
    said = "\n".join(errors)
    assert "ask-deny" in files["run stderr"].decode()
    for expected in (
        "returned 401: ",
        "returned 503 after 2 attempts: ",
        "returned 400: e",
        "returned a malformed reply",
        "returned a reply whose choices[0].message.content holds the ",
        "returned a reply whose model holds the ",
    ):
        assert expected in said, (expected, said)
    assert "***" in said


@pytest.mark.slow
@settings(
    max_examples=int(os.environ.get("SECRETS_CLI_EXAMPLES", "6")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=CASES)
def test_no_form_of_any_secret_reaches_any_artefact_of_a_real_cli_run(case: Case) -> None:
    server = ChatServer(responder(case))
    server.start()
    try:
        with tempfile.TemporaryDirectory() as folder:
            files = artefacts(case, server, Path(folder))
    finally:
        server.stop()
    assert {received.body.get("model") for received in server.received} >= {
        "deny",
        "busy",
        "boundary",
        "malformed",
        "content",
        "model",
        "good",
    }
    assert_the_echoes_were_refused_or_scrubbed(files)
    for needle in needles(case):
        for name, data in files.items():
            assert needle not in data, f"{needle!r} in {name}"
