"""`LlmSuggestor(stream=True)` under plain `run` with a store that relays tokens: the text
of the running call reaches the store (for the console), is gone once the run stops, and the
run records exactly what a call that does not stream records."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from chat_server import ChatServer, Received, Reply
from test_llm_stream import FINAL, SEED, Seen, engine, recorded, respond

from converge import ConvergeResult, RunStore
from converge._core._live_text import LiveText, TokenRelay
from converge.stores import PostgresRunStore, SqliteRunStore

DATABASE_URL = os.environ.get("DATABASE_URL")
REQUIRE = os.environ.get("CONVERGE_REQUIRE_SERVICES") == "1"
GUARD = 30.0


@pytest.fixture(params=["sqlite", "postgres"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[RunStore, RunStore]]:
    """Two stores of the same kind, empty: one for the streamed run, one for the plain."""
    if request.param == "sqlite":
        yield SqliteRunStore(tmp_path / "a.db"), SqliteRunStore(tmp_path / "b.db")
        return
    if not DATABASE_URL:
        if REQUIRE:
            pytest.fail("CONVERGE_REQUIRE_SERVICES=1 but DATABASE_URL is not set")
        pytest.skip("set DATABASE_URL=postgresql://... for the PostgreSQL store")
    made = PostgresRunStore(DATABASE_URL)
    yield made, made


class Held:
    """The chat server's replies, the final streamed one held half-way until `go` is set."""

    def __init__(self) -> None:
        self.go = threading.Event()

    def __call__(self, received: Received) -> Reply:
        reply = respond(received)
        if reply.chunks is None or "tool" not in json.dumps(received.body["messages"]):
            return reply
        data = b"".join(reply.chunks)
        half = data.index(b"data: ", len(data) // 2)

        def chunks() -> Iterator[bytes]:
            yield data[:half]
            self.go.wait(GUARD)  # until the test saw the text in the store
            yield data[half:]

        return Reply(chunks=chunks())


async def watch(relay: TokenRelay, run_id: str, held: Held) -> list[tuple[LiveText, ...]]:
    """What the store relays for `run_id`, read until it has text; then let the reply go on."""
    seen: list[tuple[LiveText, ...]] = []
    with anyio.fail_after(GUARD):
        while not seen or not seen[-1]:
            seen.append(await relay.live_text(run_id))
            await anyio.sleep(0.005)
    held.go.set()
    return seen


async def test_a_streaming_call_under_run_is_relayed_and_recorded_as_a_whole_call(
    stores: tuple[RunStore, RunStore],
) -> None:
    store, other = stores
    assert isinstance(store, TokenRelay)
    held = Held()
    server = ChatServer(held)
    server.start()
    try:
        result: list[ConvergeResult] = []
        seen: list[tuple[LiveText, ...]] = []
        run_id = f"relay-{os.getpid()}-{id(held)}"

        async def run() -> None:
            built = engine(server, Seen(), store=store)
            result.append(await built.run(inputs=[SEED], run_id=run_id))

        async with anyio.create_task_group() as group:
            group.start_soon(run)
            seen += await watch(store, run_id, held)
        plain = await engine(server, Seen(), stream=False, store=other).run(inputs=[SEED])
    finally:
        held.go.set()
        server.stop()
    (text,) = seen[-1]
    assert (text.suggestor, text.call, text.attempt, text.cycle) == ("forecaster", 2, 1, 1)
    assert text.text
    assert FINAL.startswith(text.text)
    assert len(text.text) < len(FINAL)  # shown while the call was still running
    assert await store.live_text(run_id) == ()  # gone once the run stopped
    assert [r.body.get("stream") for r in server.received] == [True, True, None, None]
    assert recorded(plain) == recorded(result[0])  # the same effect, byte for byte
    assert plain.context.merkle_root() == result[0].context.merkle_root()
    assert json.dumps(recorded(plain)) == json.dumps(recorded(result[0]))
