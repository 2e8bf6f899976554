"""W8's console pages (`benchmarks.scale_console`) answer on a large run stored as rows."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from benchmarks import scale_console
from tests.cli_runs import cli, run_id_of

FORMATION = str(Path(__file__).resolve().parents[1] / "benchmarks" / "scale_formation.py")


def test_each_console_page_is_measured_on_a_large_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONVERGE_W8_FACTS", "2500")
    monkeypatch.delenv("CONVERGE_SIGNING_KEY", raising=False)
    store = str(tmp_path / "runs.db")
    code, out = cli("--store", store, "run", FORMATION)
    assert code == 0, out
    run_id = run_id_of(out)
    for page in ("runs", "run", "facts", "middle", "fork", "concurrent"):
        figures = anyio.run(scale_console.measure_page, store, run_id, page)
        assert set(figures) == {"seconds", "rss_mb", "grew_mb"}
        assert figures["seconds"] > 0
        assert figures["rss_mb"] > 0


def test_a_page_that_does_not_answer_200_fails_the_measurement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONVERGE_W8_FACTS", "10")
    store = str(tmp_path / "runs.db")
    code, out = cli("--store", store, "run", FORMATION)
    assert code == 0, out
    with pytest.raises(RuntimeError, match="answered 404"):
        anyio.run(scale_console.measure_page, store, "no-such-run", "run")
