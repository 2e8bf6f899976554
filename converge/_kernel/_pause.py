"""A paused run, both ways: run state into a signed `Checkpoint`, and a verified one back.

`checkpoint_of` is what the loop calls when a run stops for a human; `resume_state` is what
`Engine.resume` calls: it verifies the signature, the registrations, the decisions and every
fact (through the one verifying restore, `_checkpoint.restore_snapshot`) before anything runs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime

from .._core._checkpoint import Checkpoint, fact_records, restore_snapshot
from .._core._exceptions import InvalidCheckpointError, InvalidResumeError, RunNotFoundError
from .._core._hitl import GateDecision, GateRequest, HitlPolicy
from .._core._key import AnyKey, in_key_order, key_named, undeclared_names
from .._core._signature import signature_matches, signature_of
from .._core._store import RunStore
from ._cycle_log import CycleLog
from ._state import RunState

__all__ = [
    "checkpoint_of",
    "current_version",
    "decide_gates",
    "resume_state",
    "sign",
    "verify_signature",
]

Fingerprint = tuple[tuple[str, ...], tuple[str, ...]]
"""`(registrations, invariants)` as a checkpoint records them."""


def _ref(slot: tuple[AnyKey, str]) -> str:
    return f"{slot[0].value}/{slot[1]}"


def _slot(ref: str) -> tuple[AnyKey, str]:
    key, _, ident = ref.partition("/")
    return key_named(key), ident


def sign(checkpoint: Checkpoint, key: bytes | None) -> Checkpoint:
    """`checkpoint` with its signature set (unchanged without a key)."""
    if key is None:
        return checkpoint
    return checkpoint.model_copy(update={"signature": signature_of(checkpoint, key)})


def verify_signature(checkpoint: Checkpoint, key: bytes | None) -> None:
    """Refuse an unsigned or mis-signed checkpoint when the engine has a key."""
    if key is None:
        return
    if checkpoint.signature is None:
        raise InvalidCheckpointError(
            f"checkpoint of run {checkpoint.run_id} is unsigned, but this engine requires "
            "signed checkpoints"
        )
    if not signature_matches(checkpoint, checkpoint.signature, key):
        raise InvalidCheckpointError(
            f"checkpoint of run {checkpoint.run_id} has a bad signature: it was changed "
            "or signed with another key"
        )


def checkpoint_of(
    state: RunState,
    held: Sequence[GateRequest],
    *,
    fingerprint: Fingerprint,
    elapsed: float,
    key: bytes | None,
) -> Checkpoint:
    """The signed checkpoint of a run that stopped for `held` gates; unsigned when a fact was
    changed below the API since its promotion (the run then does not pause: `RunLoop._finish`
    ends it on the change and drops the checkpoint)."""
    snapshot = state.snapshot
    registrations, invariants = fingerprint
    facts, problem = fact_records(snapshot)
    checkpoint = Checkpoint(
        run_id=state.run_id,
        registrations=registrations,
        invariants=invariants,
        facts=facts,
        merkle_root=snapshot.merkle_root(),
        clock=snapshot.clock,
        version=snapshot.version,
        cycle=state.cycle,
        dirty=in_key_order(state.dirty),
        tokens=state.tokens,
        elapsed_seconds=elapsed,
        refused=tuple(_ref(slot) for slot in sorted(state.human_rejected)),
        pending=tuple(held),
        decisions=tuple(state.decisions),
        rejections=tuple(state.rejections),
        cycles=tuple(state.cycles),
        inputs=state.inputs,
        input_violations=state.input_violations,
        initial_root=state.initial_root,
        continuations=state.continuations,
        lineage=state.lineage,
    )
    return sign(checkpoint, None if problem is not None else key)


def _keys_of(checkpoint: Checkpoint) -> Iterator[AnyKey | None]:
    """Every key a checkpoint names: its facts', pending proposals' and inputs'."""
    for fact in checkpoint.facts:
        yield fact.key
        yield fact.target
    for proposal in (*(g.proposal for g in checkpoint.pending), *checkpoint.inputs):
        yield proposal.key
        yield proposal.target


def resume_state(
    checkpoint: Checkpoint,
    decisions: Sequence[GateDecision],
    *,
    fingerprint: Fingerprint,
    key: bytes | None,
    now: datetime,
    hitl: HitlPolicy | None,
) -> tuple[RunState, tuple[GateDecision, ...]]:
    """The verified state of a paused run, and the decision for each of its pending gates.

    Raises:
        InvalidCheckpointError: The signature, a fact or the Merkle root does not verify.
        InvalidResumeError: The registrations differ, or the decisions do not fit the gates.
    """
    verify_signature(checkpoint, key)
    unknown = undeclared_names(_keys_of(checkpoint))
    if unknown:
        raise InvalidCheckpointError(
            f"checkpoint of run {checkpoint.run_id} names keys this process has not declared: "
            f"{unknown}; import the module that declares them (Key(name, payload=...)) first"
        )
    registrations, invariants = fingerprint
    if (registrations, invariants) != (checkpoint.registrations, checkpoint.invariants):
        raise InvalidResumeError(
            f"run {checkpoint.run_id} was paused with registrations "
            f"{list(checkpoint.registrations)} and invariants {list(checkpoint.invariants)}; "
            f"this engine has {list(registrations)} and {list(invariants)}"
        )
    chosen = decide_gates(checkpoint, decisions, now=now, hitl=hitl)
    try:
        snapshot = restore_snapshot(
            checkpoint.facts,
            cycle=checkpoint.cycle,
            clock=checkpoint.clock,
            merkle_root=checkpoint.merkle_root,
        )
    except ValueError as error:
        raise InvalidCheckpointError(f"checkpoint of run {checkpoint.run_id}: {error}") from None
    state = RunState(
        run_id=checkpoint.run_id,
        snapshot=snapshot,
        origin=checkpoint.initial_root,
        inputs=checkpoint.inputs,
        cycle=checkpoint.cycle,
        dirty=frozenset(checkpoint.dirty),
        tokens=checkpoint.tokens,
        elapsed_before=checkpoint.elapsed_seconds,
        human_rejected=frozenset(_slot(ref) for ref in checkpoint.refused),
        decisions=list(checkpoint.decisions),
        rejections=list(checkpoint.rejections),
        cycles=CycleLog(checkpoint.cycles),
        input_violations=checkpoint.input_violations,
        continuations=checkpoint.continuations,
        lineage=checkpoint.lineage,
    )
    return state, chosen


def decide_gates(
    checkpoint: Checkpoint,
    decisions: Sequence[GateDecision],
    *,
    now: datetime,
    hitl: HitlPolicy | None,
) -> tuple[GateDecision, ...]:
    """One decision per pending gate, in pending order: the given ones and the timed-out ones.

    Raises:
        InvalidResumeError: A decision names no pending gate, repeats one, comes after its
            gate expired, or a live gate has none.
    """
    on_timeout = "reject" if hitl is None else hitl.on_timeout
    pending = {request.gate_id: request for request in checkpoint.pending}
    given: dict[str, GateDecision] = {}
    for decision in decisions:
        if not isinstance(decision, GateDecision):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise InvalidResumeError(
                f"decisions must be GateDecision, got {type(decision).__name__}"
            )
        request = pending.get(decision.gate_id)
        if request is None:
            raise InvalidResumeError(
                f"run {checkpoint.run_id} has no pending gate {decision.gate_id!r}; "
                f"pending: {sorted(pending)}"
            )
        if decision.gate_id in given:
            raise InvalidResumeError(f"gate {decision.gate_id!r} has more than one decision")
        if request.deadline is not None and request.deadline <= now:
            raise InvalidResumeError(
                f"gate {decision.gate_id!r} expired at {request.deadline.isoformat()}; "
                f"it is decided by its timeout ({on_timeout})"
            )
        given[decision.gate_id] = decision
    chosen: list[GateDecision] = []
    missing: list[str] = []
    for gate_id, request in pending.items():
        if request.deadline is not None and request.deadline <= now:
            reason = f"deadline {request.deadline.isoformat()} passed"
            chosen.append(
                GateDecision.approve(gate_id, by="timeout")
                if on_timeout == "approve"
                else GateDecision.reject(gate_id, by="timeout", reason=reason)
            )
        elif gate_id in given:
            chosen.append(given[gate_id])
        else:
            missing.append(gate_id)
    if missing:
        raise InvalidResumeError(f"run {checkpoint.run_id}: no decision for gates {missing}")
    return tuple(chosen)


async def current_version(store: RunStore | None, checkpoint: Checkpoint) -> int:
    """The stored version a resume of `checkpoint` must find unchanged when it saves.

    0 when there is no store or the run was never saved there.

    Raises:
        InvalidResumeError: The store holds the run, but `checkpoint` is not its current one:
            the run was resumed or saved since.
    """
    if store is None:
        return 0
    try:
        record = await store.load(checkpoint.run_id)
    except RunNotFoundError:
        return 0
    if record.checkpoint != checkpoint:
        raise InvalidResumeError(
            f"run {checkpoint.run_id} has moved on since this checkpoint (now "
            f"{record.outcome}){record.decided_by()}; a checkpoint is usable once"
        )
    return record.version
