"""Serve the console with uvicorn on a socket bound here, so the URL is known before it starts."""

from __future__ import annotations

import socket
from collections.abc import Callable

import uvicorn

from ._app import create_app
from ._settings import ConsoleSettings

__all__ = ["serve"]


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


async def serve(
    settings: ConsoleSettings,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Serve the console until interrupted (Ctrl-C or SIGTERM), then stop cleanly.

    `ready` is called with the console's base URL (`http://HOST:PORT`, the port chosen by the
    system when `port` is 0) once the socket is bound. Runs resumed from the console and still
    going when it stops are saved as interrupted; `converge resume RUN_ID` continues them.

    Raises:
        OSError: The address cannot be bound (in use, or not this machine's).
    """
    sock = _bind(host, port)
    sock.listen(2048)  # connections wait in the backlog until uvicorn accepts them
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    config = uvicorn.Config(
        create_app(settings),
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=2,
        proxy_headers=False,
    )
    server = uvicorn.Server(config)
    if ready is not None:
        ready(f"http://{shown}:{bound}")
    with sock:
        await server.serve(sockets=[sock])
