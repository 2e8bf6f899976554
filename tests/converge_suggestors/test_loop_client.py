"""A provider's client closer survives the provider: collected inside a running loop, the
client is still closed when the loop ends, and the loop's other cancel scopes are untouched."""

from __future__ import annotations

import gc

import anyio
import anyio.lowlevel
import httpx
import pytest

from converge_suggestors._loop_client import LoopBoundClient


def test_a_client_whose_owner_is_collected_mid_loop_is_closed_at_the_loops_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    made: list[httpx.AsyncClient] = []

    async def main() -> bool:
        bound = LoopBoundClient(lambda: httpx.AsyncClient())
        made.append(bound.get())
        await anyio.lowlevel.checkpoint()
        del bound
        gc.collect()  # the owner goes while its loop runs
        with anyio.move_on_after(0.01) as scope:
            await anyio.sleep(5)
        async with anyio.create_task_group() as group:
            group.start_soon(anyio.sleep, 0)
        return scope.cancelled_caught

    assert anyio.run(main, backend="asyncio")
    assert made[0].is_closed
    assert "destroyed but it is pending" not in caplog.text  # the closer was not collected
