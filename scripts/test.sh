#!/usr/bin/env bash
# Run the whole test suite: sets up what it needs (idempotent, cached), then pytest. Extra arguments go to pytest.
#   ./scripts/test.sh            everything (CI runs exactly this via .ci/run)
#   ./scripts/test.sh -k verify  a subset
set -euo pipefail
cd "$(dirname "$0")/.."

# kimi-serve and its test tools in .venv, from the dev lock (requirements/dev.txt; a no-op when up to date).
scripts/dev-venv.sh

# Real SGLang 0.5.23 on CPU for the sglang-marked tests, from the CPU lock (cached under ~/.cache/kimi-serve, keyed
# on the lock's hash; ~30 s cold with uv).
if [ -z "${KIMI_SERVE_SGLANG_PYTHON:-}" ]; then
  KIMI_SERVE_SGLANG_PYTHON="$(scripts/build-cpu-venv.sh | tail -n 1)"
  export KIMI_SERVE_SGLANG_PYTHON
fi

# The pinned SGLang wheel the SM120 patch tests apply to (cached under ~/.cache/kimi-serve/wheels).
scripts/fetch-sglang-wheel.sh >/dev/null

exec .venv/bin/python -m pytest "$@"
