"""`PackSuggestor`: runs a `Pack` on each input fact of one key, once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar, final

import anyio.to_thread
from pydantic import BaseModel, ValidationError

from converge import (
    AgentEffect,
    AnyKey,
    Context,
    ContextKey,
    Fact,
    KeyLike,
    Pack,
    ProposedFact,
    key_named,
)

__all__ = ["PackSuggestor"]

InputT = TypeVar("InputT", bound=BaseModel)
PlanT = TypeVar("PlanT", bound=BaseModel)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


@final
class PackSuggestor(Generic[InputT, PlanT]):
    """Solves each input fact under `input_key` once with a `Pack`.

    For an input `i` with a payload that validates as `pack.input_model`: the plan goes to
    `output_key` as `"{pack}:{i}"` when the pack's gate says `promote`, is staged under
    `PROPOSALS` (target `output_key`) when it says `escalate`; a `reject`, an invalid payload or
    any exception becomes a `DIAGNOSTIC` fact `"{pack}:{i}:failed"` naming the pack, the input
    and why. Each input is handled once, decided from the context.
    """

    def __init__(self, pack: Pack[InputT, PlanT], input_key: KeyLike, output_key: KeyLike) -> None:
        input_key = key_named(input_key)
        output_key = key_named(output_key)
        if output_key in (ContextKey.PROPOSALS, ContextKey.DIAGNOSTIC):
            raise ValueError(f"PackSuggestor: output_key cannot be {output_key.value}")
        self._pack = pack
        self._input_key = input_key
        self._output_key = output_key
        self._name = f"pack:{pack.name}:{input_key.value}->{output_key.value}"
        self._provenance = f"{pack.name}@{pack.version}"

    def __repr__(self) -> str:
        return f"PackSuggestor({self._name!r})"

    @property
    def name(self) -> str:
        """`"pack:{pack}:{input_key}->{output_key}"`."""
        return self._name

    @property
    def dependencies(self) -> Sequence[AnyKey]:
        """The input key."""
        return (self._input_key,)

    @property
    def writes(self) -> Sequence[AnyKey]:
        """The output key, `PROPOSALS` (escalations) and `DIAGNOSTIC` (failures)."""
        return (self._output_key, ContextKey.PROPOSALS, ContextKey.DIAGNOSTIC)

    def accepts(self, ctx: Context, /) -> bool:
        """True while some input fact has no plan, staged plan or failure yet."""
        return any(True for _ in self._pending(ctx))

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Solve every pending input, each in a worker thread (a solver may take a while and
        must not hold the event loop)."""
        return AgentEffect.with_proposals(
            [await anyio.to_thread.run_sync(self._handle, fact) for fact in self._pending(ctx)]
        )

    def _plan_id(self, fact: Fact) -> str:
        return f"{self._pack.name}:{fact.id}"

    def _pending(self, ctx: Context) -> list[Fact]:
        pending: list[Fact] = []
        for fact in ctx.get(self._input_key):
            plan_id = self._plan_id(fact)
            if (
                ctx.find(self._output_key, plan_id) is None
                and ctx.find(ContextKey.PROPOSALS, plan_id) is None
                and ctx.find(ContextKey.DIAGNOSTIC, f"{plan_id}:failed") is None
            ):
                pending.append(fact)
        return pending

    def _handle(self, fact: Fact) -> ProposedFact:
        pack = self._pack
        try:
            inputs = fact.payload_as(pack.input_model)
        except ValidationError as error:
            errors = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'payload'}: {e['msg']}"
                for e in error.errors()
            )
            return self._failure(
                fact, f"its payload is not a valid {pack.input_model.__name__} ({errors})"
            )
        try:
            plan = pack.solve(inputs)
            results = tuple(pack.check_invariants(plan))
            verdict = pack.evaluate_gate(plan, results)
        except Exception as error:
            return self._failure(fact, f"the pack raised {_first_line(error)}")
        violated = [r.reason or "violated" for r in results if not r.is_ok]
        if verdict == "reject":
            why = "; ".join(violated) if violated else "no reason given"
            return self._failure(fact, f"the pack's gate rejected the plan ({why})")
        payload = plan.model_dump(mode="json")
        content = f"{pack.name} {pack.version} plan for {fact.ref}"
        if violated:
            content += f" (escalated: {'; '.join(violated)})"
        if verdict == "escalate":
            return ProposedFact(
                key=ContextKey.PROPOSALS,
                target=self._output_key,
                id=self._plan_id(fact),
                content=content,
                payload=payload,
                provenance=self._provenance,
                evidence=(fact.ref,),
            )
        return ProposedFact(
            key=self._output_key,
            id=self._plan_id(fact),
            content=content,
            payload=payload,
            provenance=self._provenance,
            evidence=(fact.ref,),
        )

    def _failure(self, fact: Fact, why: str) -> ProposedFact:
        return ProposedFact(
            key=ContextKey.DIAGNOSTIC,
            id=f"{self._plan_id(fact)}:failed",
            content=f"pack {self._pack.name} failed on input {fact.ref}: {why}",
            provenance=self._provenance,
            evidence=(fact.ref,),
        )
