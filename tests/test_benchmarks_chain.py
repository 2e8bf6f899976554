"""`benchmarks/chain.py`: W1's replay makes the run's calls on what the run's calls read."""

import anyio
import pytest

from benchmarks import chain
from converge import Context, ContextSnapshot


def test_the_replay_rebuilds_every_cycle_of_the_run() -> None:
    engine, _ = chain.build_engine()
    result = anyio.run(lambda: engine.run(inputs=[chain.START]))
    steps = anyio.run(chain._record)  # pyright: ignore[reportPrivateUsage]
    assert len(steps) == chain.check(result) == chain.LINKS + 1
    assert [len(facts) for facts, _, _, _ in steps] == [1] * len(steps)
    snapshot = ContextSnapshot.empty()
    for step in steps:
        snapshot = snapshot._extend(*step)  # pyright: ignore[reportPrivateUsage]
    assert snapshot.merkle_root() == result.integrity.merkle_root


def test_every_replayed_accepts_reads_the_newest_snapshot_of_its_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # as the run's calls do: `find` takes a longer path on a snapshot its line grew past
    steps = anyio.run(chain._record)  # pyright: ignore[reportPrivateUsage]
    seen: list[bool] = []
    accepts_of = chain.ChainLink.accepts

    def noting(link: chain.ChainLink, ctx: Context, /) -> bool:
        assert isinstance(ctx, ContextSnapshot)
        seen.append(ctx._newest)  # pyright: ignore[reportPrivateUsage]
        return accepts_of(link, ctx)

    monkeypatch.setattr(chain.ChainLink, "accepts", noting)
    links = [chain.ChainLink(index) for index in range(chain.LINKS)]
    replay = chain._replay  # pyright: ignore[reportPrivateUsage]
    accepts, execute = anyio.run(replay, links, steps, range(chain.LINKS))
    assert accepts > 0.0
    assert execute > 0.0
    assert len(seen) == chain.LINKS * len(steps)
    assert all(seen)
