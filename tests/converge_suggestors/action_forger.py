"""What the tests of `ActionRunner` share: an engine whose model calls an action tool once,
and `Forger`, which proposes an action straight into `ACTIONS`, bypassing any model (as a
tampered store or a buggy suggestor would), for the tests of what the runner refuses."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from converge import (
    AgentEffect,
    Context,
    ContextKey,
    ConvergeResult,
    Engine,
    HitlPolicy,
    ProposedFact,
    RunStore,
)
from converge_suggestors import (
    ACTION_RESULTS,
    ACTIONS,
    ActionOutcome,
    ActionRunner,
    ChatResponse,
    LlmSuggestor,
    McpServer,
    ScriptedChatProvider,
    Tool,
    ToolCall,
)

HITL = HitlPolicy(gated_keys=frozenset({ACTIONS}))
"""Every action waits for a person's decision."""


def action_engine(
    call: ToolCall,
    runner: ActionRunner,
    *,
    tools: Sequence[Tool] = (),
    mcp_servers: Sequence[McpServer] = (),
    record: bool = False,
    store: RunStore | None = None,
) -> Engine:
    """An engine (gated by `HITL`) whose model, offered `tools` and `mcp_servers`, makes
    `call` once and then proposes nothing; `runner` runs what is approved."""
    provider = ScriptedChatProvider(
        [ChatResponse(content="", tool_calls=(call,)), '{"proposals": []}']
    )
    built = Engine(hitl=HITL, record_effects=record, store=store)
    built.register_suggestor(
        LlmSuggestor(
            "planner",
            provider,
            dependencies=[ContextKey.SEEDS],
            target=ContextKey.HYPOTHESES,
            instructions="Plan.",
            tools=tools,
            mcp_servers=mcp_servers,
        )
    )
    built.register_suggestor(runner)
    return built


def staged(built: Engine, seed: ProposedFact) -> tuple[ConvergeResult, str]:
    """The run of `built` from `seed`, paused on its one gate, and that gate's id."""
    paused = built.run_sync(inputs=[seed])
    assert paused.stop_reason == "awaiting_human"
    [gate] = paused.pending
    assert gate.proposal.key == ACTIONS
    return paused, gate.gate_id


def outcome(result: ConvergeResult) -> ActionOutcome:
    """The one action result of `result`."""
    [fact] = result.context.get(ACTION_RESULTS)
    return ACTION_RESULTS.of(fact)


def forged(payload: Mapping[str, object], runner: ActionRunner) -> Engine:
    """An engine (no gate) where a `Forger` proposes `payload` and `runner` runs it."""
    built = Engine()
    built.register_suggestor(Forger(payload))
    built.register_suggestor(runner)
    return built


class Forger:
    """Proposes an action straight into ACTIONS, bypassing any model."""

    name = "forger"
    dependencies = (ContextKey.SEEDS,)

    def __init__(self, payload: Mapping[str, object]) -> None:
        self.payload = payload

    def accepts(self, ctx: Context, /) -> bool:
        return not ctx.get(ACTIONS)

    async def execute(self, ctx: Context, /) -> AgentEffect:
        return AgentEffect.with_proposal(
            ProposedFact(
                key=ACTIONS,
                id="forged",
                content="forged action",
                payload=json.loads(json.dumps(self.payload)),
                provenance=self.name,
            )
        )
