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
        echo "test_versions: $session FAILED; its log, .nox/$session.log, ends:"
        tail -n 30 ".nox/$session.log"
    fi
done
echo "test_versions: ${#sessions[@]} sessions in $((SECONDS - start)) s"
exit $status
