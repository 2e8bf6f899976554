"""Streamed replies: `OpenAIChatProvider.stream` against a scripted server on 127.0.0.1.

The text comes as it is generated, under the same bounds as a whole reply (one deadline per
attempt, the byte cap, retries, no credential in any text handed on or any error), and the
reply returned is the one `complete` returns for the same answer.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from chat_server import ChatServer, Reply

from converge_suggestors import (
    ChatMessage,
    ChatRequest,
    ChatResponse,
    OpenAIChatProvider,
    ProviderError,
    ToolCall,
)

KEY = "sk-stream-SECRET-0123456789"
REQUEST = ChatRequest(model="", messages=(ChatMessage(role="user", content="hi"),))
GUARD = 30.0
ODD = (
    "e\u0301 \U0001f469\u200d\U0001f52c \u05e9\u05dc\u05d5\u05dd \u2028 \ufeff \U00010348 \x00 end"
)
"""Combining marks, a ZWJ sequence, right-to-left text, a line separator, a BOM, an astral
character, a NUL: each a character of several UTF-8 bytes, split across chunks below."""


def event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def sse(
    pieces: list[str],
    *,
    calls: list[tuple[str, str]] = (),  # type: ignore[assignment]
    finish: str = "stop",
    usage: tuple[int, int] | None = (30, 12),
    done: bool = True,
) -> bytes:
    """The events of a streamed completion: its text in `pieces`, then its tool calls (each
    in two deltas), the finish, the usage, `[DONE]`."""
    out = [event({"model": "s-model", "choices": [{"index": 0, "delta": {"role": "assistant"}}]})]
    out += [
        event({"model": "s-model", "choices": [{"index": 0, "delta": {"content": piece}}]})
        for piece in pieces
    ]
    for index, (name, arguments) in enumerate(calls):
        half = len(arguments) // 2
        function = {"name": name, "arguments": arguments[:half]}
        first = {"index": index, "id": f"call_{index}", "function": function}
        second = {"index": index, "function": {"arguments": arguments[half:]}}
        for delta in (first, second):
            out.append(event({"choices": [{"index": 0, "delta": {"tool_calls": [delta]}}]}))
    out.append(event({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}))
    if usage is not None:
        tokens = {"prompt_tokens": usage[0], "completion_tokens": usage[1]}
        out.append(event({"choices": [], "usage": tokens}))
    if done:
        out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def whole(content: str, calls: list[tuple[str, str]] = ()) -> Reply:  # type: ignore[assignment]
    """The same completion, not streamed."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(calls)
        ]
    body = {
        "model": "s-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 12},
    }
    return Reply(body=json.dumps(body))


def split(data: bytes, size: int) -> Iterator[bytes]:
    return (data[i : i + size] for i in range(0, len(data), size))


def provider(server: ChatServer, **settings: float) -> OpenAIChatProvider:
    options: dict[str, float] = {"max_retries": 0, "backoff": 0.001}
    options.update(settings)
    return OpenAIChatProvider(server.base_url, KEY, model="m", **options)  # pyright: ignore[reportArgumentType]


async def streamed(
    subject: OpenAIChatProvider,
) -> tuple[ChatResponse | ProviderError, list[tuple[int, str]]]:
    """The call's reply or error, and every piece of text handed on (attempt, text)."""
    pieces: list[tuple[int, str]] = []

    async def on_text(attempt: int, text: str, /) -> None:
        pieces.append((attempt, text))

    with anyio.fail_after(GUARD):
        try:
            return await subject.stream(REQUEST, on_text), pieces
        except ProviderError as error:
            return error, pieces


@pytest.mark.parametrize("size", [1, 3, 7, 4096])
async def test_odd_unicode_split_across_chunks_comes_whole_and_as_complete_would_return_it(
    chat_server: ChatServer, size: int
) -> None:
    pieces = [ODD[i : i + 4] for i in range(0, len(ODD), 4)]
    calls = [("lookup", json.dumps({"city": "Z\u00fcrich \U0001f30d"}))]
    chat_server.replies.append(Reply(chunks=split(sse(pieces, calls=calls), size)))
    chat_server.replies.append(whole(ODD, calls))
    async with provider(chat_server) as subject:
        response, handed = await streamed(subject)
        plain = await subject.complete(REQUEST)
    assert isinstance(response, ChatResponse)
    assert response == plain  # the same reply, streamed or not
    assert response.content == ODD
    assert response.tool_calls == (ToolCall(id="call_0", name="lookup", arguments=calls[0][1]),)
    assert "".join(text for _, text in handed) == ODD
    assert {attempt for attempt, _ in handed} == {1}
    if size == 1:
        assert len(handed) > 1  # handed on as it came, not at the end
    sent = chat_server.received[0].body
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}
    assert "stream" not in chat_server.received[1].body


def spread(body: bytes, *, newline: bytes) -> bytes:
    """`body`'s events, each one's data (pretty-printed JSON) split over several `data:`
    lines, some without the space after the colon, among other fields and comments."""
    out: list[bytes] = []
    for number, block in enumerate(body.split(b"\n\n")[:-1]):
        data = block.removeprefix(b"data: ")
        text = data if data == b"[DONE]" else json.dumps(json.loads(data), indent=1).encode()
        out += [b": a comment", f"id: {number}".encode(), b"event: message", b"retry: 10"]
        out += [
            (b"data:" if i % 2 else b"data: ") + line for i, line in enumerate(text.split(b"\n"))
        ]
        out.append(b"")
    return newline.join(out) + newline


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"])
@pytest.mark.parametrize("size", [1, 5, 4096])
async def test_an_events_data_split_over_lines_is_joined_by_newlines(
    chat_server: ChatServer, newline: bytes, size: int
) -> None:
    pieces = ["multi ", "line\n", ODD]
    calls = [("lookup", json.dumps({"q": "a\nb"}))]
    body = spread(sse(pieces, calls=calls), newline=newline)
    assert body.count(b"data:") > 3 * body.count(b"event: message")  # several lines each
    chat_server.replies.append(Reply(chunks=split(body, size)))
    chat_server.replies.append(whole("".join(pieces), calls))
    async with provider(chat_server) as subject:
        response, handed = await streamed(subject)
        plain = await subject.complete(REQUEST)
    assert isinstance(response, ChatResponse)
    assert response == plain
    assert "".join(text for _, text in handed) == "multi line\n" + ODD


async def test_data_lines_of_one_event_are_one_value_not_several(
    chat_server: ChatServer,
) -> None:
    """Two `data:` lines with no blank line between them are one event: a server that
    meant two chunks sent one that does not read, and that is refused, not guessed at."""
    first = json.dumps({"choices": [{"index": 0, "delta": {"content": "a"}}]}).encode()
    body = b"data: " + first + b"\ndata: " + first + b"\n\ndata: [DONE]\n\n"
    chat_server.replies.append(Reply(chunks=iter([body])))
    async with provider(chat_server) as subject:
        error, handed = await streamed(subject)
    assert isinstance(error, ProviderError)
    assert "malformed reply" in str(error)
    assert handed == []


async def test_a_last_event_without_its_blank_line_is_read(chat_server: ChatServer) -> None:
    body = sse(["end"]).removesuffix(b"\n\n")  # ends "data: [DONE]", no blank line
    chat_server.replies.append(Reply(chunks=iter([body])))
    async with provider(chat_server) as subject:
        response, _ = await streamed(subject)
    assert isinstance(response, ChatResponse)
    assert response.content == "end"


async def test_a_stream_without_usage_is_tokens_unknown(chat_server: ChatServer) -> None:
    chat_server.replies.append(Reply(body=sse(["hi"], usage=None)))
    async with provider(chat_server) as subject:
        response, _ = await streamed(subject)
    assert isinstance(response, ChatResponse)
    assert response.tokens_unknown
    assert response.content == "hi"


def cut(data: bytes) -> Iterator[bytes]:
    """The first half of `data`, then the connection drops."""
    yield data[: len(data) // 2]
    raise ConnectionResetError("cut")


async def test_a_stream_cut_mid_way_fails_with_unknown_cost(chat_server: ChatServer) -> None:
    chat_server.replies.append(Reply(chunks=cut(sse(["alpha ", "beta ", "gamma ", "delta"]))))
    async with provider(chat_server) as subject:
        error, handed = await streamed(subject)
    assert isinstance(error, ProviderError)
    assert error.tokens is None  # the server generated something
    assert "RemoteProtocolError" in str(error)
    assert KEY not in str(error)
    assert "".join(t for _, t in handed).startswith("alpha")


async def test_a_cut_stream_retried_starts_its_text_again_under_the_next_attempt(
    chat_server: ChatServer,
) -> None:
    chat_server.replies.append(Reply(chunks=cut(sse(["one ", "two ", "three ", "four"]))))
    chat_server.replies.append(Reply(body=sse(["one ", "two ", "three ", "four"])))
    async with provider(chat_server, max_retries=1) as subject:
        response, handed = await streamed(subject)
    assert isinstance(response, ChatResponse)
    assert response.content == "one two three four"
    first = "".join(t for a, t in handed if a == 1)
    assert first
    assert "one two three four".startswith(first)
    assert "".join(t for a, t in handed if a == 2) == "one two three four"
    assert [a for a, _ in handed] == sorted(a for a, _ in handed)


async def test_a_stream_that_ends_before_its_end_is_a_malformed_reply(
    chat_server: ChatServer,
) -> None:
    body = sse(["half a reply"], done=False).rsplit(b"data: ", 2)[0]  # no finish, no [DONE]
    chat_server.replies.append(Reply(chunks=iter([body])))
    async with provider(chat_server) as subject:
        error, _ = await streamed(subject)
    assert isinstance(error, ProviderError)
    assert "ended before its end" in str(error)
    assert error.tokens is None


async def test_a_stream_that_never_ends_fails_at_the_deadline(chat_server: ChatServer) -> None:
    start = event({"choices": [{"index": 0, "delta": {"content": "tick "}}]})
    chat_server.replies.append(Reply(chunks=itertools.repeat(start), pause=0.01))
    async with provider(chat_server, timeout=0.8) as subject:
        began = time.monotonic()
        error, handed = await streamed(subject)
        took = time.monotonic() - began
    assert isinstance(error, ProviderError)
    assert "timed out" in str(error)
    assert 0.7 < took < 5.0
    assert len(chat_server.received) == 1  # not retried
    assert handed  # the ticks came as they were generated


async def test_keep_alives_forever_fail_at_the_deadline(chat_server: ChatServer) -> None:
    chat_server.replies.append(Reply(chunks=itertools.repeat(b": keep-alive\n\n"), pause=0.01))
    async with provider(chat_server, timeout=0.6) as subject:
        error, handed = await streamed(subject)
    assert isinstance(error, ProviderError)
    assert "timed out" in str(error)
    assert handed == []


async def test_a_stream_over_the_byte_cap_is_refused(chat_server: ChatServer) -> None:
    piece = event({"choices": [{"index": 0, "delta": {"content": "x" * 1000}}]})
    chat_server.replies.append(Reply(chunks=itertools.repeat(piece)))
    async with provider(chat_server, max_reply_bytes=50_000) as subject:
        error, handed = await streamed(subject)
    assert isinstance(error, ProviderError)
    assert "over max_reply_bytes (50000 bytes)" in str(error)
    assert sum(len(t) for _, t in handed) <= 50_000
    assert chat_server.sent_bytes < 10_000_000


@pytest.mark.parametrize(
    ("garbage", "reason"),
    [
        (b"data: {not json\n\n", "malformed reply"),
        (b'data: {"choices": "many"}\n\n', "malformed reply"),
        (b'data: {"choices": [{"delta": {"content": 7}}]}\n\n', "malformed reply"),
        (b'data: {"error": {"message": "overloaded"}}\n\n', "the stream reported an error"),
        (b"data: [DONE]\n\ndata: {}\n\n", "data after data: [DONE]"),
        (b"\xff\xfe\x00garbage\n\n", "ended before its end"),
        (b"data: [DONE]\n\n", "no choices in the reply"),
    ],
)
async def test_garbage_in_the_stream_is_a_malformed_reply(
    chat_server: ChatServer, garbage: bytes, reason: str
) -> None:
    head = event({"choices": [{"index": 0, "delta": {"content": "ok "}}]})
    body = garbage if b"no choices" in reason.encode() else head + garbage
    chat_server.replies.append(Reply(chunks=iter([body])))
    async with provider(chat_server) as subject:
        error, _ = await streamed(subject)
    assert isinstance(error, ProviderError)
    assert reason in str(error)
    assert error.status == 200
    assert KEY not in str(error)


async def test_an_echoed_key_is_never_handed_on_even_split_across_chunks(
    chat_server: ChatServer,
) -> None:
    text = f"before {KEY} after"
    pieces = [text[i : i + 3] for i in range(0, len(text), 3)]
    chat_server.replies.append(Reply(chunks=split(sse(pieces), 5)))
    async with provider(chat_server) as subject:
        error, handed = await streamed(subject)
    assert isinstance(error, ProviderError)
    assert "holds the API key" in str(error)
    assert KEY not in str(error)
    shown = "".join(t for _, t in handed)
    assert shown == "before "  # not even the start of the key


async def test_an_error_answer_to_a_stream_is_retried_like_any_other(
    chat_server: ChatServer,
) -> None:
    chat_server.replies.append(Reply(status=503, body="busy"))
    chat_server.replies.append(Reply(body=sse(["fine"])))
    async with provider(chat_server, max_retries=1) as subject:
        response, handed = await streamed(subject)
    assert isinstance(response, ChatResponse)
    assert handed == [(2, "fine")]


async def test_one_endless_line_is_stopped_at_the_byte_cap_in_linear_time(
    chat_server: ChatServer,
) -> None:
    chat_server.replies.append(
        Reply(chunks=itertools.chain([b"data: "], itertools.repeat(b"x" * 512)))
    )
    async with provider(chat_server, max_reply_bytes=4_000_000) as subject:
        began = time.monotonic()
        error, handed = await streamed(subject)
    assert isinstance(error, ProviderError)
    assert "over max_reply_bytes" in str(error)
    assert handed == []
    assert time.monotonic() - began < 10.0
