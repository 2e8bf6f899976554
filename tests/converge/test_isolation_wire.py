"""The wire between the engine and a worker: length-prefixed JSON frames on a socket.

Whatever the other side writes (a cut frame, a length past the limit, bytes that are not
UTF-8 JSON, JSON that is not an object) is a `WireError`, never a message. A call polls
for its reply a moment before sleeping only while the machine has a core free.
"""

from __future__ import annotations

import math
import socket
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from converge._isolation import _pool
from converge._isolation._pool import SPIN_SECONDS, spin_seconds
from converge._isolation._wire import (
    MAX_FRAME,
    WireError,
    encode,
    read_buffered,
    read_frame,
    receive_frame,
    send_frame,
    write_frame,
)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair()
    yield ours, theirs
    ours.close()
    theirs.close()


def test_a_message_goes_through_both_ways(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    message: dict[str, object] = {"op": "call", "facts": [{"id": "ä"}], "n": 3}
    write_frame(ours, message)
    assert read_frame(theirs) == message


async def test_a_large_message_goes_through_a_non_blocking_socket(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """Larger than the socket's buffer: the sender waits for the reader, chunk by chunk."""
    ours, theirs = pair
    ours.setblocking(False)
    theirs.setblocking(False)
    message: dict[str, object] = {"text": "x" * (4 << 20)}

    async with anyio.create_task_group() as group:
        group.start_soon(send_frame, ours, encode(message))
        assert await receive_frame(theirs) == message


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        (b"\x00\x00\x00\x05[1,2]", "not a JSON object but list"),
        (b"\x00\x00\x00\x04\xff\xfe\xfd\xfc", "not a JSON message"),
        (b"\x00\x00\x00\x03nul", "not a JSON message"),
        ((MAX_FRAME + 1).to_bytes(4, "big"), f"more than the {MAX_FRAME} allowed"),
        (b"\x00\x00\x00\x10{}", "the other side closed the connection"),
        (b"\x00\x00", "the other side closed the connection"),
        (b"", "the other side closed the connection"),
    ],
    ids=["list", "not-utf8", "not-json", "too-long", "cut-body", "cut-length", "closed"],
)
async def test_what_is_not_a_whole_message_is_a_wire_error(
    pair: tuple[socket.socket, socket.socket], raw: bytes, said: str
) -> None:
    ours, theirs = pair
    ours.sendall(raw)
    ours.close()
    theirs.setblocking(False)
    with pytest.raises(WireError, match=said):
        await receive_frame(theirs)


def test_a_blocking_read_refuses_the_same(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    ours.sendall((MAX_FRAME + 1).to_bytes(4, "big"))
    with pytest.raises(WireError, match="allowed"):
        read_frame(theirs)


def test_nan_is_never_sent() -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        encode({"x": float("nan")})


def test_a_buffered_read_takes_one_message_and_refuses_a_cut_one(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    reader = theirs.makefile("rb")
    ours.sendall(encode({"a": 1}) + encode({"b": 2}) + b"\x00\x00\x00\x09{}")
    ours.close()
    assert read_buffered(reader) == {"a": 1}
    assert read_buffered(reader) == {"b": 2}
    with pytest.raises(WireError, match="closed the connection"):
        read_buffered(reader)
    with pytest.raises(WireError, match="closed the connection"):
        read_buffered(reader)


async def test_a_spun_receive_reads_a_waiting_reply_and_waits_for_a_late_one(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    theirs.setblocking(False)
    ours.sendall(encode({"soon": True}))
    assert await receive_frame(theirs, 0.01) == {"soon": True}

    async def late() -> None:
        await anyio.sleep(0.05)  # after the spin: the event loop waits for it
        ours.sendall(encode({"late": True}))

    async with anyio.create_task_group() as group:
        group.start_soon(late)
        assert await receive_frame(theirs, 0.0001) == {"late": True}


@pytest.mark.parametrize(
    ("text", "spun"),
    [
        ("0.50 0.40 0.30 1/300 999\n", SPIN_SECONDS),
        ("9.50 8.40 7.30 64/300 999\n", 0.0),
        ("garbage\n", 0.0),
        (None, 0.0),
    ],
    ids=["a core free", "busy", "not a loadavg", "no loadavg"],
)
def test_a_call_spins_only_while_a_core_is_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str | None, spun: float
) -> None:
    monkeypatch.setattr(_pool, "_load", [-math.inf, 0.0])
    monkeypatch.setattr(_pool, "_LOAD_EVERY", math.inf)  # no clock in the test
    monkeypatch.setattr(_pool.os, "cpu_count", lambda: 2)
    loadavg = tmp_path / "loadavg"
    if text is not None:
        loadavg.write_text(text)
    assert spin_seconds(str(loadavg)) == spun
    # decided once a while (0.1 s): the same answer meanwhile, whatever the file says
    loadavg.write_text("0.1 0.1 0.1 1/10 1\n" if spun == 0.0 else "9 9 9 99/300 1\n")
    assert spin_seconds(str(loadavg)) == spun


def test_a_call_spins_only_while_it_is_its_pool_s_only_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Polling holds the event loop: with another call of the pool in flight, never."""
    monkeypatch.setattr(_pool, "spin_seconds", lambda: SPIN_SECONDS)
    pool = _pool.ProcessPool(3)
    running = "_running"
    setattr(pool, running, 1)  # one worker, lent to this call
    assert pool.spin() == SPIN_SECONDS
    setattr(pool, running, 2)  # and another call's
    assert pool.spin() == 0.0


async def test_a_call_waiting_for_a_worker_gets_the_one_given_back_by_any_thread() -> None:
    """A full pool's next call waits; the worker given back goes to it, whether the call
    that gives it back runs in the waiter's thread (which wakes it) or in another."""
    pool = _pool.ProcessPool(1)
    got: list[int] = []

    async def wait_for_one() -> None:
        worker = await pool.acquire()
        got.append(worker.pid)
        pool.release(worker)

    try:
        for give_back_from_a_thread in (False, True):
            first = await pool.acquire()
            got.clear()
            async with anyio.create_task_group() as group:
                group.start_soon(wait_for_one)
                await anyio.wait_all_tasks_blocked()
                assert got == []  # the pool is full: it waits
                if give_back_from_a_thread:
                    await anyio.to_thread.run_sync(pool.release, first)
                else:
                    pool.release(first)
            assert got == [first.pid]
    finally:
        pool.close()
