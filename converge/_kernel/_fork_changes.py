"""What a fork changes in the context it starts from: the facts it retracts and the inputs it
adds, each checked before anything runs (`checked_fork`).

A retraction names a fact of the fork point (`"key/id"`, or an id that names one fact) and,
with `cascade`, reaches every fact whose evidence cites it through any chain. An input is a
proposed fact, read from JSON where the CLI and the console take one, under a key this
process has declared and with a payload that fits it: one that would only be recorded as an
invalid input is refused instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pydantic import JsonValue, TypeAdapter, ValidationError

from .._core._checkpoint import FactRecord
from .._core._exceptions import ConfigurationError, ForkError
from .._core._key import ContextKey, declared, undeclared_names
from .._core._proposal import ProposedFact
from .._core._record import RunRecord
from ._arguments import checked_inputs
from ._fork import ForkPoint, fork_point
from ._gate import model_reason

__all__ = ["check_inputs", "checked_fork", "proposed_inputs", "resolve_retractions"]


def checked_fork(
    record: RunRecord,
    cycle: int,
    inputs: Iterable[ProposedFact],
    retract: Iterable[str],
    *,
    cascade: bool,
) -> tuple[ForkPoint, tuple[ProposedFact, ...], tuple[FactRecord, ...]]:
    """What a fork of `record` at the end of `cycle` starts from, all checked before
    anything runs: the point (`fork_point`), its inputs (`check_inputs`) and the facts it
    retracts (`resolve_retractions`), each refused in that order.

    Raises:
        ConfigurationError: An input is not a `ProposedFact`, or `retract` is a `str`.
        ForkError: As `fork_point`, `check_inputs` and `resolve_retractions` raise it, or a
            kept fact's key is not declared in this process.
    """
    point = fork_point(record, cycle)
    given = checked_inputs(inputs)
    check_inputs(given)
    if isinstance(retract, str):
        raise ConfigurationError("retract must be a sequence of fact references, not a str")
    retracted = resolve_retractions(point, tuple(retract), cascade=cascade)
    unknown = undeclared_names(fact.key for fact in point.facts)
    if unknown:
        raise ForkError(
            f"run {record.run_id} names keys this process has not declared: {unknown}; "
            "import the module that declares them (Key(name, payload=...)) first"
        )
    return point, given, retracted


def resolve_retractions(
    point: ForkPoint, retract: Sequence[str], *, cascade: bool
) -> tuple[FactRecord, ...]:
    """The facts to remove at the fork: each of `retract` (a `"key/id"` reference, or an id
    that names one fact), and with `cascade` every fact whose evidence reaches one of them.

    Raises:
        ForkError: A reference names no fact of the context at the fork cycle, or an id
            names facts under more than one key.
    """
    by_ref = {f"{fact.key}/{fact.id}": fact for fact in point.facts}
    chosen: set[str] = set()
    for given in retract:
        if given in by_ref:
            chosen.add(given)
            continue
        named = [ref for ref, fact in by_ref.items() if fact.id == given]
        if len(named) == 1:
            chosen.add(named[0])
            continue
        if named:
            raise ForkError(
                f"--retract {given}: facts under several keys have that id ({', '.join(named)}); "
                "name one as KEY/ID"
            )
        raise ForkError(
            f"--retract {given}: run {point.run_id} has no such fact at the end of cycle "
            f"{point.cycle}"
        )
    if cascade and chosen:
        chosen = _reaching(point.facts, chosen)
    return tuple(fact for fact in point.facts if f"{fact.key}/{fact.id}" in chosen)


def _reaching(facts: Sequence[FactRecord], removed: set[str]) -> set[str]:
    """`removed` and every fact whose evidence reaches one of them, through any chain."""
    cited_by: dict[str, list[str]] = {}
    for fact in facts:
        ref = f"{fact.key}/{fact.id}"
        for cited in fact.evidence:
            cited_by.setdefault(cited, []).append(ref)
    reached = set(removed)
    frontier = list(removed)
    while frontier:
        for citing in cited_by.get(frontier.pop(), ()):
            if citing not in reached:
                reached.add(citing)
                frontier.append(citing)
    return reached


_INPUTS = TypeAdapter(tuple[ProposedFact, ...])


def proposed_inputs(documents: Sequence[JsonValue]) -> tuple[ProposedFact, ...]:
    """A fork's inputs from JSON documents (`--input`, `--inputs FILE.json`, the console's
    form), each a proposed fact.

    Raises:
        ForkError: The first document that is not a proposed fact, named by index and
            `key/id`, with the field and what is wrong with it.
    """
    try:
        return _INPUTS.validate_python(documents)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        where = first["loc"][0] if first["loc"] else 0
        item = documents[where] if isinstance(where, int) and where < len(documents) else {}
        ref = f"{item.get('key')}/{item.get('id')}" if isinstance(item, dict) else "?"
        said = f"{'.'.join(str(p) for p in first['loc'][1:]) or 'input'}: {first['msg']}"
        raise ForkError(f"inputs[{where}] ({ref}): {said}") from None


def check_inputs(inputs: Sequence[ProposedFact]) -> None:
    """Refuse an input under a key this process has not declared, or whose payload does not
    fit its typed key: a fork with one would record it as an invalid input, and it is
    refused before anything runs instead.

    Raises:
        ForkError: The first input that does not fit, named by index and reference.
    """
    for index, proposal in enumerate(inputs):
        key = proposal.key
        if not declared(key):
            raise ForkError(
                f"inputs[{index}] ({proposal.ref}): key {key} is not declared in this process"
            )
        if isinstance(key, ContextKey):
            continue
        problem = model_reason(key, proposal.payload)
        if problem is not None:
            raise ForkError(f"inputs[{index}] ({proposal.ref}): {problem}")
