"""OpenAIChatProvider's bounds against a misbehaving server on 127.0.0.1.

Each attempt has one deadline for all of it (connect, headers and the whole body: a body that
trickles or never ends fails at the deadline, not at each read), and a cap on the bytes it
reads after decompression (a gzip bomb is stopped at the cap, its memory measured).
"""

import gzip
import itertools
import json
import os
import subprocess
import sys
import time
import tracemalloc
import zlib
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from chat_server import ChatServer, Received, Reply, completion

from converge_suggestors import ChatMessage, ChatRequest, OpenAIChatProvider, ProviderError

REQUEST = ChatRequest(model="", messages=(ChatMessage(role="user", content="hi"),))
GUARD = 30.0
"""Seconds after which a test gives up waiting (a call that should have failed long before)."""


def provider(server: ChatServer, **settings: object) -> OpenAIChatProvider:
    options: dict[str, object] = {"model": "m", "max_retries": 2, "backoff": 0.001}
    options.update(settings)
    return OpenAIChatProvider(server.base_url, "sk-limits", **options)  # pyright: ignore[reportArgumentType]


async def failure_of(subject: OpenAIChatProvider) -> tuple[ProviderError, float]:
    """The call's `ProviderError` and how long it took to come."""
    started = time.monotonic()
    with anyio.fail_after(GUARD), pytest.raises(ProviderError) as caught:
        await subject.complete(REQUEST)
    return caught.value, time.monotonic() - started


async def failure_and_peak_memory(subject: OpenAIChatProvider) -> tuple[ProviderError, int]:
    """The call's `ProviderError` and the most bytes Python allocated while it ran."""
    tracemalloc.start()
    try:
        error, _ = await failure_of(subject)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return error, peak


def trickle(data: bytes) -> Iterator[bytes]:
    return (data[i : i + 1] for i in range(len(data)))


async def test_a_reply_trickled_a_byte_at_a_time_fails_at_the_deadline(
    chat_server: ChatServer,
) -> None:
    body = completion("x" * 200).body
    assert isinstance(body, str)
    chat_server.replies.append(Reply(chunks=trickle(body.encode()), pause=0.05))
    async with provider(chat_server, timeout=1.0) as subject:
        error, took = await failure_of(subject)
    assert 0.9 < took < 3.0  # each byte came well within `timeout`: only a deadline stops it
    message = str(error)
    assert message.startswith(f"POST {chat_server.base_url}/chat/completions timed out: ")
    assert "no complete reply within 1 s" in message
    assert "bytes of the body had come" in message
    assert (error.tokens, error.status) == (None, 200)  # the server was generating: unknown
    assert len(chat_server.received) == 1  # not retried: it may still be generating


async def test_a_body_that_never_ends_fails_at_the_deadline(chat_server: ChatServer) -> None:
    chat_server.replies.append(Reply(chunks=itertools.repeat(b" " * 64), pause=0.01))
    async with provider(chat_server, timeout=0.8) as subject:
        error, took = await failure_of(subject)
    assert 0.7 < took < 3.0
    assert "no complete reply within 0.8 s" in str(error)
    assert len(chat_server.received) == 1


async def test_headers_that_never_come_fail_at_the_deadline(chat_server: ChatServer) -> None:
    chat_server.replies.append(Reply(delay=5.0, body="{}"))
    async with provider(chat_server, timeout=0.5) as subject:
        error, took = await failure_of(subject)
    assert 0.4 < took < 3.0
    assert "no complete reply within 0.5 s (no answer yet)" in str(error)
    assert (error.tokens, error.status) == (None, None)
    assert len(chat_server.received) == 1


async def test_a_reply_over_the_byte_cap_is_refused_without_reading_the_rest(
    chat_server: ChatServer,
) -> None:
    chat_server.replies.append(Reply(chunks=itertools.repeat(b" " * 4096)))
    async with provider(chat_server, max_reply_bytes=100_000) as subject:
        error, _ = await failure_of(subject)
    assert str(error) == (
        f"POST {chat_server.base_url}/chat/completions returned a reply over "
        "max_reply_bytes (100000 bytes); the rest was not read"
    )
    assert (error.tokens, error.status) == (None, 200)
    assert len(chat_server.received) == 1  # the same question would get the same reply
    assert chat_server.sent_bytes < 10_000_000  # it stopped reading: the server stalled


async def test_a_reply_within_the_byte_cap_is_read_whole(chat_server: ChatServer) -> None:
    chat_server.replies.append(completion("y" * 50_000))
    async with provider(chat_server, max_reply_bytes=60_000) as subject:
        response = await subject.complete(REQUEST)
    assert response.content == "y" * 50_000


def bomb(megabytes: int) -> bytes:
    """`megabytes` MB of spaces, gzipped, made a megabyte at a time."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    spaces = b" " * 1_000_000
    parts = [packer.compress(spaces) for _ in range(megabytes)]
    return b"".join([*parts, packer.flush()])


@pytest.mark.slow
async def test_a_gzip_bomb_is_stopped_at_the_byte_cap_in_little_memory(
    chat_server: ChatServer,
) -> None:
    wire = bomb(200)
    assert len(wire) < 250_000  # 200 MB of spaces in about 200 KB on the wire
    chat_server.replies.append(Reply(body=wire, headers={"Content-Encoding": "gzip"}))
    async with provider(chat_server) as subject:
        error, peak = await failure_and_peak_memory(subject)
    assert "returned a reply over max_reply_bytes (16777216 bytes)" in str(error)
    assert peak < 40_000_000, f"peak {peak / 1e6:.1f} MB"  # the cap (16 MiB), not 200 MB


async def test_a_gzipped_reply_within_the_cap_is_decompressed(chat_server: ChatServer) -> None:
    body = completion("zipped " * 1000).body
    assert isinstance(body, str)
    for encoding, data in [
        ("gzip", gzip.compress(body.encode())),
        ("deflate", zlib.compress(body.encode())),
        ("deflate", zlib.compress(body.encode(), wbits=-zlib.MAX_WBITS)),  # raw deflate
    ]:
        chat_server.replies.append(Reply(body=data, headers={"Content-Encoding": encoding}))
        async with provider(chat_server) as subject:
            response = await subject.complete(REQUEST)
        assert response.content == "zipped " * 1000, encoding
    assert chat_server.received[0].headers["Accept-Encoding"] == "gzip, deflate"


async def test_a_reply_in_an_unknown_encoding_or_broken_gzip_is_malformed(
    chat_server: ChatServer,
) -> None:
    text = completion("ok").body
    assert isinstance(text, str)
    body = gzip.compress(text.encode())
    chat_server.replies += [
        Reply(body=b"\x00\x01", headers={"Content-Encoding": "br"}),
        Reply(body=b"not gzip at all", headers={"Content-Encoding": "gzip"}),
        Reply(body=body[: len(body) // 2], headers={"Content-Encoding": "gzip"}),
    ]
    async with provider(chat_server, max_retries=0) as subject:
        reasons = [str((await failure_of(subject))[0]) for _ in range(3)]
    assert (
        "returned a malformed reply (Content-Encoding 'br' is not gzip or deflate)" in (reasons[0])
    )
    assert "returned a malformed reply (its gzip body is corrupt" in reasons[1]
    assert "returned a malformed reply (its gzip body ends before its end)" in reasons[2]


async def test_an_error_answer_is_read_only_up_to_its_excerpt(chat_server: ChatServer) -> None:
    chat_server.replies.append(Reply(404, chunks=itertools.repeat(b"no such model. " * 100)))
    async with provider(chat_server) as subject:
        error, _ = await failure_of(subject)
    message = str(error)
    assert message.startswith(
        f"POST {chat_server.base_url}/chat/completions returned 404: no such model. no such"
    )
    assert message.endswith("…")
    assert chat_server.sent_bytes < 10_000_000


async def test_the_deadline_does_not_change_retries_of_error_answers(
    chat_server: ChatServer,
) -> None:
    chat_server.replies += [
        Reply(503, "busy", {"Retry-After": "0.3"}),
        Reply(503, "busy", {"Retry-After": "0.3"}),
        completion("at last"),
    ]
    async with provider(chat_server, timeout=0.5) as subject:
        response = await subject.complete(REQUEST)
    assert response.content == "at last"  # 0.6 s of waits in all: each attempt has its own
    first, _, third = chat_server.received
    assert third.at - first.at >= 0.6


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": None, "completion_tokens": None},
        {"prompt_tokens": 12, "completion_tokens": None},
        {"prompt_tokens": None, "completion_tokens": 3, "total_tokens": None},
        None,
        "absent",
    ],
)
async def test_usage_with_null_or_missing_counts_makes_the_tokens_unknown(
    chat_server: ChatServer, usage: object
) -> None:
    payload: dict[str, object] = {
        "model": "m",
        "choices": [{"message": {"content": "fine"}, "finish_reason": "stop"}],
    }
    if usage != "absent":
        payload["usage"] = usage
    chat_server.replies.append(Reply(body=json.dumps(payload)))
    async with provider(chat_server) as subject:
        response = await subject.complete(REQUEST)
    assert (response.content, response.tokens_unknown) == ("fine", True)
    known: dict[str, int | None] = usage if isinstance(usage, dict) else {}  # pyright: ignore[reportUnknownVariableType]
    assert response.prompt_tokens == (known.get("prompt_tokens") or 0)
    assert response.completion_tokens == (known.get("completion_tokens") or 0)


async def test_full_usage_is_known(chat_server: ChatServer) -> None:
    chat_server.replies.append(completion("fine", prompt=5, completion_tokens=2))
    async with provider(chat_server) as subject:
        response = await subject.complete(REQUEST)
    assert (response.prompt_tokens, response.completion_tokens) == (5, 2)
    assert response.tokens_unknown is False


async def test_a_reply_nested_deeper_than_any_parser_is_a_malformed_reply(
    chat_server: ChatServer,
) -> None:
    chat_server.replies.append(Reply(body="[" * 200_000 + "]" * 200_000))
    async with provider(chat_server, max_retries=0) as subject:
        error, _ = await failure_of(subject)
    assert "returned a malformed reply (" in str(error)
    assert error.tokens is None


def test_the_byte_cap_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_reply_bytes must be positive, got 0"):
        OpenAIChatProvider("http://127.0.0.1:9/v1", model="m", max_reply_bytes=0)


ENDLESS_FORMATION = """
import os

from converge import ContextKey, Formation
from converge_suggestors import LlmSuggestor, OpenAIChatProvider, SeedSuggestor

url = os.environ["ENDLESS_BASE_URL"]


def asking(name, timeout):
    model = OpenAIChatProvider(url, "", model="m", timeout=timeout, max_retries=0)
    return LlmSuggestor(
        name, model, dependencies=[ContextKey.SEEDS], target=ContextKey.HYPOTHESES,
        instructions="Propose.",
    )


formation = Formation(
    name="endless",
    suggestors=(
        SeedSuggestor("q", "Which market?"),
        asking("deadline", 1.0),
        asking("patient", 600),
    ),
    suggestor_timeout=3.0,
)
"""


@pytest.mark.slow
def test_converge_run_of_replies_that_never_end_stops_at_the_deadlines(
    chat_server: ChatServer, tmp_path: Path
) -> None:
    """The provider's deadline stops one call; the formation's `suggestor_timeout` the other,
    whose provider would wait 600 s."""

    def endless(received: Received) -> Reply:
        return Reply(chunks=itertools.repeat(b" "), pause=0.05)

    chat_server.responder = endless
    path = tmp_path / "endless.py"
    path.write_text(ENDLESS_FORMATION, encoding="utf-8")
    env = {**os.environ, "ENDLESS_BASE_URL": chat_server.base_url}
    command = [sys.executable, "-m", "converge.cli", "--store", str(tmp_path / "runs.db")]
    started = time.monotonic()
    done = subprocess.run(
        [*command, "run", str(path)], capture_output=True, text=True, env=env, timeout=120
    )
    assert time.monotonic() - started < 30.0
    assert done.returncode == 9, done.stdout + done.stderr
    assert (
        "deadline (execute, cycle 2, attempt 1, failed): ProviderError: POST "
        f"{chat_server.base_url}/chat/completions timed out: no complete reply within 1 s "
        "(status 200; " in done.stdout
    )
    assert (
        "patient (execute, cycle 2, attempt 1, timed_out): TimeoutError: no effect within 3.0 s"
        in done.stdout
    )


async def test_an_error_answer_in_an_unknown_encoding_keeps_its_status(
    chat_server: ChatServer,
) -> None:
    chat_server.replies.append(Reply(429, b"\x00\x01", {"Content-Encoding": "br"}))
    async with provider(chat_server, max_retries=0) as subject:
        error, _ = await failure_of(subject)
    assert str(error) == (
        f"POST {chat_server.base_url}/chat/completions returned 429 after 1 attempts: "
        "(an unreadable body: Content-Encoding 'br' is not gzip or deflate)"
    )
    assert error.status == 429


@pytest.mark.slow
async def test_a_gzip_bomb_in_an_error_answer_is_read_only_up_to_its_excerpt(
    chat_server: ChatServer,
) -> None:
    # the openai SDK reads an error answer whole before raising: the transport reads it first
    chat_server.replies.append(Reply(404, bomb(200), {"Content-Encoding": "gzip"}))
    async with provider(chat_server, max_retries=0) as subject:
        error, peak = await failure_and_peak_memory(subject)
    assert str(error).startswith(f"POST {chat_server.base_url}/chat/completions returned 404:  ")
    assert str(error).endswith("…")
    assert peak < 10_000_000, f"peak {peak / 1e6:.1f} MB"  # the excerpt's cap, not 200 MB
