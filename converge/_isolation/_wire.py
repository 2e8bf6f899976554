"""Messages between the engine and a worker: a 4-byte big-endian length, then UTF-8 JSON.

The blocking functions serve the worker (and the engine's one-off `describe`); the async
ones serve the engine's calls, waiting on the socket through anyio, so that a call never
holds the event loop and works the same on asyncio and trio.
"""

from __future__ import annotations

import json
import select
import socket
from time import perf_counter
from typing import BinaryIO, Final, cast

import anyio

__all__ = [
    "MAX_FRAME",
    "WireError",
    "decode",
    "encode",
    "read_buffered",
    "read_frame",
    "receive_frame",
    "send_frame",
    "spin",
    "write_frame",
]

MAX_FRAME = 1 << 28
"""The largest message either side accepts (256 MiB); a longer length is garbage."""


class WireError(Exception):
    """The other side closed the socket, or sent something that is not a message."""


_ENCODER: Final = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
"""One encoder for every frame (`json.dumps` with options builds one a call)."""


def encode(message: dict[str, object]) -> bytes:
    """`message` as one frame: its length, then its JSON (no NaN or infinity)."""
    body = _ENCODER.encode(message).encode()
    return len(body).to_bytes(4, "big") + body


def decode(body: bytes) -> dict[str, object]:
    """One frame's body back as a JSON object.

    Raises:
        WireError: The body is not UTF-8 JSON, or not an object.
    """
    try:
        value: object = json.loads(body.decode())
    except (UnicodeDecodeError, ValueError) as error:
        raise WireError(f"not a JSON message: {error}") from None
    if not isinstance(value, dict):
        raise WireError(f"not a JSON object but {type(value).__name__}")
    return cast("dict[str, object]", value)


def _length(head: bytes) -> int:
    length = int.from_bytes(head, "big")
    if length > MAX_FRAME:
        raise WireError(f"a frame of {length} bytes, more than the {MAX_FRAME} allowed")
    return length


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    chunks: list[bytes] = []
    while count:
        chunk = sock.recv(min(count, 1 << 20))
        if not chunk:
            raise WireError("the other side closed the connection")
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def read_frame(sock: socket.socket) -> dict[str, object]:
    """Block until one whole message has arrived on `sock`."""
    return decode(_read_exactly(sock, _length(_read_exactly(sock, 4))))


def read_buffered(reader: BinaryIO) -> dict[str, object]:
    """Block until one whole message has arrived on `reader` (a socket's buffered file:
    one system call reads a small message whole, where `read_frame` makes two)."""
    head = reader.read(4)
    if len(head) < 4:
        raise WireError("the other side closed the connection")
    length = _length(head)
    body = reader.read(length)
    if len(body) < length:
        raise WireError("the other side closed the connection")
    return decode(body)


def write_frame(sock: socket.socket, message: dict[str, object]) -> None:
    """Block until `message` is written to `sock`."""
    sock.sendall(encode(message))


async def send_frame(sock: socket.socket, frame: bytes) -> None:
    """Write `frame` to the non-blocking `sock`, waiting while its buffer is full."""
    view = memoryview(frame)
    while view:
        try:
            sent = sock.send(view)
        except BlockingIOError:
            await anyio.wait_writable(sock)
            continue
        except OSError as error:
            raise WireError(f"cannot write to the worker: {error}") from None
        view = view[sent:]


async def _receive_exactly(sock: socket.socket, count: int) -> bytes:
    chunks: list[bytes] = []
    while count:
        try:
            chunk = sock.recv(min(count, 1 << 20))
        except BlockingIOError:
            await anyio.wait_readable(sock)
            continue
        except OSError as error:
            raise WireError(f"cannot read from the worker: {error}") from None
        if not chunk:
            raise WireError("the other side closed the connection")
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def spin(sock: socket.socket, seconds: float) -> None:
    """Poll `sock` without sleeping for up to `seconds`, until something can be read.

    Waking a sleeping event loop when a short reply arrives costs more than the reply takes
    to come; spinning a moment first answers sooner. It holds the event loop (and a core)
    meanwhile: only for a short call, and only while a core is free (`Spinning`).
    """
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    end = perf_counter() + seconds
    while not poller.poll(0) and perf_counter() < end:
        pass


async def receive_frame(sock: socket.socket, spun: float = 0.0) -> dict[str, object]:
    """Wait for one whole message on the non-blocking `sock`, polling it for `spun`
    seconds first (`spin`)."""
    if spun > 0.0:
        spin(sock, spun)
    head = await _receive_exactly(sock, 4)
    return decode(await _receive_exactly(sock, _length(head)))
