"""Leases kept alive from a thread: a suggestor that blocks the event loop keeps its run.

- `converge run` of a step that blocks its event loop (`time.sleep`) four times longer than
  `--lease`, in a child process: while it blocks, the run reads as running (its lease is
  renewed from the keeper's thread), a `converge resume` in a second process refuses to
  take it over, and the run converges with no continuation in its trace;
- the keeper renews only the runs it holds, lets a run taken over go, and its thread stops
  when it holds none;
- a released run is let go at once, even while the thread sleeps for another run.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
import weakref
from pathlib import Path

import anyio
import pytest

from converge import RunStatus, SqliteRunStore, StaleRecordError
from converge.stores import _lease as lease
from converge.stores._lease import LeaseKeeper

HERE = Path(__file__).resolve().parent
STEPS_FILE = str(HERE / "batch_formation.py")
ROOT = HERE.parents[1]
LEASE = 0.5
BLOCK = 4 * LEASE


def converge(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """`converge ARGS` in a child process with this worktree's package."""
    return subprocess.Popen(
        [sys.executable, "-m", "converge.cli", *args],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def running_run(store: SqliteRunStore, deadline: float) -> str:
    """The id of the first run the store holds, once it holds one."""
    while True:
        runs = await store.list_runs()
        if runs:
            return runs[0].run_id
        assert time.monotonic() < deadline, "the run was never saved"
        await anyio.sleep(0.05)


@pytest.mark.slow
def test_lease_keeper_keeps_a_run_whose_step_blocks_its_event_loop(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    log = tmp_path / "calls.log"
    env = {
        "CONVERGE_TEST_INPUT": f"block={BLOCK}",
        "CONVERGE_TEST_STEPS": "2",
        "CONVERGE_TEST_LOG": str(log),
    }
    owner = converge("--store", str(path), "run", STEPS_FILE, "--lease", str(LEASE), env=env)
    try:

        async def watch() -> tuple[str, list[RunStatus]]:
            store = SqliteRunStore(path, read_only=True)
            run_id = await running_run(store, time.monotonic() + 30)
            seen: list[RunStatus] = []
            ends = time.monotonic() + BLOCK * 1.5  # the two blocking steps are under way
            while time.monotonic() < ends and owner.poll() is None:
                seen.append((await store.load(run_id)).status)
                await anyio.sleep(LEASE / 4)
            store.close()
            return run_id, seen

        run_id, seen = anyio.run(watch)
        assert seen, "the owner ended before it could be watched"
        assert set(seen) == {RunStatus.RUNNING}, seen  # never lost while its process lives

        thief = converge(
            "--store", str(path), "resume", run_id, "--formation", STEPS_FILE,
            "--lease", str(LEASE), env=env,
        )  # fmt: skip
        _, thief_err = thief.communicate(timeout=60)
        assert thief.returncode not in (0, None), thief_err
        assert "running" in thief_err, thief_err  # refused: the run runs elsewhere
        out, err = owner.communicate(timeout=60)
    finally:
        owner.kill()
        owner.communicate()  # its pipes closed, whatever failed above
    assert owner.returncode == 0, out + err

    async def read() -> tuple[RunStatus, int]:
        store = SqliteRunStore(path, read_only=True)
        record = await store.load(run_id)
        store.close()
        return record.status, len(record.trace.continuations)

    assert anyio.run(read) == (RunStatus.FINISHED, 0)
    calls = log.read_text(encoding="utf-8").splitlines()
    assert len(calls) == 2, calls  # each step ran once, in the owner only
    assert {line.split("\t")[1] for line in calls} == {str(owner.pid)}


class Run:
    """A run the keeper can hold: counts renewals, fails them as told."""

    def __init__(self, run_id: str, *, lease: float, version: int = 1) -> None:
        self.run_id = run_id
        self.lease = lease
        self.version = version
        self.fresh_at = time.monotonic()
        self.renewals: list[int] = []
        self.taken = False
        self.broken = False

    async def renew(self, version: int) -> None:
        self.renewals.append(version)
        if self.broken:
            raise OSError("the store is down")
        if self.taken:
            raise StaleRecordError(self.run_id, version, version + 1)
        self.fresh_at = time.monotonic()


def test_lease_keeper_renews_held_runs_and_lets_a_taken_one_go() -> None:
    keeper = LeaseKeeper()
    long = Run("long", lease=30.0)
    keeper.hold(long)
    time.sleep(0.1)  # the thread now waits for a run with a long lease
    held = Run("held", lease=0.3)
    taken = Run("taken", lease=0.3)
    unsaved = Run("unsaved", lease=0.3, version=0)
    broken = Run("broken", lease=0.3)
    broken.broken = True
    for run in (held, taken, unsaved, broken):
        keeper.hold(run)
    time.sleep(0.5)
    assert len(held.renewals) >= 3  # every 0.1 s, although the thread was waiting longer
    taken.taken = True
    time.sleep(0.5)
    assert not keeper.holds(taken)  # taken over: no longer renewed
    assert keeper.holds(held)
    assert keeper.holds(broken)  # a failing store is tried again, at most every 0.05 s
    assert 5 <= len(broken.renewals) <= 25, broken.renewals
    assert unsaved.renewals == []  # nothing stored to renew yet
    assert long.renewals == []
    for run in (held, unsaved, broken, long):
        keeper.release(run)
    before = len(held.renewals)
    time.sleep(0.5)
    assert len(held.renewals) == before
    assert keeper._thread is None  # pyright: ignore[reportPrivateUsage]  # no run, no thread


def test_lease_keeper_lets_go_of_a_released_run_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A finished run's saver holds its journal, which can be large: the keeper's thread,
    asleep for another run, must not keep it alive."""
    monkeypatch.setattr(lease, "_LONGEST_TICK", 60.0)  # the thread sleeps up to a minute
    keeper = LeaseKeeper()
    other = Run("other", lease=600.0)
    done = Run("done", lease=600.0)
    done.fresh_at -= 300  # due at once: the thread reads it, renews it, then sleeps
    keeper.hold(other)
    keeper.hold(done)
    deadline = time.monotonic() + 10
    while not done.renewals:
        assert time.monotonic() < deadline, "never renewed"
        time.sleep(0.01)
    gone = weakref.ref(done)
    keeper.release(done)
    del done
    while gone() is not None:
        assert time.monotonic() < deadline, "the keeper's thread still holds a released run"
        gc.collect()
        time.sleep(0.01)
    keeper.release(other)
    while keeper._thread is not None:  # pyright: ignore[reportPrivateUsage]
        assert time.monotonic() < deadline, "the keeper's thread did not stop"
        time.sleep(0.01)
