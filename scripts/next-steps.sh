#!/usr/bin/env bash
# Print what to run after scripts/quickstart.sh, each line a shell command that runs as printed on this machine:
# kimi-serve on PATH, the engine it found pointed at explicitly (up, doctor, check and patches read
# $KIMI_SERVE_SGLANG_PYTHON; nothing guesses it from a cache folder), then a simulated server with prod's flags and
# the contract check against it, its status, and a chat with it where this kimi-serve has `chat`.
# tests/test_quickstart_next_steps.py runs every printed command as printed.
# Usage: scripts/next-steps.sh ENGINE_PYTHON
set -euo pipefail
cd "$(dirname "$0")/.."
ENGINE="${1:?usage: scripts/next-steps.sh ENGINE_PYTHON}"
BIN="$(pwd)/.venv/bin"
# where `up --profile sim` listens, from the profile itself (host:port as a client reaches it)
ADDRESS="$("$BIN/python" -c 'from kimi_serve.core.net import connect_host
from kimi_serve.profile.loader import load_profile
p = load_profile("sim")
print(f"{connect_host(p.server.host)}:{p.server.port}")')"
cat <<EOF
# next steps: each line runs as printed (a second shell needs the two exports too)
export PATH=$(printf '%q' "$BIN"):"\$PATH"
export KIMI_SERVE_SGLANG_PYTHON=$(printf '%q' "$ENGINE")
kimi-serve up --profile sim  # prod's flags on the simulator at $ADDRESS; Ctrl-C stops it
kimi-serve verify --host $ADDRESS  # in a second shell: the contract check against that server
kimi-serve status --profile sim  # what that \`up\` runs now, its /health (exit 0: serving)
EOF
if "$BIN/kimi-serve" chat --help >/dev/null 2>&1; then
  echo "kimi-serve chat --host $ADDRESS 'What is the weather in Paris?'  # one prompt, streamed"
fi
