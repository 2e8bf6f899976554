"""The wire between the engine and a worker: length-prefixed JSON frames on a socket.

Whatever the other side writes (a cut frame, a length past the limit, bytes that are not
UTF-8 JSON, JSON that is not an object) is a `WireError`, never a message.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import anyio
import pytest

from converge._isolation._wire import (
    MAX_FRAME,
    WireError,
    encode,
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
