#!/usr/bin/env bash
# Build (or reuse) the CPU engine venv: the real SGLang 0.5.23 code for tests, the quickstart and offline checks, from
# the committed CPU lock (kimi_serve/engine/lockfiles/cpu.txt, exact versions and hashes; docs/engine.md). It runs
# `kimi-serve engine install --lock cpu` from .venv (set up from the dev lock by scripts/dev-venv.sh) with prod's
# profile and so prod's own patch sets (sglang-0.5.23-sm120 and sglang-0.5.23-kimi): uv when .venv has it (the dev lock
# pins it), else pip. The
# install applies them with kimi-serve's own patch machinery, as on the GPU host, so the quickstart's contract dry
# run serves what prod serves (/server_info redacts the keys, patch 0007; the kimi_k2 parser fixes). Tests that need
# SGLang 0.5.23's own, unpatched sglang (the faults verify and the traffic counter must detect) get a scratch copy
# with the sets reverted, a fixture (tests/conftest.py `stock_sglang_site`).
# It links the base Python and leaves kimi-serve itself out (--interpreter link --no-kimi-serve): every user of this
# engine puts this checkout's kimi_serve on its PYTHONPATH, so the tests run the code under test, never a copy frozen
# when the cache was built (the engine tier and the systemd tier install the full layout themselves).
# Quiet: installer output is shown only on failure.
# The cache key is the sha256 of the lock and prod's patch sets (manifests and patches), so a changed lock or patch
# set rebuilds (and an engine built with another set of patches is never reused); ~30 s with a cold uv cache.
# Usage: scripts/build-cpu-venv.sh [VENV_DIR]
#   (default: $KIMI_SERVE_SGLANG_VENV or ~/.cache/kimi-serve/sglang-0.5.23-cpu-<cache key, 12 digits>)
# Prints the venv's python path on the last line.
set -euo pipefail
cd "$(dirname "$0")/.."
LOCK=kimi_serve/engine/lockfiles/cpu.txt
PATCH_SETS="patches/sglang-0.5.23 patches/sglang-0.5.23-kimi"
HASH="$( (sha256sum "$LOCK"; for set in $PATCH_SETS; do (cd "$set" && sha256sum manifest.json ./*.patch); done) \
  | sha256sum | cut -d' ' -f1)"
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
  .venv/bin/kimi-serve engine install --lock cpu --profile prod --prefix "$VENV" --interpreter link \
    --no-kimi-serve --quiet > "$LOG" 2>&1 || rc=$?
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
