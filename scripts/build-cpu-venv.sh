#!/usr/bin/env bash
# Build (or reuse) the CPU engine venv: the real SGLang 0.5.23 code for tests, the quickstart and offline checks, from
# the committed CPU lock (kimi_serve/engine/lockfiles/cpu.txt, exact versions and hashes; docs/engine.md). It runs
# `kimi-serve engine install --lock cpu --no-patches` from .venv (set up from the dev lock by scripts/dev-venv.sh):
# uv when .venv has it (the dev lock pins it), else pip. Quiet: installer output is shown only on failure.
# The cache key is the lock's sha256, so a changed lock rebuilds; ~30 s with a cold uv cache, ~2 s warm.
# Usage: scripts/build-cpu-venv.sh [VENV_DIR]
#   (default: $KIMI_SERVE_SGLANG_VENV or ~/.cache/kimi-serve/sglang-0.5.23-cpu-<lock sha256, 12 digits>)
# Prints the venv's python path on the last line.
set -euo pipefail
cd "$(dirname "$0")/.."
LOCK=kimi_serve/engine/lockfiles/cpu.txt
HASH="$(sha256sum "$LOCK" | cut -d' ' -f1)"
VENV="${1:-${KIMI_SERVE_SGLANG_VENV:-$HOME/.cache/kimi-serve/sglang-0.5.23-cpu-${HASH:0:12}}}"
READY="$VENV/.kimi-serve-ready"

if [ -x "$VENV/bin/python" ] && [ "$(cat "$READY" 2>/dev/null)" = "$HASH" ]; then
  echo "$VENV/bin/python"
  exit 0
fi
scripts/dev-venv.sh
LOG="$(mktemp)"
# the install takes kimi-serve's host lock under the state root: keep it in the user's cache unless one is set
export KIMI_SERVE_STATE_DIR="${KIMI_SERVE_STATE_DIR:-$HOME/.cache/kimi-serve/state}"
trap 'rm -f "$LOG"' EXIT
# another install on this host holds the install lock (exit 75): wait for it, up to 30 min
for _ in $(seq 360); do
  rc=0
  .venv/bin/kimi-serve engine install --lock cpu --no-patches --prefix "$VENV" --quiet > "$LOG" 2>&1 || rc=$?
  [ "$rc" -eq 75 ] || break
  sleep 5
done
if [ "$rc" -ne 0 ]; then
  cat "$LOG" >&2
  exit 1
fi
# nothing may conflict: every pin sglang declares holds, only the GPU-only kernels the lock leaves out are absent
if ! .venv/bin/kimi-serve engine status --prefix "$VENV" > "$LOG" 2>&1; then
  cat "$LOG" >&2
  exit 1
fi
echo "$HASH" > "$READY"
echo "$VENV/bin/python"
