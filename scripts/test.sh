#!/usr/bin/env bash
# Run the test suite: sets up what it needs (idempotent, cached), then pytest in parallel (pytest-xdist).
#   ./scripts/test.sh                  everything (CI runs exactly this via .ci/run)
#   ./scripts/test.sh --fast           the fast tier: no SGLang process, no container, no engine install, no
#                                      kill-at-every-checkpoint loop (under 2 min)
#   ./scripts/test.sh --tier sglang    one tier (sglang, systemd, engine, crash; docs/testing.md)
#   ./scripts/test.sh -k verify        a subset; any other argument goes to pytest
#   KIMI_SERVE_TEST_WORKERS=N          xdist workers (default: docs/testing.md; 0 = no xdist, one process)
set -euo pipefail
cd "$(dirname "$0")/.."

marks=()
fast=0
while [ $# -gt 0 ]; do
  case "$1" in
    --fast) fast=1; marks=(-m "not sglang and not systemd and not engine and not crash"); shift ;;
    --tier) [ $# -ge 2 ] || { echo "scripts/test.sh: --tier needs a name (sglang, systemd, engine, crash)" >&2; exit 2; }
            case "$2" in sglang|systemd|engine|crash) ;; *) echo "scripts/test.sh: unknown tier '$2' (sglang, systemd, engine, crash)" >&2; exit 2 ;; esac
            marks=(-m "$2"); shift 2 ;;
    *) break ;;
  esac
done

# kimi-serve and its test tools in .venv, from the dev lock (requirements/dev.txt; a no-op when up to date).
scripts/dev-venv.sh

# kimi-serve's own bytecode, once (a no-op when current): the CLI subprocesses the tests start read it instead of
# compiling kimi-serve from source each time, also where PYTHONDONTWRITEBYTECODE is set (docs/testing.md).
.venv/bin/python -m compileall -q kimi_serve >/dev/null

# Real SGLang 0.5.23 on CPU for the sglang tier, from the CPU lock (cached under ~/.cache/kimi-serve, keyed on the
# lock's hash; ~30 s cold with uv). The fast tier never starts it, so it is not built for --fast.
if [ "$fast" = 0 ] && [ -z "${KIMI_SERVE_SGLANG_PYTHON:-}" ]; then
  KIMI_SERVE_SGLANG_PYTHON="$(scripts/build-cpu-venv.sh | tail -n 1)"
  export KIMI_SERVE_SGLANG_PYTHON
fi

# The real agent clients of the client tier (tests/test_agent_clients.py), from their locks (requirements/clients.txt,
# tests/clients/package-lock.json; cached under ~/.cache/kimi-serve, ~30 s cold). Not for --fast: the tier needs SGLang.
if [ "$fast" = 0 ] && [ -z "${KIMI_SERVE_CLIENTS_DIR:-}" ]; then
  KIMI_SERVE_CLIENTS_DIR="$(scripts/build-client-env.sh | tail -n 1)"
  export KIMI_SERVE_CLIENTS_DIR
fi

# The pinned SGLang wheel the SM120 patch tests apply to (cached under ~/.cache/kimi-serve/wheels).
scripts/fetch-sglang-wheel.sh >/dev/null

# Workers: the suite mostly waits (servers starting, timeouts, kill points), so more workers than cores pay off;
# the SGLang imports are CPU-bound, so not many more. The scheduler (tests/conftest.py) keeps modules, the systemd
# sandbox and the simulator pool each on one worker; in collection order (the systemd tier, the longest unit,
# first), not xdist's largest-count-first.
workers="${KIMI_SERVE_TEST_WORKERS:-4}"
xdist=()
if [ "$workers" != 0 ]; then
  xdist=(-n "$workers" --dist loadscope --no-loadscope-reorder)
fi

exec .venv/bin/python -m pytest "${xdist[@]}" "${marks[@]}" "$@"
