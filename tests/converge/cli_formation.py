"""A formation file for the CLI tests: one proposal is held for a human."""

from hitl_formation import Recommender

from converge import ContextKey, Formation, HitlPolicy
from converge_suggestors import ReactOnceSuggestor, SeedSuggestor

formation = Formation(
    name="plan-review",
    description="a costly plan waits for a human",
    suggestors=(
        SeedSuggestor("budget", "Pick a plan within budget"),
        Recommender(),
        ReactOnceSuggestor(
            "plan-noted",
            "A plan is on the table",
            source=ContextKey.STRATEGIES,
            target=ContextKey.EVALUATIONS,
        ),
    ),
    hitl=HitlPolicy(confidence_below=0.5),
)
