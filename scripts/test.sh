#!/usr/bin/env bash
# Run the whole test suite: sets up what it needs (idempotent, cached), then pytest. Extra arguments go to pytest.
#   ./scripts/test.sh            everything (CI runs exactly this via .ci/run)
#   ./scripts/test.sh -k verify  a subset
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]' > .venv/pip-install.log 2>&1 \
  || { cat .venv/pip-install.log; exit 1; }

# Real SGLang 0.5.23 on CPU for the sglang-marked tests (cached under ~/.cache/kimi-serve; ~3 min cold).
if [ -z "${KIMI_SERVE_SGLANG_PYTHON:-}" ]; then
  KIMI_SERVE_SGLANG_PYTHON="$(scripts/build-cpu-venv.sh | tail -n 1)"
  export KIMI_SERVE_SGLANG_PYTHON
fi

# The pinned SGLang wheel the SM120 patch tests apply to (cached under ~/.cache/kimi-serve/wheels).
scripts/fetch-sglang-wheel.sh >/dev/null

exec .venv/bin/python -m pytest "$@"
