"""Fixtures for the battery tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from chat_server import ChatServer


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    """A running model-API stand-in on 127.0.0.1, on a free port."""
    server = ChatServer()
    server.start()
    yield server
    server.stop()
