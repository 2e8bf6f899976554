"""`python -m benchmarks.instructions`: the workloads, untimed, for an instruction counter."""

import pytest

from benchmarks import instructions


@pytest.mark.parametrize("name", instructions.WORKLOADS)
def test_each_workload_runs_as_designed(name: str) -> None:
    instructions.main([name, "1"])  # a warm-up and one run, each checked by the suite


def test_an_unknown_workload_is_refused_with_the_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as stopped:
        instructions.main(["W9", "1"])
    assert stopped.value.code == 2
    assert "choose from 'W1', 'W3', 'W4'" in capsys.readouterr().err
