#!/usr/bin/env bash
# Build (once, cached) the real agent clients the client tier drives, from their committed locks, and print the
# folder on the last line:
#   FOLDER/venv            the Python clients (openai, openai-agents, pydantic-ai, langchain-openai) from
#                          requirements/clients.txt (hashes; a venv of their own, so their pins never touch .venv)
#   FOLDER/node_modules    the AI SDK with @ai-sdk/openai-compatible, and opencode, from tests/clients/package-lock.json
#                          (integrity hashes; install scripts off: opencode's binary comes as an optional
#                          dependency of its platform)
# Cached under ~/.cache/kimi-serve (or $XDG_CACHE_HOME), keyed on both locks; built beside and renamed into place, so
# a killed build leaves no half folder that counts. Needs python3 (3.11+) and node/npm (Node 20+).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
PY_LOCK=requirements/clients.txt
NPM_DIR=tests/clients
KEY="$(cat "$PY_LOCK" "$NPM_DIR/package.json" "$NPM_DIR/package-lock.json" | sha256sum | cut -c1-16)"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/kimi-serve"
OUT="$CACHE/clients-$KEY"
if [ -x "$OUT/venv/bin/python" ] && [ -d "$OUT/node_modules" ] && [ -f "$OUT/.complete" ]; then
  echo "$OUT"; exit 0
fi
command -v npm >/dev/null || { echo "scripts/build-client-env.sh: npm not found (fix: apt-get install nodejs npm; Node 20+)" >&2; exit 1; }
mkdir -p "$CACHE"
TMP="$(mktemp -d "$CACHE/.clients-$KEY.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
LOG="$TMP/build.log"
UV="${UV:-$REPO/.venv/bin/uv}"
{
  if [ -x "$UV" ]; then
    "$UV" venv --quiet --python "${PYTHON:-python3}" "$TMP/venv"
    VIRTUAL_ENV="$TMP/venv" "$UV" pip install --quiet --require-hashes --no-deps -r "$PY_LOCK"
  else
    "${PYTHON:-python3}" -m venv "$TMP/venv"
    "$TMP/venv/bin/python" -m pip install --disable-pip-version-check --quiet --require-hashes --no-deps -r "$PY_LOCK"
  fi
  cp "$NPM_DIR/package.json" "$NPM_DIR/package-lock.json" "$TMP/"
  # npm ci refuses this lock: npm drops the other platforms' optional packages from it (opencode-darwin-*, ...);
  # npm install keeps every locked package and its integrity, and adds only this platform's exact-pinned one.
  (cd "$TMP" && npm install --ignore-scripts --no-audit --no-fund --loglevel=error)
} > "$LOG" 2>&1 || { cat "$LOG" >&2; echo "scripts/build-client-env.sh: installing the clients failed (log above)" >&2; exit 1; }
touch "$TMP/.complete"
rm -rf "$OUT"
mv "$TMP" "$OUT"
trap - EXIT
echo "$OUT"
