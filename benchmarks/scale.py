"""W8 the main job at scale: a 100,000-fact run through `converge run` and the engine alone.

`scale_formation.py` promotes 1,000 small facts a cycle until 100,000. Each round runs, in
fresh processes and alternated, the engine alone (`formation.engine().run_sync()`, no store)
and `converge run FILE --store S` (per-cycle saves, the record, the HTML report, the
summary), each timed from start to exit with its peak RSS (`ru_maxrss` of that process).
After each `converge run`, the read commands run on its store, each in its own process:
`runs`, `show RUN`, `review` (the inbox), `review RUN`, `verify RUN` and `replay RUN`
(`replay_s`, `replay_rss_mb`: the recorded effects merged again). Figures are the
medians over the rounds (3; 1 with `--quick`); the engine and the command alone run in
`PAIRS` (9) alternated pairs, and `run_to_engine_wall` and `run_to_engine_rss` are the
medians of each pair's ratio; also the store's bytes per fact against a
fact's canonical JSON, and the report's bytes. `--full` (environment
`CONVERGE_W8_FULL=1`) adds one round at 1,000,000 facts, and the read commands on a store of
10,000 runs. The console's pages are measured on the same store, each in a fresh process
(`scale_console`): the runs list, the run page, the last and the middle fact pages of the
biggest key, the fork form, and the slowest run page or runs list while another client
polls the run's event stream
(`console_*_s`: the request alone; `console_*_rss_mb`: that process's peak RSS;
`console_*_grew_mb`: how much the request raised it).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from statistics import median
from typing import Final

from ._common import Figures, Settings, progress, rounded

HERE: Final = Path(__file__).resolve().parent
FORMATION: Final = str(HERE / "scale_formation.py")
FACTS: Final = 100_000
FULL_FACTS: Final = 1_000_000
STORE_RUNS: Final = 10_000
PAIRS: Final = 9
"""Alternated pairs of the engine alone and `converge run` behind the wall and RSS figures
(the read commands run after the first `rounds` of them only)."""

_ENGINE: Final = (
    "import runpy, sys; formation = runpy.run_path(sys.argv[1])['formation']; "
    "result = formation.engine().run_sync(); "
    "assert result.stop_reason.value == 'converged', result.stop_reason; "
    "assert len(result.context) == int(sys.argv[2]) + 1, len(result.context)"
)


def _timed(command: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall seconds and peak RSS (MB) of `command` in a process of its own; its stdout."""
    wrapper = (
        "import json, resource, subprocess, sys, time\n"
        "started = time.perf_counter()\n"
        "done = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE)\n"
        "wall = time.perf_counter() - started\n"
        "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
        "sys.stderr.write(json.dumps([wall, rss, done.returncode]) + '\\n')\n"
        "sys.stdout.write(done.stdout.decode())\n"
    )
    finished = subprocess.run(
        [sys.executable, "-c", wrapper, *command],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    wall, rss, code = json.loads(finished.stderr.strip().splitlines()[-1])
    if code not in (0, 6):
        raise RuntimeError(f"{' '.join(command[:4])} exited with {code}")
    return float(wall), float(rss), finished.stdout


def _converge(*args: str) -> list[str]:
    return [sys.executable, "-m", "converge.cli", *args]


def _round(facts: int, folder: Path, env: dict[str, str], *, reads: bool = True) -> Figures:
    """One alternated round at `facts`: the engine alone, the command, and its reads.

    Without `reads`, the read commands and the console are not run on its store.
    """
    env = {**env, "CONVERGE_W8_FACTS": str(facts)}
    engine_wall, engine_rss, _ = _timed([sys.executable, "-c", _ENGINE, FORMATION, str(facts)], env)
    store = folder / "runs.db"
    for stale in folder.glob("runs.db*"):
        stale.unlink()
    shutil.rmtree(folder / "reports", ignore_errors=True)
    run_wall, run_rss, out = _timed(_converge("run", FORMATION, "--store", str(store)), env)
    run_id = next(line.split()[2] for line in out.splitlines() if line.startswith("saved run"))
    figures: Figures = {
        "engine_s": engine_wall,
        "engine_rss_mb": engine_rss,
        "run_s": run_wall,
        "run_rss_mb": run_rss,
        "store_bytes_per_fact": _store_bytes(store) / facts,
        "canonical_bytes_per_fact": _canonical_bytes(store, run_id),
        "report_bytes": sum(p.stat().st_size for p in (folder / "reports").glob("*.html")),
    }
    if not reads:
        return figures
    figures.update(_reads(store, run_id, env))
    figures.update(_console(store, run_id, env))
    return figures


def _console(store: Path, run_id: str, env: dict[str, str]) -> Figures:
    """The console's pages of the run, each in a fresh process (`scale_console`)."""
    figures: Figures = {}
    for page in ("runs", "run", "facts", "middle", "fork", "concurrent"):
        command = [sys.executable, "-m", "benchmarks.scale_console", str(store), run_id, page]
        _, _, out = _timed(command, env)
        measured = json.loads(out.strip().splitlines()[-1])
        figures[f"console_{page}_s"] = float(measured["seconds"])
        figures[f"console_{page}_rss_mb"] = float(measured["rss_mb"])
        figures[f"console_{page}_grew_mb"] = float(measured["grew_mb"])
    return figures


def _reads(store: Path, run_id: str, env: dict[str, str]) -> Figures:
    figures: Figures = {}
    for name, args in (
        ("runs", ("runs",)),
        ("show", ("show", run_id)),
        ("review_inbox", ("review",)),
        ("review", ("review", run_id)),
        ("verify", ("verify", run_id)),
        ("replay", ("replay", run_id)),
    ):
        wall, rss, _ = _timed(_converge("--store", str(store), *args), env)
        figures[f"{name}_s"] = wall
        figures[f"{name}_rss_mb"] = rss
    return figures


def _store_bytes(store: Path) -> int:
    return sum(path.stat().st_size for path in store.parent.glob(store.name + "*"))


def _canonical_bytes(store: Path, run_id: str) -> float:
    """The mean canonical JSON of the run's facts, as its stored record holds them."""
    import anyio

    from converge import SqliteRunStore
    from converge._core._canonical import canonical_json

    reader = SqliteRunStore(store, read_only=True)
    facts = anyio.run(reader.load, run_id).facts
    reader.close()
    return sum(len(canonical_json(fact.model_dump(mode="json"))) for fact in facts) / len(facts)


_MANY: Final = (
    "import anyio, runpy, sys\n"
    "from converge import SqliteRunStore\n"
    "formation = runpy.run_path(sys.argv[1])['formation']\n"
    "store = SqliteRunStore(sys.argv[2])\n"
    "async def main():\n"
    "    for _ in range(int(sys.argv[3])):\n"
    "        await formation.engine(store=store, formation=sys.argv[1]).run()\n"
    "anyio.run(main)\n"
)
"""`STORE_RUNS` real runs of the formation into one store, in one process: each is saved as
`converge run` saves it (per cycle, then as rows), so each has its own head and rows."""


def _many_runs(folder: Path, env: dict[str, str]) -> Figures:
    """The read commands on a store of `STORE_RUNS` small runs (10 facts each)."""
    store = folder / "many.db"
    env = {**env, "CONVERGE_W8_FACTS": "10"}
    command = [sys.executable, "-c", _MANY, FORMATION, str(store), str(STORE_RUNS)]
    subprocess.run(command, env=env, check=True, capture_output=True)
    with closing(sqlite3.connect(store)) as connection:
        (oldest,) = connection.execute(
            "SELECT run_id FROM converge_runs ORDER BY saved_at, run_id LIMIT 1"
        ).fetchone()
    figures = _reads(store, str(oldest), env)
    return {f"store_{STORE_RUNS}_{name}": value for name, value in figures.items()}


def _medians(rounds: list[Figures]) -> Figures:
    """The median of each figure over the rounds that have it."""
    figures: Figures = {}
    for name in rounds[0]:
        values = [float(str(one[name])) for one in rounds if name in one]
        figures[name] = rounded(median(values), 3)
    return figures


def _ratio(rounds: list[Figures], run: str, engine: str) -> float:
    """The median over the rounds of each round's `run` figure over its `engine` figure.

    A pair run back to back shares the machine's speed of the moment, which drifts.
    """
    return rounded(median([float(str(one[run])) / float(str(one[engine])) for one in rounds]), 2)


def measure(settings: Settings) -> Figures:
    """W8's figures (see the module)."""
    full = os.environ.get("CONVERGE_W8_FULL") == "1"
    rounds = 1 if settings.quick else 3
    pairs = 1 if settings.quick else PAIRS
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    env.pop("CONVERGE_SIGNING_KEY", None)
    with tempfile.TemporaryDirectory(prefix="converge-w8-") as name:
        folder = Path(name)
        measured: list[Figures] = []
        for index in range(max(rounds, pairs)):
            progress(f"W8 round {index + 1}/{max(rounds, pairs)}: {FACTS:,} facts")
            measured.append(_round(FACTS, folder, env, reads=index < rounds))
        figures = _medians(measured)
        figures["facts"] = FACTS
        figures["rounds"] = rounds
        figures["pairs"] = pairs
        figures["run_to_engine_wall"] = _ratio(measured, "run_s", "engine_s")
        figures["run_to_engine_rss"] = _ratio(measured, "run_rss_mb", "engine_rss_mb")
        figures["store_to_canonical"] = rounded(
            float(str(figures["store_bytes_per_fact"]))
            / float(str(figures["canonical_bytes_per_fact"])),
            2,
        )
        if full:
            progress(f"W8 --full: {FULL_FACTS:,} facts")
            figures["full"] = _round(FULL_FACTS, folder, env)
            progress(f"W8 --full: a store of {STORE_RUNS:,} runs")
            figures.update(_many_runs(folder, env))
    figures["peak_rss_mb_this_process"] = rounded(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1
    )
    figures["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return figures
