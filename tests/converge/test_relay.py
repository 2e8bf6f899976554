"""`Relay`: the text of a run's streaming calls, written to its store at most 10 times a
second, its last `LIVE_CHARS` characters, and never at the cost of the run."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from converge import CycleFinished, SuggestorFinished
from converge._core._live_text import LIVE_CHARS, RELAY_INTERVAL, LiveText
from converge.stores._relay import Relay


class Store:
    """A `TokenRelay` that keeps every write, or fails each one."""

    def __init__(self, *, fail: bool = False) -> None:
        self.writes: list[tuple[LiveText, ...]] = []
        self.drops = 0
        self.fail = fail

    async def put_live_text(self, run_id: str, texts: Sequence[LiveText], /) -> None:
        assert run_id == "r"
        if self.fail:
            raise OSError("disk full")
        self.writes.append(tuple(texts))

    async def drop_live_text(self, run_id: str, /) -> None:
        self.drops += 1

    async def live_text(self, run_id: str, /) -> tuple[LiveText, ...]:
        return ()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def ended(cycle: int) -> CycleFinished:
    return CycleFinished(
        run_id="r", cycle=cycle, eligible=1, promoted=0, rejected=0, held=0, facts=0
    )


async def test_writes_at_most_every_interval_and_once_more_when_the_suggestor_ends() -> None:
    store, clock = Store(), Clock()
    relay = Relay(store, "r", None, clock)
    await relay("s", 1, 1, "a")  # the first piece is written at once
    for piece in "bcd":
        clock.now += RELAY_INTERVAL / 4
        await relay("s", 1, 1, piece)
    assert [[t.text for t in w] for w in store.writes] == [["a"]]
    clock.now += RELAY_INTERVAL
    await relay("s", 1, 1, "e")
    assert [t.text for t in store.writes[-1]] == ["abcde"]
    await relay("s", 1, 1, "f")  # too soon: held
    assert len(store.writes) == 2
    finished = SuggestorFinished(
        run_id="r", cycle=1, suggestor="s", suggestor_id=1, duration_ms=1.0, proposals=0, tokens=0
    )
    await relay.on_event(finished)
    assert [t.text for t in store.writes[-1]] == ["abcdef"]
    await relay.on_event(finished)  # nothing new: nothing written
    assert len(store.writes) == 3
    await relay.on_event(ended(1))
    assert store.drops == 1
    await relay.on_event(ended(2))
    assert store.drops == 1  # nothing written since: nothing to drop


async def test_keeps_the_last_characters_and_a_retry_starts_again() -> None:
    store, clock = Store(), Clock()
    relay = Relay(store, "r", None, clock)
    await relay("s", 1, 1, "x" * LIVE_CHARS)
    clock.now += 1
    await relay("s", 1, 1, "tail")
    (last,) = store.writes[-1]
    assert len(last.text) == LIVE_CHARS
    assert last.text.endswith("tail")
    assert last.cut
    clock.now += 1
    await relay("s", 1, 2, "again")
    (retry,) = store.writes[-1]
    assert (retry.text, retry.attempt, retry.cut) == ("again", 2, False)


async def test_a_store_that_fails_is_warned_about_once_and_the_tokens_still_go_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    store, clock = Store(fail=True), Clock()
    heard: list[str] = []

    async def inner(suggestor: str, call: int, attempt: int, text: str, /) -> None:
        heard.append(text)

    relay = Relay(store, "r", inner, clock)
    for piece in ("a", "b", "c"):
        clock.now += 1
        await relay("s", 1, 1, piece)  # never raises
    await relay.drop()
    assert heard == ["a", "b", "c"]  # `Engine.stream`'s sink still gets every token
    assert store.drops == 0
    said = capsys.readouterr()
    assert (said.out + said.err).count("token_relay_failed") == 1
    assert "disk full" in said.out + said.err
