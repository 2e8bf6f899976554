"""The core suite on the newer Pythons: `nox` (or `tools/test_versions.sh`, which CI runs).

`make test` runs the full suite on Python 3.11, with PostgreSQL, Chromium and the local
model. The `core` session runs the rest of the supported Pythons on the suite without them:
the project installed with the `test-core` dependency group (every extra but `retrieval`,
`dask` and `local-model`), no service, nothing marked `slow` or `model`. The Pythons here
and the one `make test` uses are the classifiers in `pyproject.toml` (`tests/test_noxfile.py`
checks that they agree).
"""

from __future__ import annotations

import nox

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "virtualenv"
nox.options.error_on_missing_interpreters = True
nox.options.sessions = ["core"]

PYPROJECT = nox.project.load_toml("pyproject.toml")

CORE_PYTHONS = ["3.12", "3.13"]
"""The Pythons the core session runs on; 3.11 runs the full suite (`make test`)."""

CORE_LEAVES_OUT = [
    # the extras test-core does not install: dask and torch (retrieval)
    "tests/converge/test_*dask.py",
    "tests/converge/test_cli_batch.py",
    "tests/converge_suggestors/test_retrieval.py",
    # timing and memory figures, measured on the Python the benchmarks' README names
    "tests/test_benchmarks_*.py",
]
"""Test modules the core session leaves out (each runs in the full suite on 3.11)."""


@nox.session(python=CORE_PYTHONS)
def core(session: nox.Session) -> None:
    """The core suite: no services, nothing slow, no model."""
    session.install("-e", ".", *nox.project.dependency_groups(PYPROJECT, "test-core"))
    session.run(
        "python",
        "-m",
        "pytest",
        "-m",
        "not slow and not model",
        "-p",
        "no:cacheprovider",
        *(f"--ignore-glob={pattern}" for pattern in CORE_LEAVES_OUT),
        *session.posargs,
        env={
            # no service here, even where CI has started one: what needs one skips, saying so
            "CONVERGE_REQUIRE_SERVICES": None,
            "DATABASE_URL": None,
            # derandomized, a quarter of CI's examples: 3.11 runs the properties in full
            "HYPOTHESIS_PROFILE": "core",
        },
    )
