#!/usr/bin/env bash
# Make sure Debian's Chromium is at /usr/bin/chromium, for the headless report test.
# Installs the `chromium` package with apt-get only when it is missing (needs root, as in CI),
# and says what it did. Playwright drives it with executable_path="/usr/bin/chromium".
set -euo pipefail

CHROMIUM=/usr/bin/chromium
if [ -x "$CHROMIUM" ]; then
  echo "ensure_chromium: $CHROMIUM present ($("$CHROMIUM" --version 2>/dev/null || echo 'version unknown')); nothing to do" >&2
  exit 0
fi
if [ "$(id -u)" != "0" ]; then
  echo "ensure_chromium: $CHROMIUM is missing and installing it needs root: run \`apt-get install chromium\` as root" >&2
  exit 1
fi
echo "ensure_chromium: $CHROMIUM is missing; installing Debian's chromium with apt-get" >&2
apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
if [ ! -x "$CHROMIUM" ]; then
  echo "ensure_chromium: apt-get finished but $CHROMIUM is still missing" >&2
  exit 1
fi
echo "ensure_chromium: installed $("$CHROMIUM" --version 2>/dev/null || echo chromium)" >&2
