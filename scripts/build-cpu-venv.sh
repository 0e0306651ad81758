#!/usr/bin/env bash
# Build (or reuse) the CPU engine venv: the real SGLang 0.5.23 code for tests, the quickstart and offline checks, from
# the committed CPU lock (kimi_serve/engine/lockfiles/cpu.txt, exact versions and hashes; docs/engine.md). It runs
# `kimi-serve engine install --lock cpu` from .venv (set up from the dev lock by scripts/dev-venv.sh) with prod's
# profile but only its SM120 set (sglang-0.5.23-sm120): uv when .venv has it (the dev lock pins it), else pip. The
# install applies that set with kimi-serve's own patch machinery, as on the GPU host (its /server_info redacts the
# keys, patch 0007), so the quickstart's first verify shows no key leak. Prod's Kimi set (sglang-0.5.23-kimi, the
# parser fixes) is left off on purpose: this engine shows SGLang 0.5.23's own kimi_k2 parser, whose faults verify
# and the traffic counter must detect (the Kimi set is proven on scratch copies, tests/test_patches_sglang.py).
# It links the base Python and leaves kimi-serve itself out (--interpreter link --no-kimi-serve): every user of this
# engine puts this checkout's kimi_serve on its PYTHONPATH, so the tests run the code under test, never a copy frozen
# when the cache was built (the engine tier and the systemd tier install the full layout themselves).
# Quiet: installer output is shown only on failure.
# The cache key is the sha256 of the lock and the patch set (manifest and patches), so a changed lock or patch set
# rebuilds (and an engine built before the CPU venv was patched is never reused); ~30 s with a cold uv cache.
# Usage: scripts/build-cpu-venv.sh [VENV_DIR]
#   (default: $KIMI_SERVE_SGLANG_VENV or ~/.cache/kimi-serve/sglang-0.5.23-cpu-<cache key, 12 digits>)
# Prints the venv's python path on the last line.
set -euo pipefail
cd "$(dirname "$0")/.."
LOCK=kimi_serve/engine/lockfiles/cpu.txt
PATCHES=patches/sglang-0.5.23
HASH="$( (sha256sum "$LOCK"; cd "$PATCHES" && sha256sum manifest.json ./*.patch) | sha256sum | cut -d' ' -f1)"
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
PROFILE="$(mktemp --suffix=.yaml)"
printf 'extends: prod\npatch_set: sglang-0.5.23-sm120\n' > "$PROFILE"
trap 'rm -f "$LOG" "$PROFILE"' EXIT
# another install on this host holds the install lock (exit 75): wait for it, up to 30 min
for _ in $(seq 360); do
  rc=0
  .venv/bin/kimi-serve engine install --lock cpu --profile "$PROFILE" --prefix "$VENV" --interpreter link \
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
