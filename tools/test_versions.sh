#!/usr/bin/env bash
# The core suite on every supported Python but 3.11 (`make test` runs the full suite there):
# the noxfile's `core` sessions, run side by side, each logged to .nox/NAME.log. Fails when
# one fails or when its interpreter is missing. Interpreters come from PATH; where pyenv is
# installed, its versions' bin folders are put first (its shims would pick the wrong Python).
set -euo pipefail
cd "$(dirname "$0")/.."
NOX=${NOX:-.venv/bin/nox}
if command -v pyenv >/dev/null 2>&1; then
    for bin in "$(pyenv root)"/versions/*/bin; do
        PATH="$bin:$PATH"
    done
    export PATH
fi
mapfile -t sessions < <("$NOX" --list --json | .venv/bin/python -c \
    'import json, sys; print(*(s["session"] for s in json.load(sys.stdin)), sep="\n")')
mkdir -p .nox
start=$SECONDS
pids=()
# Job control: without it, bash starts background jobs with SIGINT ignored, and the tests
# that interrupt a child `converge run` would find the signal ignored there too. Each job is
# then its own process group, stopped with the script.
set -m
trap 'for pid in "${pids[@]}"; do kill -- "-$pid" 2>/dev/null || true; done' EXIT
for session in "${sessions[@]}"; do
    "$NOX" --error-on-missing-interpreters --session "$session" >".nox/$session.log" 2>&1 &
    pids+=("$!")
done
status=0
for index in "${!sessions[@]}"; do
    session=${sessions[$index]}
    if wait "${pids[$index]}"; then
        echo "test_versions: $session passed: $(grep -o "[0-9]* passed[^=]*" ".nox/$session.log" | tail -n 1)"
    else
        status=1
        echo "test_versions: $session FAILED (its log: .nox/$session.log):"
        grep -E "^(FAILED|ERROR)|^nox > |[0-9]+ (passed|failed)" ".nox/$session.log" | tail -n 30
    fi
done
echo "test_versions: ${#sessions[@]} sessions in $((SECONDS - start)) s"
exit $status
