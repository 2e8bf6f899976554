"""Test configuration: Hypothesis profiles, and the anyio backends async tests run on.

Choose a profile with the `HYPOTHESIS_PROFILE` environment variable: `default` (50 examples)
for local runs, `ci` (100 examples, derandomized, failures printed with a reproduction blob),
`core` (`ci` with 25 examples: the nox sessions on the other Pythons, `noxfile.py`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import structlog
from hypothesis import settings

settings.register_profile("default", max_examples=50, deadline=None)
settings.register_profile(
    "ci",
    parent=settings.get_profile("ci"),
    max_examples=100,
    deadline=None,
    print_blob=True,
)
settings.register_profile("core", parent=settings.get_profile("ci"), max_examples=25)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(scope="module", params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every async test runs once on asyncio and once on trio."""
    backend: str = request.param
    return backend


@pytest.fixture(autouse=True)
def _structlog_unconfigured() -> Iterator[None]:
    """Each test starts as an application that never configured structlog.

    `structlog.testing.capture_logs()` leaves structlog marked as configured, which would
    make later runs print through structlog's defaults.
    """
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()
