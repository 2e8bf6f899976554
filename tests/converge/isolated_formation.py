"""A formation of isolated suggestors, for the batch tests: each process that imports it
builds its suggestors in worker processes of its own default pool."""

from __future__ import annotations

from converge import Budget, ContextKey, Formation, ProposedFact, isolated

formation = Formation(
    name="isolated",
    description="an echo and a counter, each in a worker process",
    suggestors=(
        isolated("isolated_suggestors:Echo"),
        isolated("isolated_suggestors:Counter", until=3),
    ),
    inputs=(ProposedFact(key=ContextKey.SEEDS, id="a", content="alpha", provenance="test"),),
    budget=Budget(max_cycles=10),
)
