#!/usr/bin/env bash
# One command from a fresh clone to a contract-checked server: installs kimi-serve into .venv (dev lock), builds (or
# reuses) the CPU SGLang 0.5.23 engine from its lock, then runs every check of the production profile and its contract
# dry run: SGLang's own serving layer and kimi_k2 parsers, started with prod's exact flags on the simulator, must
# return structured tool_calls and reasoning_content. The engine carries prod's own patch sets
# (scripts/build-cpu-venv.sh), so the dry run serves what prod serves. When the check passes, it prints the next steps
# (scripts/next-steps.sh): kimi-serve on PATH, the engine exported, `up --profile sim`, `verify --host`.
# Usage: ./scripts/quickstart.sh [PROFILE]   (default: prod)
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE="${1:-prod}"
echo "== kimi-serve in .venv, from the dev lock (requirements/dev.txt)" >&2
scripts/dev-venv.sh
echo "== CPU SGLang 0.5.23 engine from the CPU lock (cached after the first run; ~30 s cold, needs PyPI)" >&2
KIMI_SERVE_SGLANG_PYTHON="${KIMI_SERVE_SGLANG_PYTHON:-$(scripts/build-cpu-venv.sh | tail -n 1)}"
export KIMI_SERVE_SGLANG_PYTHON
scripts/fetch-sglang-wheel.sh >/dev/null 2>&1 || echo "(pinned wheel not fetched: the patch check will warn)" >&2
echo "== kimi-serve check --profile $PROFILE --offline --contract" >&2
rc=0
.venv/bin/kimi-serve check --profile "$PROFILE" --offline --contract || rc=$?
if [ "$rc" -eq 0 ]; then
  echo >&2
  scripts/next-steps.sh "$KIMI_SERVE_SGLANG_PYTHON"
fi
exit "$rc"
