"""A real HTTP server on 127.0.0.1 standing in for an OpenAI-compatible model API.

Imported by the provider tests; the `chat_server` fixture lives in this folder's conftest.
It speaks HTTP/1.1 with keep-alive (so a reused client reuses its connection), answers from a
queue of scripted replies (status, body, headers, a delay before answering, a dropped
connection, or a body sent in chunks with pauses: trickled, or never ending), or from a
function of the request, and records every request with the client's port and the time it
arrived.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted HTTP answer."""

    status: int = 200
    body: str | bytes = ""
    headers: dict[str, str] = field(default_factory=dict[str, str])
    delay: float = 0.0
    """Seconds to wait before answering."""
    drop: bool = False
    """Close the connection without answering."""
    chunks: Iterable[bytes] | None = None
    """The body, sent chunked (`Transfer-Encoding: chunked`) instead of `body`, one chunk at a
    time: a generator that never ends makes a body that never ends."""
    pause: float = 0.0
    """Seconds to wait after each chunk (a trickle: one byte a chunk, a pause each)."""


@dataclass
class Received:
    """One request the server saw."""

    path: str
    headers: dict[str, str]
    """Its headers, each name in canonical case (`Content-Type`, `Authorization`)."""
    body: dict[str, Any]
    port: int = 0
    """The client's port: the same for requests over one kept-alive connection."""
    at: float = 0.0
    """`time.monotonic()` when it arrived."""


def completion(
    content: str,
    *,
    prompt: int = 11,
    completion_tokens: int = 7,
    finish_reason: str | None = "stop",
    model: str = "test-model",
) -> Reply:
    """A well-formed chat completion answer."""
    payload = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion_tokens},
    }
    return Reply(body=json.dumps(payload))


class ChatServer:
    """Answers POST /v1/chat/completions from a queue of replies; records every request.

    With a `responder`, every request is answered by `responder(request)` instead.
    """

    def __init__(self, responder: Callable[[Received], Reply] | None = None) -> None:
        self.replies: list[Reply] = []
        self.received: list[Received] = []
        self.responder = responder
        self.sent_bytes = 0
        """Bytes of chunked bodies written so far (what a client made the server send)."""
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                received = Received(
                    self.path,
                    # canonical case (`Content-Type`): clients send names in either case
                    {name.title(): value for name, value in self.headers.items()},
                    json.loads(raw or b"{}"),
                    self.client_address[1],
                    time.monotonic(),
                )
                with server._lock:
                    server.received.append(received)
                    if server.responder is not None:
                        reply = server.responder(received)
                    else:
                        reply = server.replies.pop(0) if server.replies else Reply(500, "no reply")
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.drop:
                    self.close_connection = True
                    return
                if reply.chunks is not None:
                    self._send_chunks(reply)
                    return
                body = reply.body
                data = body.encode() if isinstance(body, str) else body
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up waiting
                    self.close_connection = True

            def _send_chunks(self, reply: Reply) -> None:
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Transfer-Encoding", "chunked")
                    # it closes the connection after the body: say so, or a pooled client
                    # may send its next request on a connection about to close
                    self.send_header("Connection", "close")
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    assert reply.chunks is not None
                    for chunk in reply.chunks:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                        with server._lock:
                            server.sent_bytes += len(chunk)
                        if reply.pause:
                            time.sleep(reply.pause)
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:  # the client gave up reading
                    pass
                self.close_connection = True

            def log_message(self, format: str, *args: object) -> None:
                return

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            block_on_close = False

            def handle_error(self, request: object, client_address: object) -> None:
                return

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
