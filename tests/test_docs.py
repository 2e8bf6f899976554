"""Run every Python example in `docs/`, so the documentation cannot drift from the code.

Each ```` ```python ```` block is a complete program, run in a fresh module. A block whose
first line is `# doc: no-run` is only compiled. A ```` ```text title="Output" ```` block right
after a Python block holds what that block prints, and is compared exactly. After a block
runs, its `test_*` functions (sync or async, without parameters) are called too, so the
examples on the testing page are tested as well.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import logging
import re
import sys
import textwrap
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
import structlog

DOCS = Path(__file__).resolve().parent.parent / "docs"
NO_RUN = "# doc: no-run"
PYTHON = frozenset({"python", "py"})
_OPENING = re.compile(r"^(?P<indent>[ ]*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
_OUTPUT_TITLE = re.compile(r"""title\s*=\s*["']Output["']""")


@dataclass(frozen=True, slots=True)
class Fence:
    """One fenced block of a Markdown page."""

    language: str
    info: str
    line: int
    source: str


@dataclass(frozen=True, slots=True)
class Example:
    """A Python block, with the output the page says it prints (if it says)."""

    page: str
    index: int
    line: int
    source: str
    expected_output: str | None

    @property
    def runnable(self) -> bool:
        first = self.source.lstrip().splitlines()[0] if self.source.strip() else ""
        return first.strip() != NO_RUN

    @property
    def id(self) -> str:
        return f"{self.page}:block{self.index}"

    def compiled(self, flags: int = 0) -> types.CodeType:
        """The block compiled so that tracebacks name the page and its line numbers."""
        padded = "\n" * self.line + self.source
        return compile(padded, str(DOCS / self.page), "exec", flags=flags)


def fences(text: str) -> Iterator[Fence]:
    """The fenced blocks of `text`, dedented, with the 1-based line of their opening fence."""
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        opening = _OPENING.match(lines[number])
        if opening is None:
            number += 1
            continue
        indent = len(opening["indent"])
        fence = opening["fence"]
        info = opening["info"].strip()
        body: list[str] = []
        end = number + 1
        while end < len(lines):
            stripped = lines[end].strip()
            if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
                break
            body.append(lines[end][indent:] if lines[end][:indent].isspace() else lines[end])
            end += 1
        else:
            raise ValueError(f"unclosed fence opened on line {number + 1}")
        language = info.split(maxsplit=1)[0].lstrip("{.").rstrip("}") if info else ""
        yield Fence(language, info, number + 1, textwrap.dedent("\n".join(body)) + "\n")
        number = end + 1


def parse_examples(page: str, text: str) -> list[Example]:
    """The Python blocks of one page, each with its expected output, if the page gives one."""
    found: list[Example] = []
    previous: Fence | None = None
    for fence in fences(text):
        if fence.language == "text" and _OUTPUT_TITLE.search(fence.info):
            if previous is None or previous.language not in PYTHON:
                raise ValueError(f"{page}:{fence.line}: an Output block must follow a Python block")
            last = found[-1]
            found[-1] = Example(last.page, last.index, last.line, last.source, fence.source)
        elif fence.language in PYTHON:
            found.append(Example(page, len(found), fence.line, fence.source, None))
        previous = fence
    return found


def collect() -> list[Example]:
    return [
        example
        for path in sorted(DOCS.rglob("*.md"))
        for example in parse_examples(
            path.relative_to(DOCS).as_posix(), path.read_text(encoding="utf-8")
        )
    ]


ALL_EXAMPLES = collect()
RUNNABLE = [example for example in ALL_EXAMPLES if example.runnable]
NOT_RUN = [example for example in ALL_EXAMPLES if not example.runnable]


@pytest.fixture(autouse=True)
def isolate_global_state() -> Iterator[None]:
    """Run each example as in a fresh process, with structlog unconfigured; then restore.

    Other tests may leave structlog configured (`capture_logs()` does), and examples may
    configure structlog or the `"converge"` stdlib logger; neither leaks across.
    """
    was_configured = structlog.is_configured()
    config: dict[str, Any] = structlog.get_config()
    config["processors"] = list(config["processors"])
    logger = logging.getLogger("converge")
    handlers, filters = list(logger.handlers), list(logger.filters)
    level, propagate = logger.level, logger.propagate
    structlog.reset_defaults()
    try:
        yield
    finally:
        if was_configured:
            structlog.configure(**config)
        else:
            structlog.reset_defaults()
        logger.handlers[:] = handlers
        logger.filters[:] = filters
        logger.setLevel(level)
        logger.propagate = propagate


def run_example(example: Example) -> str:
    """Run an example in a fresh module, then its `test_*` functions; return its stdout."""
    code = example.compiled()
    slug = re.sub(r"\W", "_", example.page)
    module_name = f"docs_example_{slug}_{example.index}"
    module = types.ModuleType(module_name)
    module.__file__ = str(DOCS / example.page)
    sys.modules[module_name] = module
    stdout = io.StringIO()
    try:
        with contextlib.redirect_stdout(stdout):
            exec(code, module.__dict__)
            for name, value in list(vars(module).items()):
                if name.startswith("test_") and inspect.isfunction(value):
                    call_test(name, value)
    finally:
        del sys.modules[module_name]
    return stdout.getvalue()


def call_test(name: str, function: Callable[..., object]) -> None:
    if inspect.signature(function).parameters:
        raise TypeError(f"docs test {name} takes parameters; docs tests must take none")
    if inspect.iscoroutinefunction(function):
        anyio.run(cast(Callable[[], Any], function))
    else:
        function()


@pytest.mark.parametrize("example", RUNNABLE, ids=[example.id for example in RUNNABLE])
def test_docs_example_runs(example: Example) -> None:
    output = run_example(example)
    if example.expected_output is not None:
        assert output.rstrip() == example.expected_output.rstrip()


@pytest.mark.parametrize("example", NOT_RUN, ids=[example.id for example in NOT_RUN])
def test_docs_fragment_compiles(example: Example) -> None:
    example.compiled(flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def test_docs_have_runnable_examples() -> None:
    pages = {example.page for example in RUNNABLE}
    assert "index.md" in pages
    assert len(RUNNABLE) >= 10


def test_docs_parser_finds_blocks_outputs_and_indented_fragments() -> None:
    text = textwrap.dedent(
        """\
        Intro.

        ```python
        print("a")
        ```

        ```text title="Output"
        a
        ```

        !!! note
            ```python
            # doc: no-run
            x = 1
            ```
        """
    )
    found = parse_examples("check.md", text)
    assert [(e.index, e.line, e.source, e.expected_output, e.runnable) for e in found] == [
        (0, 3, 'print("a")\n', "a\n", True),
        (1, 12, "# doc: no-run\nx = 1\n", None, False),
    ]
