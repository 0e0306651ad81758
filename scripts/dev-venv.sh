#!/usr/bin/env bash
# Create or update .venv, kimi-serve's dev/test venv, from the dev lock (requirements/dev.txt: runtime deps, the
# [test] extra and uv, exact versions with hashes), then install kimi-serve itself editable. Quiet; the log is shown
# only on failure. A no-op when .venv already matches the lock. Regenerate the lock with scripts/lock.py.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
LOCK=requirements/dev.txt
KEY="$(cat "$LOCK" pyproject.toml | sha256sum | cut -c1-16)"
STAMP=.venv/.kimi-serve-dev-lock
if [ -x .venv/bin/python ] && [ -x .venv/bin/kimi-serve ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$KEY" ]; then
  exit 0
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
LOG=.venv/install.log
{
  .venv/bin/python -m pip install --disable-pip-version-check --no-deps --require-hashes -r "$LOCK"
  .venv/bin/python -m pip install --disable-pip-version-check --no-deps --no-build-isolation -e .
} > "$LOG" 2>&1 || { cat "$LOG" >&2; echo "scripts/dev-venv.sh: installing .venv from $LOCK failed (log above)" >&2; exit 1; }
echo "$KEY" > "$STAMP"
