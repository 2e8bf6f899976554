"""`python -m benchmarks.footprint`: the pages one run touches, counted by the kernel."""

import json

import pytest

from benchmarks import footprint

pytestmark = pytest.mark.skipif(
    not footprint.available(),
    reason="counting referenced pages needs Linux's /proc/self/clear_refs (run on Linux)",
)


def test_a_run_touches_pages_and_a_longer_run_more(capsys: pytest.CaptureFixture[str]) -> None:
    assert footprint.main(["one", "W4", "--runs", "3"]) == 0
    report = json.loads(capsys.readouterr().out)
    one, wide = report["one"], report["W4"]
    for figures in (one, wide):
        assert set(figures) == {"python_heap", "malloc_heap", "code", "total_kib", "pages"}
        assert figures["total_kib"] == pytest.approx(
            figures["python_heap"] + figures["malloc_heap"] + figures["code"]
        )
        assert figures["pages"] == pytest.approx(figures["total_kib"] / 4)
    assert one["python_heap"] > 100  # a run's objects and code: hundreds of KiB
    assert wide["python_heap"] > one["python_heap"]  # 1,000 suggestors and 101 cycles


def test_an_unknown_workload_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        footprint.main(["W9"])
    assert stopped.value.code == 2
    assert "choose from 'one', 'W1', 'W4'" in capsys.readouterr().err
