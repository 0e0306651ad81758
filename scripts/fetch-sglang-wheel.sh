#!/usr/bin/env bash
# Download (once) the pinned SGLang wheel the SM120 patch set targets, into a cache reused by tests and CI.
# Usage: scripts/fetch-sglang-wheel.sh [VERSION]   (default 0.5.23; cache dir: $KIMI_SERVE_WHEEL_CACHE or ~/.cache/kimi-serve/wheels)
# Prints the wheel's path on the last line. Downloads only when no matching wheel is cached.
set -euo pipefail
VERSION="${1:-0.5.23}"
CACHE="${KIMI_SERVE_WHEEL_CACHE:-$HOME/.cache/kimi-serve/wheels}"
PY="${PYTHON:-python3}"
mkdir -p "$CACHE"
find_wheel() { ls "$CACHE"/sglang-"$VERSION"-*.whl 2>/dev/null | head -n 1; }
WHEEL="$(find_wheel || true)"
if [ -z "$WHEEL" ]; then
  TMP="$(mktemp -d "$CACHE/.download.XXXXXX")"
  trap 'rm -rf "$TMP"' EXIT
  "$PY" -m pip download -q --no-deps --only-binary=:all: "sglang==$VERSION" -d "$TMP" >&2
  mv "$TMP"/sglang-"$VERSION"-*.whl "$CACHE"/
  WHEEL="$(find_wheel)"
fi
echo "$WHEEL"
