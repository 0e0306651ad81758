#!/usr/bin/env bash
# Build (once, cached) the real agent clients the client tier drives, from their committed locks, and print the
# folder on the last line:
#   FOLDER/venv            the Python clients (openai, openai-agents, pydantic-ai, langchain-openai) from
#                          requirements/clients.txt (hashes; a venv of their own, so their pins never touch .venv)
#   FOLDER/kimi-cli        Moonshot's kimi-cli from requirements/kimi-cli.txt (hashes), in a venv of its own on CPython
#                          3.12+ (kimi-cli needs it): $KIMI_CLI_PYTHON, else pyenv's versions folder (3.13, then 3.12),
#                          else python3.13/python3.12 on PATH; the first whose venv imports kimi-cli (3.12.1 does
#                          not). With none, FOLDER/kimi-cli.missing says why: the tier skips with that line (a failure
#                          under KIMI_SERVE_NO_SKIP=1, as in CI), and the next build looks again.
#   FOLDER/node_modules    the AI SDK with @ai-sdk/openai-compatible, and opencode, from tests/clients/package-lock.json
#                          (integrity hashes; install scripts off: opencode's binary comes as an optional
#                          dependency of its platform)
# Cached under ~/.cache/kimi-serve (or $XDG_CACHE_HOME), keyed on both locks; built beside and renamed into place, so
# a killed build leaves no half folder that counts. Needs python3 (3.11+) and node/npm (Node 20+).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
PY_LOCK=requirements/clients.txt
KIMI_LOCK=requirements/kimi-cli.txt
NPM_DIR=tests/clients
KEY="$(cat "$PY_LOCK" "$KIMI_LOCK" "$NPM_DIR/package.json" "$NPM_DIR/package-lock.json" | sha256sum | cut -c1-16)"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/kimi-serve"
OUT="$CACHE/clients-$KEY"

kimi_pythons() {  # candidate interpreters for kimi-cli, best first: CPython 3.12 or newer
  local c pyenv="${PYENV_ROOT:-$HOME/.pyenv}/versions"
  for c in "${KIMI_CLI_PYTHON:-}" \
    $(ls -d "$pyenv"/3.13*/bin/python3 "$pyenv"/3.12*/bin/python3 2>/dev/null | sort -rV) \
    "$(command -v python3.13 || true)" "$(command -v python3.12 || true)"; do
    [ -n "$c" ] && [ -x "$c" ] && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null && echo "$c"
  done
  return 0
}

if [ -x "$OUT/venv/bin/python" ] && [ -d "$OUT/node_modules" ] && [ -f "$OUT/.complete" ]; then
  if [ ! -f "$OUT/kimi-cli.missing" ] || [ -z "$(kimi_pythons)" ]; then echo "$OUT"; exit 0; fi
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
  missing="no CPython 3.12+ found for kimi-cli (fix: pyenv install 3.13, or set KIMI_CLI_PYTHON=PATH)"
  for py in $(kimi_pythons); do
    rm -rf "$TMP/kimi-cli"
    if [ -x "$UV" ]; then
      "$UV" venv --quiet --python "$py" "$TMP/kimi-cli"
      # bytecode now, once: not in each of the tier's concurrent first runs
      VIRTUAL_ENV="$TMP/kimi-cli" "$UV" pip install --quiet --require-hashes --no-deps --compile-bytecode \
        -r "$KIMI_LOCK"
    else
      "$py" -m venv "$TMP/kimi-cli"
      "$TMP/kimi-cli/bin/python" -m pip install --disable-pip-version-check --quiet --require-hashes --no-deps \
        -r "$KIMI_LOCK"
    fi
    # kimi-cli's own start-up imports, not just the package (on CPython 3.12.1 they raise TypeError)
    if "$TMP/kimi-cli/bin/python" -c 'import kimi_cli.app' >/dev/null 2>&1; then missing=""; break; fi
    missing="kimi-cli does not start on the CPython 3.12+ found ($(kimi_pythons | tr '\n' ' '));"
    missing="$missing fix: pyenv install 3.13, or set KIMI_CLI_PYTHON=PATH"
  done
  if [ -n "$missing" ]; then rm -rf "$TMP/kimi-cli"; echo "$missing" > "$TMP/kimi-cli.missing"; fi
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
