"""The one place converge's version is written; `pyproject.toml` reads it at build time."""

__version__ = "0.2.0"
