"""`ActionRunner`: a promoted action runs once, after approval, with the approved arguments."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from action_forger import action_engine, forged, outcome, staged

from converge import (
    ContextKey,
    ConvergeResult,
    Engine,
    GateDecision,
    ProposedFact,
    RunStore,
    SqliteRunStore,
)
from converge_suggestors import ACTION_RESULTS, ACTIONS, ActionRunner, Tool, ToolCall
from converge_suggestors._tool import arguments_digest

sent: list[tuple[str, str, str]] = []


def send_email(to: str, body: str, *, idempotency_key: str) -> dict[str, str]:
    """Send an email."""
    sent.append((to, body, idempotency_key))
    return {"message_id": f"m-{len(sent)}"}


EMAIL = Tool(send_email, kind="action")
SEED = ProposedFact(key=ContextKey.SEEDS, id="q", content="Storm coming", provenance="input")
CALL = '{"to": "ops@example.com", "body": "Storm: close the roof", "reason": "storm seed"}'


@pytest.fixture(autouse=True)
def _clear() -> None:
    sent.clear()


def engine(*, record: bool = False, store: RunStore | None = None) -> Engine:
    call = ToolCall(id="c1", name="send_email", arguments=CALL)
    return action_engine(
        call, ActionRunner(tools=[EMAIL]), tools=[EMAIL], record=record, store=store
    )


def paused_and_gate(built: Engine) -> tuple[ConvergeResult, str]:
    paused, gate = staged(built, SEED)
    assert sent == []  # nothing runs before approval
    return paused, gate


def test_an_approved_action_runs_once_after_approval_and_its_result_cites_it() -> None:
    built = engine()
    paused, gate = paused_and_gate(built)
    assert paused.checkpoint is not None
    result = anyio.run(built.resume, paused.checkpoint, [GateDecision.approve(gate, by="jane")])
    assert result.converged
    [action] = result.context.get(ACTIONS)
    assert action.promotion.approved_by == "jane"
    assert len(sent) == 1
    assert sent[0][:2] == ("ops@example.com", "Storm: close the roof")
    done = outcome(result)
    assert done.status == "done"
    assert done.result == {"message_id": "m-1"}
    assert done.action == action.ref
    assert done.idempotency_key == sent[0][2]
    [fact] = result.context.get(ACTION_RESULTS)
    assert fact.evidence == (action.ref,)
    assert fact.provenance == "action-runner"


def test_a_rejected_action_never_runs() -> None:
    built = engine()
    paused, gate = paused_and_gate(built)
    assert paused.checkpoint is not None
    decision = GateDecision.reject(gate, by="jane", reason="not now")
    result = anyio.run(built.resume, paused.checkpoint, [decision])
    assert result.converged
    assert sent == []
    assert result.context.get(ACTIONS) == ()
    assert result.context.get(ACTION_RESULTS) == ()


def test_replay_of_a_run_with_an_action_never_calls_the_tool_again() -> None:
    built = engine(record=True)
    paused, gate = paused_and_gate(built)
    assert paused.checkpoint is not None
    result = anyio.run(built.resume, paused.checkpoint, [GateDecision.approve(gate, by="jane")])
    assert len(sent) == 1
    replayed = anyio.run(engine(record=True).replay, result.trace)
    assert replayed.integrity.merkle_root == result.integrity.merkle_root
    assert len(sent) == 1


def run_forged(payload: dict[str, object], *, require_approval: bool) -> ConvergeResult:
    runner = ActionRunner(tools=[EMAIL], require_approval=require_approval)
    return forged(payload, runner).run_sync(inputs=[SEED])


def request(arguments: dict[str, object], **changes: object) -> dict[str, object]:
    return {
        "tool": "send_email",
        "arguments": arguments,
        "arguments_sha256": arguments_digest(json.loads(json.dumps(arguments))),
        "reason": "forged",
        **changes,
    }


ARGS: dict[str, object] = {"to": "a@example.com", "body": "hi"}


def test_an_action_no_person_approved_is_refused_never_run() -> None:
    result = run_forged(request(ARGS), require_approval=True)
    refused = outcome(result)
    assert refused.status == "refused"
    assert refused.error is not None
    assert refused.error.startswith("not approved by a person (promoted by engine)")
    assert sent == []


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        (
            request(ARGS, arguments_sha256="0" * 64),
            "its arguments differ from the approved ones (SHA-256 mismatch)",
        ),
        (request(ARGS, tool="wire_money"), "no action named 'wire_money' in this runner"),
        (request({"to": "a@example.com"}), "its arguments do not validate: body: Field required"),
        (
            request({"to": "a@example.com", "body": "hi", "bcc": "evil@example.com"}),
            "its arguments do not validate: bcc: Extra inputs are not permitted",
        ),
    ],
)
def test_an_action_whose_arguments_are_not_the_approved_ones_is_refused(
    payload: dict[str, object], problem: str
) -> None:
    result = run_forged(payload, require_approval=False)
    refused = outcome(result)
    assert (refused.status, refused.error) == ("refused", problem)
    assert sent == []


def test_an_action_whose_tool_raises_is_recorded_as_failed_not_done() -> None:
    def flaky(to: str, *, idempotency_key: str) -> str:
        """Fails."""
        raise ConnectionError("smtp refused")

    payload = {
        "tool": "flaky",
        "arguments": {"to": "a"},
        "arguments_sha256": arguments_digest({"to": "a"}),
        "reason": "r",
    }
    built = forged(
        payload, ActionRunner(tools=[Tool(flaky, kind="action")], require_approval=False)
    )
    result = built.run_sync(inputs=[SEED])
    failed = outcome(result)
    assert (failed.status, failed.error) == ("failed", "ConnectionError: smtp refused")
    assert result.converged  # recorded once, not retried


async def test_an_action_that_hangs_is_recorded_as_timed_out_with_its_effect_unknown() -> None:
    async def slow(to: str, *, idempotency_key: str) -> str:
        """Hangs."""
        await anyio.sleep(60)
        return "late"

    payload = {
        "tool": "slow",
        "arguments": {"to": "a"},
        "arguments_sha256": arguments_digest({"to": "a"}),
        "reason": "r",
    }
    runner = ActionRunner(tools=[Tool(slow, kind="action", timeout=0.2)], require_approval=False)
    built = forged(payload, runner)
    result = await built.run(inputs=[SEED])
    late = outcome(result)
    assert late.status == "timed_out"
    assert late.error == "no answer within 0.2s: whether it took effect is unknown"


def test_the_idempotency_key_differs_between_namespaces_and_actions() -> None:
    keys = set[str]()
    for namespace in ("", "tenant-a"):
        runner = ActionRunner(tools=[EMAIL], require_approval=False, namespace=namespace)
        built = forged(request(ARGS), runner)
        keys.add(outcome(built.run_sync(inputs=[SEED])).idempotency_key)
    assert len(keys) == 2
    assert {key for _, _, key in sent} == keys


def test_action_runner_refuses_a_read_tool() -> None:
    def look(city: str) -> str:
        """Look."""
        return city

    with pytest.raises(ValueError, match="tool 'look' is not an action"):
        ActionRunner(tools=[Tool(look)])


async def test_a_fork_after_approval_runs_the_action_with_the_same_idempotency_key(
    tmp_path: Path,
) -> None:
    """The fork is a new run from the parent's context: its runner calls the tool again, with
    the key of the same approved fact, so a tool keyed by it takes effect once."""
    store = SqliteRunStore(tmp_path / "runs.db")
    built = engine(record=True, store=store)
    paused = await built.run(inputs=[SEED])
    assert paused.checkpoint is not None
    [gate] = paused.pending
    result = await built.resume(paused.checkpoint, [GateDecision.approve(gate.gate_id, by="jane")])
    [action] = result.context.get(ACTIONS)
    record = await store.load(result.run_id)
    forked = await built.fork(record, at_cycle=action.promotion.cycle)
    assert forked.converged
    assert len(sent) == 2
    assert sent[0][2] == sent[1][2] == outcome(forked).idempotency_key
