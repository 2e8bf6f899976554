"""An adaptive gap loop: suggestors discover the work from the data, so the data sets the cycles.

The inputs are a catalogue of artifacts, each listing what it depends on (`seeds/artifact:*`),
and one request: survey the release, `app`. Four suggestors then loop:

- `surveyor` surveys every requested artifact (`strategies/survey:*` → `signals/surveyed:*`);
- `gap-opener` opens a gap for a surveyed artifact with unsurveyed dependencies
  (`constraints/gap:*`);
- `survey-requester` requests a survey of every dependency an open gap is missing;
- `gap-closer` closes a gap once all its dependencies are surveyed (`evaluations/closed:*`).

Each level of the dependency graph takes three cycles (survey, open a gap, request the next
surveys), so the default graph, four levels deep, converges in 12 cycles; artifacts the
release does not need are never surveyed. The ACCEPTANCE invariant `no-open-gap` makes the
fixed point count as convergence only when every gap is closed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from converge import (
    Context,
    ContextKey,
    Fact,
    Formation,
    InvariantClass,
    InvariantResult,
    ProposedFact,
    suggestor,
)

__all__ = ["ARTIFACTS", "ROOT", "build_formation", "formation"]

ARTIFACTS: Final[Mapping[str, tuple[str, ...]]] = {
    "app": ("api", "web"),
    "api": ("auth", "db"),
    "web": ("auth", "ui-kit"),
    "auth": ("crypto",),
    "db": ("crypto",),
    "ui-kit": (),
    "crypto": (),
    "legacy-cli": ("db",),
}
"""The default catalogue: each artifact and the artifacts it depends on (four levels deep)."""
ROOT: Final = "app"
"""The artifact whose survey is requested first."""

_CATALOGUE: Final = ContextKey.SEEDS
_REQUESTS: Final = ContextKey.STRATEGIES
_SURVEYS: Final = ContextKey.SIGNALS
_GAPS: Final = ContextKey.CONSTRAINTS
_CLOSED: Final = ContextKey.EVALUATIONS


def _name(fact: Fact) -> str:
    """The artifact a fact is about: the part of its id after the first colon."""
    return fact.id.partition(":")[2]


def _dependencies(fact: Fact) -> tuple[str, ...]:
    payload = fact.payload
    assert isinstance(payload, dict)
    names = payload["depends_on"]
    assert isinstance(names, list)
    return tuple(str(name) for name in names)


def _surveyed(ctx: Context, name: str) -> bool:
    return ctx.find(_SURVEYS, f"surveyed:{name}") is not None


def _missing(ctx: Context, survey: Fact) -> list[str]:
    return [name for name in _dependencies(survey) if not _surveyed(ctx, name)]


def _open_gaps(ctx: Context) -> list[Fact]:
    return [gap for gap in ctx.get(_GAPS) if ctx.find(_CLOSED, f"closed:{_name(gap)}") is None]


def _surveys_due(ctx: Context) -> list[ProposedFact]:
    proposals: list[ProposedFact] = []
    for request in ctx.get(_REQUESTS):
        name = _name(request)
        if _surveyed(ctx, name):
            continue
        entry = ctx.find(_CATALOGUE, f"artifact:{name}")
        depends_on = () if entry is None else _dependencies(entry)
        found = ", ".join(depends_on) or "nothing"
        proposals.append(
            ProposedFact(
                key=_SURVEYS,
                id=f"surveyed:{name}",
                content=f"{name} surveyed: depends on {found}"
                if entry is not None
                else f"{name} surveyed: not in the catalogue",
                payload={"depends_on": list(depends_on)},
                provenance="surveyor",
                evidence=(request.ref,) if entry is None else (request.ref, entry.ref),
            )
        )
    return proposals


def _gaps_due(ctx: Context) -> list[ProposedFact]:
    proposals: list[ProposedFact] = []
    for survey in ctx.get(_SURVEYS):
        name = _name(survey)
        missing = _missing(ctx, survey)
        if not missing or ctx.find(_GAPS, f"gap:{name}") is not None:
            continue
        proposals.append(
            ProposedFact(
                key=_GAPS,
                id=f"gap:{name}",
                content=f"{name} has unsurveyed dependencies: {', '.join(missing)}",
                payload={"missing": list(missing)},
                provenance="gap-opener",
                evidence=(survey.ref,),
            )
        )
    return proposals


def _requests_due(ctx: Context) -> list[ProposedFact]:
    proposals: dict[str, ProposedFact] = {}
    for gap in _open_gaps(ctx):
        survey = ctx.find(_SURVEYS, f"surveyed:{_name(gap)}")
        assert survey is not None
        for name in _missing(ctx, survey):
            request_id = f"survey:{name}"
            if request_id in proposals or ctx.find(_REQUESTS, request_id) is not None:
                continue
            proposals[request_id] = ProposedFact(
                key=_REQUESTS,
                id=request_id,
                content=f"Survey {name}, needed by {_name(gap)}",
                provenance="survey-requester",
                evidence=(gap.ref,),
            )
    return list(proposals.values())


def _closures_due(ctx: Context) -> list[ProposedFact]:
    proposals: list[ProposedFact] = []
    for gap in _open_gaps(ctx):
        name = _name(gap)
        survey = ctx.find(_SURVEYS, f"surveyed:{name}")
        assert survey is not None
        if _missing(ctx, survey):
            continue
        surveys = tuple(f"{_SURVEYS.value}/surveyed:{dep}" for dep in _dependencies(survey))
        proposals.append(
            ProposedFact(
                key=_CLOSED,
                id=f"closed:{name}",
                content=f"gap in {name} closed: every dependency is surveyed",
                provenance="gap-closer",
                evidence=(gap.ref, *surveys),
            )
        )
    return proposals


@suggestor(
    name="surveyor",
    dependencies=[_REQUESTS],
    accepts=lambda ctx: bool(_surveys_due(ctx)),
    writes=[_SURVEYS],
)
async def _surveyor(ctx: Context) -> list[ProposedFact]:
    return _surveys_due(ctx)


@suggestor(
    name="gap-opener",
    dependencies=[_SURVEYS],
    accepts=lambda ctx: bool(_gaps_due(ctx)),
    writes=[_GAPS],
)
async def _gap_opener(ctx: Context) -> list[ProposedFact]:
    return _gaps_due(ctx)


@suggestor(
    name="survey-requester",
    dependencies=[_GAPS],
    accepts=lambda ctx: bool(_requests_due(ctx)),
    writes=[_REQUESTS],
)
async def _survey_requester(ctx: Context) -> list[ProposedFact]:
    return _requests_due(ctx)


@suggestor(
    name="gap-closer",
    dependencies=[_SURVEYS, _GAPS],
    accepts=lambda ctx: bool(_closures_due(ctx)),
    writes=[_CLOSED],
)
async def _gap_closer(ctx: Context) -> list[ProposedFact]:
    return _closures_due(ctx)


class _NoOpenGap:
    """ACCEPTANCE: at the fixed point, every gap has been closed."""

    name = "no-open-gap"
    invariant_class = InvariantClass.ACCEPTANCE

    def check(self, ctx: Context, /) -> InvariantResult:
        still_open = [gap.id for gap in _open_gaps(ctx)]
        if still_open:
            return InvariantResult.violated(f"open gaps: {', '.join(still_open)}")
        return InvariantResult.ok()


def build_formation(
    artifacts: Mapping[str, Sequence[str]] = ARTIFACTS, *, root: str = ROOT
) -> Formation:
    """The gap loop over `artifacts` (name → dependencies), starting with a survey of `root`."""
    catalogue = tuple(
        ProposedFact(
            key=_CATALOGUE,
            id=f"artifact:{name}",
            content=f"{name} depends on {', '.join(depends_on) or 'nothing'}",
            payload={"depends_on": list(depends_on)},
            provenance="input:catalogue",
        )
        for name, depends_on in artifacts.items()
    )
    first_request = ProposedFact(
        key=_REQUESTS,
        id=f"survey:{root}",
        content=f"Survey {root}, the release",
        provenance="input:release-manager",
    )
    return Formation(
        name="adaptive_gap_loop",
        description=(
            "Survey a dependency graph from its root: open gaps for unsurveyed dependencies, "
            "request their surveys, close the gaps; the graph's depth sets the cycles."
        ),
        suggestors=(_surveyor, _gap_opener, _survey_requester, _gap_closer),
        invariants=(_NoOpenGap(),),
        inputs=(*catalogue, first_request),
    )


formation: Formation = build_formation()
"""The default catalogue (`ARTIFACTS`) from `app`: converges in 12 cycles, no gap open."""
