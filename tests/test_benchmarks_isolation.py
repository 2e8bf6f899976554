"""`benchmarks/isolation.py` (W9): it runs, and reports each figure it promises."""

import json

import pytest

from benchmarks import isolation


@pytest.mark.slow
def test_the_isolation_workload_reports_overhead_and_speedup(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert isolation.main(["--runs", "1", "--cycles", "5", "--workers", "2"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert (figures["workers"], figures["cycles"], figures["runs"]) == (2, 5, 1)
    for name in (
        "overhead_us_empty",
        "overhead_us_10k",
        "isolated_call_us_10k",
        "in_process_call_us_10k",
    ):
        assert figures[name] > 0.0, name
    assert figures["cpu_isolated_s"] > 0.0
    assert figures["cpu_speedup"] == pytest.approx(
        figures["cpu_in_process_s"] / figures["cpu_isolated_s"], rel=0.05
    )
