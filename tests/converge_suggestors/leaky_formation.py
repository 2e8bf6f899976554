"""A formation whose model server echoes the credentials it is sent, each call in its own way.

`test_secrets_cli.py` runs it with the real `converge` command. The provider's base URL (with
a user name, a password and a key in its query string) comes from `LEAKY_BASE_URL`, its key
from `OPENAI_API_KEY`; each suggestor asks for the model named after how the server misbehaves.
"""

import os

from converge import ContextKey, Formation
from converge_suggestors import LlmSuggestor, OpenAIChatProvider, SeedSuggestor, ValidationAgent

MODES = ("deny", "busy", "boundary", "malformed", "content", "model", "good")
"""How the server answers each suggestor's call (the model it asks for)."""

model = OpenAIChatProvider(
    os.environ["LEAKY_BASE_URL"], model="good", max_retries=1, backoff=0.01, timeout=20
)

formation = Formation(
    name="leaky",
    description="a model server that echoes credentials",
    suggestors=(
        SeedSuggestor("question", "Which market first?"),
        *(
            LlmSuggestor(
                f"ask-{mode}",
                model,
                model=mode,
                dependencies=[ContextKey.SEEDS],
                target=ContextKey.HYPOTHESES,
                instructions="Propose hypotheses about the seeds.",
                max_repairs=1,
            )
            for mode in MODES
        ),
        ValidationAgent(),
    ),
)
