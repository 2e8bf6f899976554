"""A formation whose suggestor deletes or replaces the SQLite store file under its own run.

`VANISH_STORE` names the store file; `VANISH_MODE` is `delete` (unlink it) or `replace` (put
a copy of it in its place, as a restore from a backup would). Run through the real command
line by `test_sqlite_store.py`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from converge import AgentEffect, Context, ContextKey, Formation, ProposedFact
from converge_suggestors import SeedSuggestor


def vanish(store: Path, mode: str) -> None:
    """Delete `store`, or replace it by a copy of itself (a new file at the same path)."""
    if mode == "delete":
        store.unlink()
        return
    copy = store.with_name(f"{store.name}.copy")
    shutil.copyfile(store, copy)
    os.replace(copy, store)


class Vanish:
    """Once a seed exists: make the store file vanish, then propose one fact."""

    name = "vanish"
    dependencies = (ContextKey.SEEDS,)

    def accepts(self, ctx: Context, /) -> bool:
        return ctx.find(ContextKey.STRATEGIES, "after") is None

    async def execute(self, ctx: Context, /) -> AgentEffect:
        vanish(Path(os.environ["VANISH_STORE"]), os.environ["VANISH_MODE"])
        fact = ProposedFact(
            key=ContextKey.STRATEGIES, id="after", content="x", provenance=self.name
        )
        return AgentEffect.with_proposals([fact])


formation = Formation(name="vanish", suggestors=(SeedSuggestor("start", "Go"), Vanish()))
