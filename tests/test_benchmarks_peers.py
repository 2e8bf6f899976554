"""`python -m benchmarks --peers`: W1-W4 on converge and LangGraph, in a tiny mode."""

from __future__ import annotations

from typing import cast

import pytest

from benchmarks import __main__ as suite
from benchmarks import peers
from benchmarks._common import Settings

_INSTALL = "pip install --group bench-peers"
_needs_langgraph = pytest.mark.skipif(
    peers.langgraph_version() is None,
    reason=f"LangGraph is not installed (the bench-peers group): {_INSTALL}",
)
_TINY = Settings(runs=2, warmups=0, quick=True)


def test_peers_exits_with_the_install_command_without_langgraph(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(peers, "langgraph_version", lambda: None)
    assert suite.main(["--peers", "--quick"]) == 2
    captured = capsys.readouterr()
    assert _INSTALL in captured.err
    assert 'pip install "langgraph==1.2.24"' in captured.err
    assert captured.out == ""


def test_peers_rejects_a_workload_without_a_langgraph_twin(
    capsys: pytest.CaptureFixture[str],
) -> None:
    if peers.langgraph_version() is None:
        pytest.skip(f"LangGraph is not installed (the bench-peers group): {_INSTALL}")
    assert suite.main(["--peers", "--only", "W5"]) == 2
    assert "not W5" in capsys.readouterr().err


@pytest.mark.slow
@_needs_langgraph
@pytest.mark.parametrize("workload", list(peers.WORKLOADS))
def test_peer_workload_runs_both_engines_and_compares_them(workload: str) -> None:
    figures = peers.measure(workload, _TINY)
    rows = cast(list[dict[str, object]], figures["rows"])
    assert rows
    for row in rows:
        assert row["workload"] == workload
        engines = ("reference",) if "reference" in row else ("converge", "langgraph")
        assert all(isinstance(row[engine], float | int) for engine in engines)


def test_peer_table_shows_both_engines_quartiles_ratio_and_load() -> None:
    rows = [
        peers.row("W1", "µs / cycle", [80.0, 82.0, 84.0], [240.0, 246.0, 252.0]),
        peers.reference_row("W2", "floor ms", [20.0, 21.0, 22.0]),
    ]
    machine: dict[str, object] = {
        "implementation": "CPython",
        "python": "3.11.7",
        "cpu_count": 2,
        "platform": "Linux",
        "load_average_at_start": [1.0, 1.0, 1.0],
        "cpu_busy_before_start": 0.1,
    }
    lines = peers.table(rows, machine=machine, runs=3, version="1.2.24")
    text = "\n".join(lines)
    assert "LangGraph 1.2.24" in text
    assert "load average [1.0, 1.0, 1.0] at start" in text
    assert "82.0 [81.0, 83.0]" in text
    assert "246.0 [243.0, 249.0]" in text
    assert "3.00\N{MULTIPLICATION SIGN}" in text
    assert "(reference)" in text
