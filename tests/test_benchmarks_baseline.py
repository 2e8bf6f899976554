"""`benchmarks/baseline.py`: the suite's workloads on an earlier commit, in the same process."""

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import anyio
import pytest

import converge
from benchmarks import baseline, chain
from benchmarks.projection import W1_ENGINE

_REPOSITORY = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    not (_REPOSITORY / ".git").exists(),
    reason="needs a git checkout of converge: run the tests from a clone of the repository",
)


def _leftovers() -> list[str]:
    prefixes = (baseline.PACKAGE, "benchmarks._baseline_")
    return [name for name in sys.modules if name.startswith(prefixes)]


def _figures(report: dict[str, object], workload: str) -> dict[str, object]:
    figures = report[workload]
    assert isinstance(figures, dict)
    return cast("dict[str, object]", figures)


def test_a_rebound_workload_is_built_from_the_earlier_package(tmp_path: Path) -> None:
    package = baseline.load_package(baseline.extract("HEAD", tmp_path), "converge_rebind_test")
    try:
        rebound = baseline.rebind(chain, package)
        assert rebound.Engine is package.Engine
        assert rebound.Engine is not converge.Engine
        assert chain.Engine is converge.Engine  # the suite's own module is untouched
        assert sys.modules["converge"] is converge
        engine, _ = rebound.build_engine()
        result = anyio.run(lambda: engine.run(inputs=[rebound.START]))
        assert type(result) is package.ConvergeResult
        assert rebound.check(result) == chain.LINKS + 1
    finally:
        for name in [name for name in sys.modules if name.startswith("converge_rebind_test")]:
            del sys.modules[name]
        for name in [name for name in sys.modules if name.startswith("benchmarks._baseline_")]:
            del sys.modules[name]


def test_a_dependency_the_earlier_package_lacks_is_named_with_its_install(
    tmp_path: Path,
) -> None:
    root = tmp_path / "converge"
    root.mkdir()
    (root / "__init__.py").write_text("from ._context import Context\n", encoding="utf-8")
    (root / "_context.py").write_text("import lost_dependency_xyz\nContext = 1\n")
    with pytest.raises(ValueError, match="imports 'lost_dependency_xyz'") as raised:
        baseline.load_package(root, "converge_missing_test")
    assert "-m pip install lost_dependency_xyz" in str(raised.value)
    assert not [name for name in sys.modules if name.startswith("converge_missing_test")]


def test_compare_times_both_engines_on_the_same_work() -> None:
    report = baseline.compare("HEAD", rounds=2, only=("W1", "W4"))
    assert report["rounds"] == 2
    assert report["proof read"] is False
    assert len(str(report["ref_commit"])) >= 7
    figure = _figures(_figures(report, "W1"), "total µs / cycle")
    assert figure["same_root"] is True  # the same code seals the same facts
    for engine in ("baseline", "current"):
        timed = figure[engine]
        assert isinstance(timed, float)
        assert timed > 0
    # the engine's share: the current run less its replayed user code, a part of the cycle
    share = _figures(_figures(report, "W1"), W1_ENGINE)
    assert share["same_root"] is True
    pace, cycle, engine, whole = (
        share["baseline"],
        figure["baseline"],
        share["current"],
        figure["current"],
    )
    assert isinstance(pace, float)
    assert isinstance(cycle, float)
    assert isinstance(engine, float)
    assert isinstance(whole, float)
    assert 0.5 < pace / cycle < 2  # the baseline's whole cycle again, timed beside the share
    assert 0 < engine < whole
    assert isinstance(share["ratio"], float)
    assert 0 < share["ratio"] < 1
    assert set(_figures(report, "W4")) == {
        "µs / cycle, 1 registered",
        "µs / cycle, 1000 registered",
    }
    assert _leftovers() == []  # neither package nor rebound module stays loaded


def test_compare_with_the_proof_read_times_and_checks_the_same_runs() -> None:
    report = baseline.compare("HEAD", rounds=2, only=("W4",), read_proof=True)
    assert report["proof read"] is True
    figure = _figures(_figures(report, "W4"), "µs / cycle, 1 registered")
    assert figure["same_root"] is True
    assert _leftovers() == []


def test_a_package_that_imports_converge_absolutely_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "converge"
    root.mkdir()
    (root / "__init__.py").write_text("from ._engine import Engine\n")
    (root / "_engine.py").write_text('"""An engine."""\n\nfrom converge._core._key import Key\n')
    with pytest.raises(ValueError, match=r"_engine\.py:3 imports converge absolutely"):
        baseline.load_package(root, "converge_refused_test")
    assert "converge_refused_test" not in sys.modules


def test_an_unknown_commit_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="cannot read converge/ at 'no-such-commit-x'"):
        baseline.extract("no-such-commit-x", tmp_path)
    assert baseline.main(["no-such-commit-x", "--rounds", "1"]) == 2
    assert "no-such-commit-x" in capsys.readouterr().err


def test_unknown_workloads_and_no_rounds_are_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown workloads \['W9'\]"):
        baseline.compare("HEAD", rounds=1, only=("W1", "W9"))
    with pytest.raises(ValueError, match="rounds must be at least 1, not 0"):
        baseline.compare("HEAD", rounds=0)


def test_a_workload_the_earlier_package_cannot_build_is_named(tmp_path: Path) -> None:
    package = baseline.load_package(baseline.extract("HEAD", tmp_path), "converge_lacking_test")
    try:
        delattr(package, "Budget")  # as an earlier API without it: W1's module imports it
        with pytest.raises(ValueError, match="W1 cannot be built on the earlier converge"):
            anyio.run(baseline._workload, "W1", package, 1)  # pyright: ignore[reportPrivateUsage]
    finally:
        for name in [name for name in sys.modules if name.startswith("converge_lacking_test")]:
            del sys.modules[name]
    assert _leftovers() == []


def test_projecting_the_goals_needs_the_issues_starting_commit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert baseline.main(["HEAD", "--project", "--rounds", "1"]) == 2
    assert "--project compares with 4387133, not with HEAD" in capsys.readouterr().err


def test_the_projection_is_added_to_the_comparison_it_comes_from(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    timed = {"ratio": 0.5, "ratio_quartiles": [0.45, 0.55], "baseline": 2.0, "current": 1.0}
    compared: dict[str, object] = {"ref_commit": "4387133", "W3": {"µs / fact": timed}}

    def commit(ref: str) -> str:
        return "4387133"

    def compare(
        ref: str, rounds: int, only: Sequence[str], *, read_proof: bool
    ) -> dict[str, object]:
        assert (ref, only, read_proof) == ("4387133", ("W3",), True)
        return compared

    monkeypatch.setattr(baseline, "_commit", commit)
    monkeypatch.setattr(baseline, "compare", compare)
    assert baseline.main(["4387133", "--project", "--only", "W3", "--read-proof"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["W3"] == {"µs / fact": timed}
    assert report["projected"]["W3_us_per_fact"]["projected"] == 5.0  # 0.5 x the issue's 10
    assert report["projected"]["W3_us_per_fact"]["met"] is False  # 5.5 at the upper quartile
