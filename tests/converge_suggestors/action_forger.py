"""`Forger`: proposes an action straight into `ACTIONS`, bypassing any model (as a tampered
store or a buggy suggestor would), for the tests of what `ActionRunner` refuses."""

from __future__ import annotations

import json
from collections.abc import Mapping

from converge import AgentEffect, Context, ContextKey, ProposedFact
from converge_suggestors import ACTIONS


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
