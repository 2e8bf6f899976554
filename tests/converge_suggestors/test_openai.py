"""OpenAIChatProvider against a real HTTP server on 127.0.0.1."""

import logging
import sys

import pytest
from chat_server import ChatServer, Reply, completion
from structlog.testing import capture_logs

from converge_suggestors import (
    ChatMessage,
    ChatRequest,
    OpenAIChatProvider,
    ProviderError,
)

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


def provider(server: ChatServer, **overrides: object) -> OpenAIChatProvider:
    settings: dict[str, object] = {"model": "m-1", "max_retries": 3, "backoff": 0.001}
    settings.update(overrides)
    return OpenAIChatProvider(server.base_url, KEY, **settings)  # pyright: ignore[reportArgumentType]


async def test_provider_posts_an_openai_request_and_parses_the_reply(
    chat_server: ChatServer,
) -> None:
    chat_server.replies.append(completion("hello", prompt=12, completion_tokens=3))
    response = await provider(chat_server).complete(REQUEST)
    assert (response.content, response.prompt_tokens, response.completion_tokens) == (
        "hello",
        12,
        3,
    )
    assert response.model == "test-model"
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


async def test_provider_sends_the_key_as_a_bearer_token(chat_server: ChatServer) -> None:
    chat_server.replies.append(completion("ok"))
    await provider(chat_server).complete(REQUEST)
    assert chat_server.received[0].headers["Authorization"] == f"Bearer {KEY}"


async def test_provider_reads_the_key_from_the_environment(
    chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    chat_server.replies.append(completion("ok"))
    await OpenAIChatProvider(chat_server.base_url, model="m").complete(REQUEST)
    assert chat_server.received[0].headers["Authorization"] == "Bearer sk-from-env"


async def test_provider_without_a_key_sends_no_authorization(
    chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    chat_server.replies.append(completion("ok"))
    await OpenAIChatProvider(chat_server.base_url, model="m").complete(REQUEST)
    assert "Authorization" not in chat_server.received[0].headers


async def test_provider_retries_after_429_then_succeeds(chat_server: ChatServer) -> None:
    chat_server.replies += [
        Reply(429, '{"error": "slow down"}', {"Retry-After": "0"}),
        completion("finally"),
    ]
    response = await provider(chat_server).complete(REQUEST)
    assert response.content == "finally"
    assert len(chat_server.received) == 2


async def test_provider_gives_up_after_repeated_500s(chat_server: ChatServer) -> None:
    chat_server.replies += [Reply(500, '{"error": "boom"}') for _ in range(4)]
    with pytest.raises(
        ProviderError, match=r"returned 500 after 4 attempts: \{\"error\": \"boom\"\}"
    ):
        await provider(chat_server).complete(REQUEST)
    assert len(chat_server.received) == 4


async def test_provider_does_not_retry_a_400(chat_server: ChatServer) -> None:
    chat_server.replies.append(Reply(400, '{"error": "bad model"}'))
    with pytest.raises(ProviderError, match="returned 400") as caught:
        await provider(chat_server).complete(REQUEST)
    assert caught.value.status == 400
    assert len(chat_server.received) == 1


async def test_provider_reports_a_malformed_reply(chat_server: ChatServer) -> None:
    chat_server.replies.append(Reply(200, "this is not json"))
    with pytest.raises(ProviderError, match="malformed reply"):
        await provider(chat_server).complete(REQUEST)


async def test_provider_reports_a_reply_without_choices(chat_server: ChatServer) -> None:
    chat_server.replies.append(Reply(200, '{"choices": []}'))
    with pytest.raises(ProviderError, match="no choices"):
        await provider(chat_server).complete(REQUEST)


async def test_provider_retries_connection_errors_then_gives_up() -> None:
    closed = OpenAIChatProvider(
        "http://127.0.0.1:9/v1", KEY, model="m", max_retries=1, backoff=0.001, timeout=2
    )
    with pytest.raises(ProviderError, match="failed after 2 attempts: Connect"):
        await closed.complete(REQUEST)


async def test_provider_never_shows_the_key_in_errors_logs_or_repr(
    chat_server: ChatServer, caplog: pytest.LogCaptureFixture
) -> None:
    echo = f'{{"error": "invalid key {KEY}"}}'
    chat_server.replies += [Reply(503, echo), Reply(401, echo)]
    subject = provider(chat_server)
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
