"""OpenAIChatProvider against a real HTTP server on 127.0.0.1."""

import email.utils
import logging
import sys
import time
from collections.abc import AsyncIterator

import anyio
import pytest
from chat_server import ChatServer, Reply, completion
from structlog.testing import capture_logs

from converge_suggestors import (
    ChatMessage,
    ChatRequest,
    OpenAIChatProvider,
    ProviderError,
    ResponseSchema,
)
from converge_suggestors._http import retry_after_seconds, safe_url

KEY = "sk-test-SECRET-0123456789"
REQUEST = ChatRequest(
    model="",
    messages=(
        ChatMessage(role="system", content="be brief"),
        ChatMessage(role="user", content="hi"),
    ),
    temperature=0.0,
    max_tokens=32,
)
SCHEMA = ResponseSchema(
    name="reply",
    json_schema={"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
)


def provider(server: ChatServer, **overrides: object) -> OpenAIChatProvider:
    settings: dict[str, object] = {"model": "m-1", "max_retries": 3, "backoff": 0.001}
    settings.update(overrides)
    return OpenAIChatProvider(server.base_url, KEY, **settings)  # pyright: ignore[reportArgumentType]


@pytest.fixture
async def subject(chat_server: ChatServer) -> AsyncIterator[OpenAIChatProvider]:
    async with provider(chat_server) as opened:
        yield opened


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every backoff the provider asks for, recorded instead of slept."""
    asked: list[float] = []
    real = anyio.sleep

    async def fake(delay: float) -> None:
        asked.append(delay)
        await real(0)

    monkeypatch.setattr(anyio, "sleep", fake)
    return asked


async def test_provider_posts_an_openai_request_and_parses_the_reply(
    chat_server: ChatServer, subject: OpenAIChatProvider
) -> None:
    chat_server.replies.append(
        completion("hello", prompt=12, completion_tokens=3, finish_reason="length")
    )
    response = await subject.complete(REQUEST)
    assert (response.content, response.prompt_tokens, response.completion_tokens) == (
        "hello",
        12,
        3,
    )
    assert response.model == "test-model"
    assert response.finish_reason == "length"
    [received] = chat_server.received
    assert received.path == "/v1/chat/completions"
    assert received.body == {
        "model": "m-1",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"},
        ],
        "temperature": 0.0,
        "max_tokens": 32,
    }


async def test_provider_sends_every_call_option(
    chat_server: ChatServer, subject: OpenAIChatProvider
) -> None:
    chat_server.replies.append(completion("ok"))
    request = REQUEST.model_copy(
        update={"model": "other", "top_p": 0.9, "seed": 7, "stop": ("\n\n", "END")}
    )
    await subject.complete(request)
    body = chat_server.received[0].body
    assert body["model"] == "other"
    assert (body["top_p"], body["seed"], body["stop"]) == (0.9, 7, ["\n\n", "END"])
    assert "response_format" not in body


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (
            "json_schema",
            {
                "type": "json_schema",
                "json_schema": {"name": "reply", "schema": SCHEMA.json_schema, "strict": True},
            },
        ),
        ("json_object", {"type": "json_object", "schema": SCHEMA.json_schema}),
        ("none", None),
    ],
)
async def test_provider_sends_the_response_schema_as_its_structured_output_option_says(
    chat_server: ChatServer, mode: str, expected: dict[str, object] | None
) -> None:
    chat_server.replies.append(completion('{"a": "b"}'))
    async with provider(chat_server, structured_output=mode) as subject:
        assert subject.structured_output == mode
        await subject.complete(REQUEST.model_copy(update={"response_schema": SCHEMA}))
    assert chat_server.received[0].body.get("response_format") == expected


def test_provider_refuses_an_unknown_structured_output_mode() -> None:
    with pytest.raises(ValueError, match="structured_output must be"):
        OpenAIChatProvider("http://127.0.0.1:9/v1", model="m", structured_output="xml")  # pyright: ignore[reportArgumentType]


async def test_provider_sends_the_key_as_a_bearer_token(
    chat_server: ChatServer, subject: OpenAIChatProvider
) -> None:
    chat_server.replies.append(completion("ok"))
    await subject.complete(REQUEST)
    assert chat_server.received[0].headers["Authorization"] == f"Bearer {KEY}"


async def test_provider_reads_the_key_from_the_environment(
    chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    chat_server.replies.append(completion("ok"))
    async with OpenAIChatProvider(chat_server.base_url, model="m") as subject:
        await subject.complete(REQUEST)
    assert chat_server.received[0].headers["Authorization"] == "Bearer sk-from-env"


async def test_provider_without_a_key_sends_no_authorization(
    chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    chat_server.replies.append(completion("ok"))
    async with OpenAIChatProvider(chat_server.base_url, model="m") as subject:
        await subject.complete(REQUEST)
    assert "Authorization" not in chat_server.received[0].headers


# --- one client, reused ---------------------------------------------------------------------


async def test_provider_reuses_one_connection_across_calls(
    chat_server: ChatServer, subject: OpenAIChatProvider
) -> None:
    chat_server.replies += [completion("one"), completion("two")]
    assert (await subject.complete(REQUEST)).content == "one"
    assert (await subject.complete(REQUEST)).content == "two"
    first, second = chat_server.received
    assert first.port == second.port  # one kept-alive connection: one client


async def test_async_with_closes_the_client_and_a_later_call_opens_a_new_one(
    chat_server: ChatServer,
) -> None:
    chat_server.replies += [completion("one"), completion("two")]
    subject = provider(chat_server)
    async with subject:
        await subject.complete(REQUEST)
    async with subject:
        await subject.complete(REQUEST)
    first, second = chat_server.received
    assert first.port != second.port


def test_provider_works_across_separate_event_loops(
    chat_server: ChatServer, anyio_backend: str
) -> None:
    """A client is bound to its event loop: the next `anyio.run` gets a new one, no error."""
    chat_server.replies += [completion(str(n)) for n in range(5)]
    subject = provider(chat_server)
    responses = [anyio.run(subject.complete, REQUEST, backend=anyio_backend) for _ in range(2)]
    other = "trio" if anyio_backend == "asyncio" else "asyncio"
    responses.append(anyio.run(subject.complete, REQUEST, backend=other))
    contents = [response.content for response in responses]

    async def twice_then_close() -> str:
        async with subject:
            await subject.complete(REQUEST)
            return (await subject.complete(REQUEST)).content

    contents.append(anyio.run(twice_then_close, backend=anyio_backend))
    assert contents == ["0", "1", "2", "4"]
    ports = [received.port for received in chat_server.received]
    assert len(set(ports[:3])) == 3  # a new connection for each event loop
    assert ports[3] == ports[4]  # reused within one


# --- retries --------------------------------------------------------------------------------


async def test_provider_retries_after_429_honouring_retry_after_seconds(
    chat_server: ChatServer, subject: OpenAIChatProvider, sleeps: list[float]
) -> None:
    chat_server.replies += [
        Reply(429, '{"error": "slow down"}', {"Retry-After": "1"}),
        completion("finally"),
    ]
    response = await subject.complete(REQUEST)
    assert response.content == "finally"
    assert len(chat_server.received) == 2
    assert sleeps == [1.0]


async def test_provider_honours_a_retry_after_date(
    chat_server: ChatServer, subject: OpenAIChatProvider, sleeps: list[float]
) -> None:
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    chat_server.replies += [Reply(503, "busy", {"Retry-After": later}), completion("ok")]
    assert (await subject.complete(REQUEST)).content == "ok"
    [delay] = sleeps
    assert 27 <= delay <= 30


async def test_provider_really_waits_a_short_retry_after(
    chat_server: ChatServer, subject: OpenAIChatProvider
) -> None:
    chat_server.replies += [Reply(429, "wait", {"Retry-After": "0.3"}), completion("ok")]
    assert (await subject.complete(REQUEST)).content == "ok"
    first, second = chat_server.received
    assert second.at - first.at >= 0.3


async def test_provider_backs_off_exponentially_with_jitter(
    chat_server: ChatServer, sleeps: list[float]
) -> None:
    chat_server.replies += [Reply(503, "busy") for _ in range(3)] + [completion("ok")]
    async with provider(chat_server, backoff=1.0) as subject:
        assert (await subject.complete(REQUEST)).content == "ok"
    assert len(sleeps) == 3
    for n, delay in enumerate(sleeps):
        assert 0.5 * 2**n <= delay <= 2**n


async def test_provider_gives_up_after_repeated_500s(
    chat_server: ChatServer, subject: OpenAIChatProvider
) -> None:
    chat_server.replies += [Reply(500, '{"error": "boom"}') for _ in range(4)]
    with pytest.raises(
        ProviderError, match=r"returned 500 after 4 attempts: \{\"error\": \"boom\"\}"
    ) as caught:
        await subject.complete(REQUEST)
    assert len(chat_server.received) == 4
    assert "structured_output='json_object'" in str(caught.value)  # the llama.cpp hint
    assert caught.value.tokens == 0  # an error answer reports no usage: nothing generated


async def test_provider_does_not_retry_a_400(
    chat_server: ChatServer, subject: OpenAIChatProvider
) -> None:
    chat_server.replies.append(Reply(400, '{"error": "bad model"}'))
    with pytest.raises(ProviderError, match="returned 400") as caught:
        await subject.complete(REQUEST)
    assert caught.value.status == 400
    assert len(chat_server.received) == 1


async def test_provider_reports_a_malformed_reply(
    chat_server: ChatServer, subject: OpenAIChatProvider
) -> None:
    chat_server.replies.append(Reply(200, "this is not json"))
    with pytest.raises(ProviderError, match="malformed reply"):
        await subject.complete(REQUEST)


async def test_provider_reports_a_reply_without_choices(
    chat_server: ChatServer, subject: OpenAIChatProvider
) -> None:
    chat_server.replies.append(Reply(200, '{"choices": []}'))
    with pytest.raises(ProviderError, match="no choices"):
        await subject.complete(REQUEST)


async def test_provider_retries_a_refused_connection_then_gives_up(sleeps: list[float]) -> None:
    closed = OpenAIChatProvider(
        "http://127.0.0.1:9/v1", KEY, model="m", max_retries=2, backoff=0.001, timeout=2
    )
    async with closed:
        with pytest.raises(ProviderError) as caught:
            await closed.complete(REQUEST)
    message = str(caught.value)
    assert message.startswith(
        "POST http://127.0.0.1:9/v1/chat/completions failed after 3 attempts: ConnectError: "
    )
    assert not message.endswith(": ")
    assert len(sleeps) == 2
    assert caught.value.tokens == 0  # the request never reached a server: nothing generated


async def test_a_dropped_connection_makes_the_tokens_unknown_even_when_a_later_attempt_is_an_error(
    chat_server: ChatServer, sleeps: list[float]
) -> None:
    chat_server.replies += [Reply(drop=True)]
    async with provider(chat_server, max_retries=0) as subject:
        with pytest.raises(ProviderError) as caught:
            await subject.complete(REQUEST)
    assert caught.value.tokens is None  # the server had the request: it may have generated
    chat_server.replies += [Reply(drop=True), Reply(503, "busy")]
    async with provider(chat_server, max_retries=1) as subject:
        with pytest.raises(ProviderError, match="returned 503 after 2 attempts") as caught:
            await subject.complete(REQUEST)
    assert caught.value.tokens is None  # the 503 cost nothing, the dropped attempt is unknown
    chat_server.replies += [Reply(400, "bad")]
    async with provider(chat_server) as subject:
        with pytest.raises(ProviderError, match="returned 400") as caught:
            await subject.complete(REQUEST)
    assert caught.value.tokens == 0


def test_the_endpoint_is_shown_without_credentials_or_query() -> None:
    subject = OpenAIChatProvider("https://bob:pw@api.example/v1?key=k", KEY, model="m")
    assert subject.endpoint == "https://api.example/v1/chat/completions"


async def test_provider_retries_a_dropped_connection(
    chat_server: ChatServer, subject: OpenAIChatProvider
) -> None:
    chat_server.replies += [Reply(drop=True), completion("ok")]
    assert (await subject.complete(REQUEST)).content == "ok"
    assert len(chat_server.received) == 2


async def test_provider_does_not_retry_a_read_timeout_and_says_what_happened(
    chat_server: ChatServer,
) -> None:
    chat_server.replies += [Reply(delay=0.6, body="{}"), completion("never asked")]
    async with provider(chat_server, timeout=0.2) as subject:
        with pytest.raises(ProviderError) as caught:
            await subject.complete(REQUEST)
    assert str(caught.value) == (
        f"POST {chat_server.base_url}/chat/completions timed out: no complete reply within "
        "0.2 s (no answer yet); not retried, since the server may still be generating: "
        "raise `timeout` or lower `max_tokens`"
    )
    assert caught.value.tokens is None  # unknown: the server may have generated any number
    assert caught.value.status is None
    assert len(chat_server.received) == 1


async def test_errors_show_the_url_without_credentials_or_query(chat_server: ChatServer) -> None:
    host = chat_server.base_url.removeprefix("http://")
    chat_server.replies.append(Reply(404, "no such model"))
    url = f"http://user:hunter2@{host}?api-key=abc123"
    async with OpenAIChatProvider(url, model="m", max_retries=0) as subject:
        with pytest.raises(ProviderError) as caught:
            await subject.complete(REQUEST)
        assert "hunter2" not in repr(subject)
    message = str(caught.value)
    assert message == f"POST http://{host}/chat/completions returned 404: no such model"


def test_retry_after_and_safe_url_helpers() -> None:
    assert retry_after_seconds(None) is None
    assert retry_after_seconds(" 2 ") == 2.0
    assert retry_after_seconds("-5") == 0.0
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds("nan") is None
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past
    assert safe_url("https://u:p@example.com:8443/v1/x?key=s#f") == "https://example.com:8443/v1/x"
    assert safe_url("http://[::1]:8000/v1") == "http://[::1]:8000/v1"


async def test_provider_never_shows_the_key_in_errors_logs_or_repr(
    chat_server: ChatServer, caplog: pytest.LogCaptureFixture, subject: OpenAIChatProvider
) -> None:
    echo = f'{{"error": "invalid key {KEY}"}}'
    chat_server.replies += [Reply(503, echo), Reply(401, echo)]
    with caplog.at_level(logging.DEBUG), capture_logs() as logs:
        with pytest.raises(ProviderError) as caught:
            await subject.complete(REQUEST)
    assert chat_server.received[0].headers["Authorization"] == f"Bearer {KEY}"
    assert KEY not in str(caught.value)
    assert "***" in str(caught.value)
    assert KEY not in repr(subject)
    assert KEY not in caplog.text
    assert any(entry["event"] == "provider_retry" for entry in logs)
    assert all(KEY not in repr(entry) for entry in logs)


def test_provider_without_httpx_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "httpx", None)
    with pytest.raises(ImportError, match=r"install the 'llm' extra"):
        OpenAIChatProvider("http://127.0.0.1:1/v1", model="m")


async def test_the_request_is_sent_by_the_openai_sdk_with_its_retries_off(
    chat_server: ChatServer,
) -> None:
    chat_server.replies.append(Reply(503, "busy"))
    async with provider(chat_server, max_retries=0) as subject:
        with pytest.raises(ProviderError, match="returned 503 after 1 attempts: busy"):
            await subject.complete(REQUEST)
    (received,) = chat_server.received  # the SDK retried nothing on its own
    assert received.headers["User-Agent"].startswith("AsyncOpenAI/Python ")
    assert received.headers["X-Stainless-Retry-Count"] == "0"
    assert received.body == subject.body(REQUEST)


async def test_a_query_in_the_base_url_is_kept_on_the_endpoint(chat_server: ChatServer) -> None:
    chat_server.replies.append(completion("ok"))
    base = f"{chat_server.base_url}?api-version=2024-10-21"
    async with OpenAIChatProvider(base, KEY, model="m") as subject:
        assert (await subject.complete(REQUEST)).content == "ok"
    assert chat_server.received[0].path == "/v1/chat/completions?api-version=2024-10-21"
