"""A real HTTP server on 127.0.0.1 standing in for an OpenAI-compatible model API.

Imported by the provider tests; the `chat_server` fixture lives in this folder's conftest.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Reply:
    """One scripted HTTP answer."""

    status: int = 200
    body: str = ""
    headers: dict[str, str] = field(default_factory=dict[str, str])


@dataclass
class Received:
    """One request the server saw."""

    path: str
    headers: dict[str, str]
    body: dict[str, object]


def completion(content: str, *, prompt: int = 11, completion_tokens: int = 7) -> Reply:
    """A well-formed chat completion answer."""
    payload = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": "test-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion_tokens},
    }
    return Reply(body=json.dumps(payload))


class ChatServer:
    """Answers POST /v1/chat/completions from a queue of replies; records every request."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.received: list[Received] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                with server._lock:
                    server.received.append(
                        Received(self.path, dict(self.headers.items()), json.loads(raw or b"{}"))
                    )
                    reply = server.replies.pop(0) if server.replies else Reply(500, "no reply")
                data = reply.body.encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                return

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
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
