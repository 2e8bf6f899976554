"""Fixtures for the battery tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from chat_server import ChatServer

from converge_suggestors import MiniLmEmbedder


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    """A running model-API stand-in on 127.0.0.1, on a free port."""
    server = ChatServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def minilm() -> MiniLmEmbedder:
    """The real all-MiniLM-L6-v2 model, loaded once per test session and warmed up."""
    embedder = MiniLmEmbedder()
    embedder.embed(["warm up"])
    return embedder
