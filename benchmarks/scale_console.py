"""W8's console pages, each in a fresh process: `python -m benchmarks.scale_console STORE RUN PAGE`.

PAGE is `runs` (the runs list), `run` (the run page), `facts` (the last fact page of the
run's biggest key), `middle` (its middle fact page), `fork` (the fork form, at the last
cycle) or `concurrent` (while one client polls the run's event stream without a pause,
another asks for the run page, then the runs list, `ROUNDS` times each). The console
is served in this process, over httpx's ASGI transport, as the console's tests use it; one
JSON object goes to stdout: the seconds of the first request (`concurrent`: the slowest of
its requests), this process's peak RSS, and how much the requests raised that peak.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from typing import Final

import anyio
import anyio.lowlevel
import httpx

from converge import RunNotFoundError, SqliteRunStore
from converge.ui import ConsoleSettings, Reviewers, create_app
from converge.ui._fact_page import FACTS_PER_PAGE

ROUNDS: Final = 5
BASE: Final = "http://127.0.0.1:8765"


def _peak_mb() -> float:
    """This process's peak resident set so far, in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def measure_page(store_path: str, run_id: str, page: str) -> dict[str, float]:
    """Serve the console on `store_path` and measure `page` of run `run_id` (see the module).

    Raises:
        RuntimeError: A request did not answer 200, or the event stream was never polled.
    """
    store = SqliteRunStore(store_path)
    try:
        head = await store.load_head(run_id)
    except RunNotFoundError:
        head = None  # its pages answer 404, which fails the measurement
    reviewers, token = Reviewers.single("bench")
    app = create_app(ConsoleSettings(store=store, reviewers=reviewers, poll_seconds=0.5))
    transport = httpx.ASGITransport(app=app)
    headers = {"authorization": f"Bearer {token}"}
    paths = {"runs": "/", "run": f"/runs/{run_id}", "fork": f"/runs/{run_id}/fork"}
    if head is not None:
        key, count = max(head.keys, key=lambda pair: pair[1])
        last = (count + FACTS_PER_PAGE - 1) // FACTS_PER_PAGE
        paths["facts"] = f"/runs/{run_id}/facts?key={key.value}&page={last}"
        paths["middle"] = f"/runs/{run_id}/facts?key={key.value}&page={(last + 1) // 2}"
    async with httpx.AsyncClient(transport=transport, base_url=BASE, headers=headers) as client:
        before = _peak_mb()
        if page != "concurrent":
            started = time.perf_counter()
            response = await client.get(paths[page])
            seconds = time.perf_counter() - started
            if response.status_code != 200:
                raise RuntimeError(f"{paths[page]} answered {response.status_code}")
        else:
            seconds = await _concurrent(client, run_id, paths)
    peak = _peak_mb()
    return {"seconds": seconds, "rss_mb": peak, "grew_mb": peak - before}


async def _concurrent(client: httpx.AsyncClient, run_id: str, paths: dict[str, str]) -> float:
    """The slowest of `ROUNDS` run pages and runs lists while another client polls."""
    polls = 0
    slowest = 0.0
    done = anyio.Event()

    async def poll() -> None:
        nonlocal polls
        while not done.is_set():  # the page's stream, asked again as soon as it ends
            response = await client.get(f"/runs/{run_id}/events?seen=1")
            if response.status_code != 200:
                raise RuntimeError(f"the event stream answered {response.status_code}")
            polls += 1
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(poll)
        await anyio.sleep(0.2)
        for _ in range(ROUNDS):
            for path in (paths["run"], paths["runs"]):
                started = time.perf_counter()
                response = await client.get(path)
                slowest = max(slowest, time.perf_counter() - started)
                if response.status_code != 200:
                    raise RuntimeError(f"{path} answered {response.status_code}")
        done.set()
    if not polls:
        raise RuntimeError("the event stream was never polled")
    return slowest


def main() -> None:
    store_path, run_id, page = sys.argv[1:4]
    figures = anyio.run(measure_page, store_path, run_id, page)
    sys.stdout.write(json.dumps(figures) + "\n")


if __name__ == "__main__":
    main()
