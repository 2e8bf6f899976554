"""`PolicySuggestor`: Cedar policies over facts (extra `policy`).

Cedar (https://www.cedarpolicy.com) comes from `cedarpy`, installed with the `policy` extra
(`pip install "converge-engine[policy]"`) and imported when a `PolicySuggestor` is built.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar, Final, Literal, Protocol, cast, final

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from converge import (
    AgentEffect,
    AnyKey,
    Context,
    ContextKey,
    Fact,
    KeyLike,
    ProposedFact,
    key_named,
)

__all__ = ["EntityUid", "PolicyDecision", "PolicyRequest", "PolicySuggestor"]

_OUTPUT_KEYS: Final = (ContextKey.CONSTRAINTS, ContextKey.EVALUATIONS)


class _Diagnostics(Protocol):
    @property
    def errors(self) -> Sequence[str]: ...
    @property
    def reasons(self) -> Sequence[str]: ...
    @property
    def id_annotations_by_reason(self) -> Mapping[str, object]: ...


class _Decision(Protocol):
    @property
    def value(self) -> str: ...


class _AuthzResult(Protocol):
    @property
    def decision(self) -> _Decision: ...
    @property
    def diagnostics(self) -> _Diagnostics: ...


class _PolicySetType(Protocol):
    def from_str(self, text: str, /) -> object: ...


class _EntitiesType(Protocol):
    def from_json_str(self, text: str, /) -> object: ...


class _Cedar(Protocol):
    """The part of `cedarpy` used here, typed (its own annotations leave `dict` bare)."""

    @property
    def PolicySet(self) -> _PolicySetType: ...
    @property
    def Entities(self) -> _EntitiesType: ...
    def is_authorized(
        self, request: dict[str, object], policies: object, entities: object, /
    ) -> _AuthzResult: ...


def _cedarpy() -> _Cedar:
    try:
        module = importlib.import_module("cedarpy")
    except ImportError:
        raise ImportError(
            "PolicySuggestor needs cedarpy: install the 'policy' extra "
            '(pip install "converge-engine[policy]")'
        ) from None
    return cast(_Cedar, module)


@final
class EntityUid(BaseModel, frozen=True):
    """A Cedar entity reference given by its parts, so the id needs no quoting or escaping.

    `EntityUid(type="User", id="alice")` is the entity Cedar writes `User::"alice"`.
    """

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    type: str = Field(min_length=1)
    """The entity type, with its namespace if any: `"User"`, `"Acme::Expense"`."""
    id: str
    """The entity id."""

    def __str__(self) -> str:
        return f"{self.type}::{json.dumps(self.id, ensure_ascii=False)}"


@final
class PolicyRequest(BaseModel, frozen=True):
    """One Cedar authorization request: may `principal` do `action` on `resource`, in `context`?

    Each entity is an [`EntityUid`][converge_suggestors.EntityUid] or a string in Cedar syntax
    (`'User::"alice"'`, `'Action::"approve"'`).
    """

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    principal: EntityUid | str
    """Who asks."""
    action: EntityUid | str
    """What they ask to do."""
    resource: EntityUid | str
    """What they ask to do it on."""
    context: Mapping[str, JsonValue] = Field(default_factory=dict[str, JsonValue])
    """The request's context record, read by policies as `context.<name>`. Cedar numbers are
    whole: a float with no fraction (`9.0`, as JSON payloads often carry) is passed as the
    integer, any other float makes the request fail."""


@final
class PolicyDecision(BaseModel, frozen=True):
    """What Cedar decided for one request, and which policies decided it."""

    model_config: ClassVar[ConfigDict] = ConfigDict(frozen=True, extra="forbid")

    decision: Literal["allow", "deny"]
    """`"allow"` when some `permit` applies and no `forbid` does; `"deny"` otherwise."""
    policies: tuple[str, ...]
    """The determining policies, sorted: the `permit`s that allowed, or the `forbid`s that
    denied (empty for a deny because no `permit` applies). A policy is named by its `@id`
    annotation when it has one, else by Cedar's positional id (`"policy0"`, ...)."""
    errors: tuple[str, ...] = ()
    """Policies that could not be evaluated for this request (Cedar skips them), sorted."""

    @property
    def allowed(self) -> bool:
        """Whether the decision is `"allow"`."""
        return self.decision == "allow"


@final
class PolicySuggestor:
    """Decides each fact of one key with a Cedar policy set, as an allow or deny proposal.

    For each fact of `watch` for which `request(fact)` gives a
    [`PolicyRequest`][converge_suggestors.PolicyRequest] (`None` skips the fact), it proposes
    to `output_key` a fact `"{name}:{fact id}"` whose payload is
    `{"decision": "allow" | "deny", "policies": [...], "errors": [...], "request": {...}}` and
    whose evidence is the fact's `"key/id"` followed by `"policy:{id}"` for each determining
    policy. A request Cedar cannot evaluate, or a `request` callable that raises, becomes a
    `DIAGNOSTIC` fact `"{name}:{fact id}:failed"` saying why. Each fact is decided once,
    judged from the context.

    Args:
        policies: The Cedar policy set, as Cedar text; a parse error is a `ValueError`.
        watch: The key whose facts are decided.
        request: Maps a fact to its request (from its payload, id or provenance); must be pure.
        output_key: `EVALUATIONS` (the default) or `CONSTRAINTS`.
        entities: Cedar entities (the JSON entity format: `uid`, `attrs`, `parents`) for
            policies that look at entity attributes or hierarchy, e.g. `principal in
            Group::"admins"`.
        name: The suggestor's name and the prefix of its fact ids.

    Raises:
        ImportError: `cedarpy` is not installed (the `policy` extra).
        ValueError: The policies or entities do not parse, or `output_key` is not allowed.
    """

    __slots__ = ("_cedar", "_entities", "_name", "_output_key", "_policies", "_request", "_watch")

    def __init__(
        self,
        policies: str,
        *,
        watch: KeyLike,
        request: Callable[[Fact], PolicyRequest | None],
        output_key: KeyLike = ContextKey.EVALUATIONS,
        entities: Sequence[Mapping[str, object]] = (),
        name: str = "policy",
    ) -> None:
        watch = key_named(watch)
        output_key = key_named(output_key)
        cedarpy = _cedarpy()
        if output_key not in _OUTPUT_KEYS:
            raise ValueError(
                f"PolicySuggestor {name!r}: output_key must be constraints or evaluations, "
                f"not {output_key.value}"
            )
        if watch is output_key:
            raise ValueError(f"PolicySuggestor {name!r}: watch and output_key must differ")
        try:
            self._policies = cedarpy.PolicySet.from_str(policies)
        except ValueError as error:
            raise ValueError(
                f"PolicySuggestor {name!r}: the policies do not parse: {error}"
            ) from None
        try:
            self._entities = cedarpy.Entities.from_json_str(
                json.dumps([dict(entity) for entity in entities])
            )
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"PolicySuggestor {name!r}: the entities do not parse: {error}"
            ) from None
        self._cedar = cedarpy
        self._watch = watch
        self._request = request
        self._output_key = output_key
        self._name = name

    def __repr__(self) -> str:
        return (
            f"PolicySuggestor({self._name!r}, watch={self._watch.value}, "
            f"output_key={self._output_key.value})"
        )

    @property
    def name(self) -> str:
        """The name given (`"policy"` by default)."""
        return self._name

    @property
    def dependencies(self) -> Sequence[AnyKey]:
        """The watched key."""
        return (self._watch,)

    @property
    def writes(self) -> Sequence[AnyKey]:
        """The output key and `DIAGNOSTIC` (failures)."""
        return (self._output_key, ContextKey.DIAGNOSTIC)

    def accepts(self, ctx: Context, /) -> bool:
        """True while some fact of the watched key has neither a decision nor a failure."""
        return any(True for _ in self._pending(ctx))

    async def execute(self, ctx: Context, /) -> AgentEffect:
        """Decide every pending fact."""
        return AgentEffect.with_proposals(self._handle(fact) for fact in self._pending(ctx))

    def decide(self, request: PolicyRequest, /) -> PolicyDecision:
        """Evaluate one request against the policy set.

        Raises:
            ValueError: Cedar cannot evaluate the request (an entity that does not parse, a
                context number with a fraction), so it reached no decision.
        """
        cedar_request = _cedar_request(request)
        result = self._cedar.is_authorized(cedar_request, self._policies, self._entities)
        diagnostics = result.diagnostics
        errors = tuple(sorted(str(error) for error in diagnostics.errors))
        verdict = result.decision.value
        if verdict not in ("Allow", "Deny"):
            raise ValueError(f"Cedar reached no decision: {'; '.join(errors) or verdict}")
        annotations: dict[str, object] = dict(diagnostics.id_annotations_by_reason)
        policies = sorted(
            {
                label if isinstance(label := annotations.get(reason), str) and label else reason
                for reason in map(str, diagnostics.reasons)
            }
        )
        return PolicyDecision(
            decision="allow" if verdict == "Allow" else "deny",
            policies=tuple(policies),
            errors=errors,
        )

    def predicate(
        self, request: Callable[[ProposedFact], PolicyRequest | None], /
    ) -> Callable[[ProposedFact], bool]:
        """A [`HitlPolicy`][converge.HitlPolicy] predicate: gate what Cedar does not allow.

        The predicate maps a proposal to a request with `request` (`None`: the policy does
        not apply, so the proposal is not gated) and returns true (hold it for a human) unless
        Cedar allows it. A request Cedar cannot evaluate raises, and `HitlPolicy` gates a
        proposal whose predicate raises: it fails closed.
        """

        def gated(proposal: ProposedFact) -> bool:
            asked = request(proposal)
            return asked is not None and not self.decide(asked).allowed

        return gated

    def _decision_id(self, fact: Fact) -> str:
        return f"{self._name}:{fact.id}"

    def _pending(self, ctx: Context) -> list[Fact]:
        pending: list[Fact] = []
        for fact in ctx.get(self._watch):
            decision_id = self._decision_id(fact)
            if (
                ctx.find(self._output_key, decision_id) is not None
                or ctx.find(ContextKey.DIAGNOSTIC, f"{decision_id}:failed") is not None
            ):
                continue
            try:
                applies = self._request(fact) is not None
            except Exception:
                applies = True  # execute records why
            if applies:
                pending.append(fact)
        return pending

    def _handle(self, fact: Fact) -> ProposedFact:
        try:
            request = self._request(fact)
            assert request is not None  # _pending keeps only facts the policy applies to
        except Exception as error:
            return self._failure(fact, f"the request mapping raised {_first_line(error)}")
        try:
            decision = self.decide(request)
        except ValueError as error:
            return self._failure(fact, str(error))
        verb = "allows" if decision.allowed else "denies"
        if decision.policies:
            why = ("permitted by " if decision.allowed else "forbidden by ") + ", ".join(
                decision.policies
            )
        else:
            why = "no policy permits it"
        return ProposedFact(
            key=self._output_key,
            id=self._decision_id(fact),
            content=(
                f"Cedar {verb} {request.principal} {request.action} on {request.resource} "
                f"for {fact.ref} ({why})"
            ),
            payload={
                "decision": decision.decision,
                "policies": list(decision.policies),
                "errors": list(decision.errors),
                "request": request.model_dump(mode="json"),
            },
            provenance=self._name,
            evidence=(fact.ref, *(f"policy:{policy}" for policy in decision.policies)),
        )

    def _failure(self, fact: Fact, why: str) -> ProposedFact:
        return ProposedFact(
            key=ContextKey.DIAGNOSTIC,
            id=f"{self._decision_id(fact)}:failed",
            content=f"policy {self._name} could not decide {fact.ref}: {why}",
            provenance=self._name,
            evidence=(fact.ref,),
        )


def _cedar_entity(value: EntityUid | str) -> object:
    return {"type": value.type, "id": value.id} if isinstance(value, EntityUid) else value


def _cedar_value(value: JsonValue, path: str) -> JsonValue:
    """`value` as Cedar reads it: a whole float becomes a Cedar `Long`, which has no fractions."""
    if isinstance(value, float):
        if value.is_integer() and -(2**63) <= value < 2**63:
            return int(value)
        raise ValueError(
            f"{path} is {value!r}, but Cedar numbers are whole (64-bit integers): "
            "pass an integer (cents, say) or a string"
        )
    if isinstance(value, dict):
        return {key: _cedar_value(item, f"{path}.{key}") for key, item in value.items()}
    if isinstance(value, list):
        return [_cedar_value(item, f"{path}[{index}]") for index, item in enumerate(value)]
    return value


def _cedar_request(request: PolicyRequest) -> dict[str, object]:
    return {
        "principal": _cedar_entity(request.principal),
        "action": _cedar_entity(request.action),
        "resource": _cedar_entity(request.resource),
        "context": {
            key: _cedar_value(value, f"context.{key}") for key, value in request.context.items()
        },
    }


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
