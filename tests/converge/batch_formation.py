"""A formation file for the batch tests: what each run's step does is written in its input.

The run's `seeds/start` content is a list of words; the step reads it in every call:

- `block=SECONDS`: block the event loop (`time.sleep`) that long, as CPU work or a
  synchronous call would;
- `exit`: end the process at once (`os._exit`), as a crash would;
- `fail`: raise, as a model call that failed would (the run converges with a failure);
- `fail-once`: raise on the first call of the run, then succeed (a retry made good is not
  a failure, but this formation has no retries: the run converges with a failure);
- anything else (`case 7`): only names the input.

Each call appends `CONTENT<TAB>PID` to the file named by `CONVERGE_TEST_LOG` (when set) before
it does anything, so a test counts how often each input's step ran, and in which process. A
run has `CONVERGE_TEST_STEPS` steps (default 2), one per cycle. Without inputs (`converge
run`), the run's input is `CONVERGE_TEST_INPUT` (default `plain`).
"""

from __future__ import annotations

import os
import time

from converge import AgentEffect, Budget, Context, ContextKey, Formation, ProposedFact

STEPS = int(os.environ.get("CONVERGE_TEST_STEPS", "2"))


def _log(content: str) -> None:
    path = os.environ.get("CONVERGE_TEST_LOG")
    if path:
        line = f"{content}\t{os.getpid()}\n".encode()
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(descriptor, line)  # one write with O_APPEND: whole lines across processes
        finally:
            os.close(descriptor)


class Step:
    """Adds the next hypothesis, after doing what the input says."""

    name = "step"
    dependencies = (ContextKey.SEEDS, ContextKey.HYPOTHESES)

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.count(ContextKey.HYPOTHESES) < STEPS

    async def execute(self, ctx: Context, /) -> AgentEffect:
        content = ctx.get(ContextKey.SEEDS)[0].content
        _log(content)
        n = ctx.count(ContextKey.HYPOTHESES)
        for word in content.split():
            if word.startswith("block="):
                time.sleep(float(word.removeprefix("block=")))  # noqa: ASYNC251  # on purpose
            elif word == "exit":
                os._exit(13)
            elif word == "fail" or (word == "fail-once" and n == 0):
                raise RuntimeError(f"model unreachable at step {n}: connection refused")
        return AgentEffect.with_proposals(
            [
                ProposedFact(
                    key=ContextKey.HYPOTHESES,
                    id=f"step-{n}",
                    content=f"step {n} of {content}",
                    provenance="step",
                )
            ]
        )


def seed(content: str) -> ProposedFact:
    """The input of a run whose step does what `content` says."""
    return ProposedFact(key=ContextKey.SEEDS, id="start", content=content, provenance="test")


formation = Formation(
    name="batch-steps",
    description="a step per cycle, doing what the input says",
    suggestors=(Step(),),
    inputs=(seed(os.environ.get("CONVERGE_TEST_INPUT", "plain")),),
    budget=Budget(max_cycles=STEPS + 5),
)
