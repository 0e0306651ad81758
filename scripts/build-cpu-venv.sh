#!/usr/bin/env bash
# Build (or reuse) a CPU-only virtual environment holding the real SGLang 0.5.23 code, for tests and offline checks.
# Recipe: ../shared/reference/sglang-cpu-venv.md (no GPU, no stub modules). ~95 s cold, instant when cached.
# Usage: scripts/build-cpu-venv.sh [VENV_DIR]   (default: $KIMI_SERVE_SGLANG_VENV or ~/.cache/kimi-serve/sglang-0.5.23-cpu)
# Prints the venv's python path on the last line.
set -euo pipefail
SGLANG_VERSION=0.5.23
KEY="sglang-${SGLANG_VERSION}-torch-2.14.1-v1"
VENV="${1:-${KIMI_SERVE_SGLANG_VENV:-$HOME/.cache/kimi-serve/$KEY}}"
PY="${PYTHON:-python3}"

if [ -x "$VENV/bin/python" ] && [ -f "$VENV/.kimi-serve-ready" ] && [ "$(cat "$VENV/.kimi-serve-ready")" = "$KEY" ]; then
  echo "$VENV/bin/python"
  exit 0
fi
rm -rf "$VENV.tmp"
"$PY" -m venv "$VENV.tmp"
P="$VENV.tmp/bin/pip"
"$P" install -q --upgrade pip >&2
"$P" install -q torch==2.14.1 torchvision==0.29.1 >&2
"$P" install -q --no-deps "sglang==${SGLANG_VERSION}" >&2
"$P" install -q triton numpy psutil pybase64 pillow starlette fastapi uvicorn uvloop msgspec xxhash zstandard \
  requests packaging pyzmq tqdm ipython aiohttp openai xgrammar orjson partial_json_parser regex pydantic \
  'transformers==5.19.0' jsonschema einops dill sentencepiece gguf 'compressed-tensors==0.18.0' setproctitle \
  interegular blobfile prometheus-client python-multipart watchfiles tiktoken \
  typer pyyaml jinja2 >&2
# venvs are not relocatable: rebuild the scripts' shebangs by recreating in place is costly, so move then fix paths
rm -rf "$VENV"
mv "$VENV.tmp" "$VENV"
grep -rl "$VENV.tmp" "$VENV/bin" 2>/dev/null | xargs -r sed -i "s#$VENV.tmp#$VENV#g"
echo "$KEY" > "$VENV/.kimi-serve-ready"
echo "$VENV/bin/python"
