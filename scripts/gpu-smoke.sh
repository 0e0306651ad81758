#!/usr/bin/env bash
# The GPU smoke test for a lent GPU machine (docs/testing.md "The GPU smoke script"). Run from anywhere:
#     scripts/gpu-smoke.sh            # results under $OUT (the device tool's folder) or ./gpu-smoke-out
# Budget: under 8 minutes on one H100/H200 with 16 cores. It never edits the repository; its state lives in a
# temporary folder ($GPU_SMOKE_WORK to reuse one, e.g. a warm engine between runs).
#
# Steps, each one line in $OUT/summary.txt (ok / FAIL / SKIP / NOTE):
#   1. the host: nvidia-smi (GPUs, compute capability, driver), the toolchain the JIT compilers look for;
#   2. kimi-serve itself (.venv from scripts/dev-venv.sh, or $KIMI_SERVE);
#   3. the engine from the GPU lock with the product's own `kimi-serve engine install --lock gpu` (prod's patch
#      sets applied), or $ENGINE_PYTHON to reuse an installed engine (said so: then the lock is not proven);
#   4. the collective self-test (docs/up.md) at TP = the GPUs seen (1 on a one-GPU machine), through the product's
#      own code, in that engine;
#   5. real SGLang on a tiny Kimi-shaped model (DeepseekV3 MLA + MoE, K2.5's INT4 experts config, dummy weights),
#      EAGLE-3 (steps 3, topk 1, 4 draft tokens) and the kimi_k2 parsers; the startup metrics;
#   6. `kimi-serve verify --suite quick` against it (random weights: contract findings are expected, a crash is not);
#   7. what this machine can and cannot prove, printed plainly.
# Exit status: 0 every step ran (verify's findings on random weights do not count), 1 a step failed, 5 the machine
# cannot run it (no GPU, no package index for the install, no Python 3.11).
set -uo pipefail

T0=$(date +%s)
cd "$(dirname "$0")/.." || exit 5
REPO=$(pwd)
OUT=${OUT:-$REPO/gpu-smoke-out}
WORK=${GPU_SMOKE_WORK:-$(mktemp -d /tmp/kimi-gpu-smoke.XXXXXX)}
PORT=${GPU_SMOKE_PORT:-30123}
BUDGET=${GPU_SMOKE_BUDGET:-420}   # seconds; optional steps are skipped past it (the whole run must stay under 480)
INDEX=${UV_INDEX_URL:-${PIP_INDEX_URL:-https://pypi.org/simple}}
mkdir -p "$OUT" "$WORK"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
FAILED=0
SPID=""

elapsed() { echo $(( $(date +%s) - T0 )); }
say() { echo "[$(elapsed)s] $*" | tee -a "$SUMMARY"; }
ok() { say "ok    $*"; }
fail() { say "FAIL  $*"; FAILED=1; }
skip() { say "SKIP  $*"; }
cannot() { say "FAIL  $* (this machine cannot run the smoke test)"; finish 5; }
time_left() { [ "$(elapsed)" -lt "$BUDGET" ]; }

stop_server() {  # SIGTERM to SGLang's main PID (it takes its schedulers down), SIGKILL to its group after 30 s
  [ -n "$SPID" ] || return 0
  kill -TERM "$SPID" 2>/dev/null
  for _ in $(seq 30); do kill -0 "$SPID" 2>/dev/null || break; sleep 1; done
  kill -KILL -- "-$SPID" 2>/dev/null
  wait "$SPID" 2>/dev/null
  SPID=""
}

finish() {
  stop_server
  say "done in $(elapsed)s, exit $1; files in $OUT"
  exit "$1"
}
trap 'stop_server' EXIT
trap 'say "interrupted"; finish 130' INT TERM

say "gpu-smoke: repo $REPO ($(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo 'no git')), work $WORK"

# ---- 1. the host ------------------------------------------------------------------------------------------------
command -v nvidia-smi >/dev/null || cannot "no nvidia-smi: no NVIDIA GPU or driver here"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || cannot "nvidia-smi fails (see nvidia-smi.txt)"
nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.total --format=csv,noheader \
  > "$OUT/gpus.csv" 2>&1
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1 || true
NGPU=$(grep -c . "$OUT/gpus.csv")
CAP=$(head -n1 "$OUT/gpus.csv" | cut -d, -f3 | tr -d ' ')
DRIVER=$(head -n1 "$OUT/gpus.csv" | cut -d, -f4 | tr -d ' ')
ok "$NGPU GPU(s): $(head -n1 "$OUT/gpus.csv" | cut -d, -f2 | sed 's/^ //'), compute capability $CAP, driver $DRIVER"
if [ "${DRIVER%%.*}" -lt 580 ] 2>/dev/null; then
  fail "driver $DRIVER: the GPU lock's torch (cu130) needs the R580 series or newer"
fi
for tool in nvcc c++ cc; do say "NOTE  toolchain: $tool $(command -v "$tool" || echo 'not on PATH')"; done
say "NOTE  CUDA_HOME=${CUDA_HOME:-unset}; /usr/local/cuda $([ -d /usr/local/cuda ] && echo present || echo absent)"

# ---- 2. kimi-serve ------------------------------------------------------------------------------------------
index_reachable() {  # the package index the installers use, within 10 s
  python3 - "$INDEX" <<'EOF' >/dev/null 2>&1
import sys, urllib.request
urllib.request.urlopen(sys.argv[1].rstrip("/") + "/pip/", timeout=10).read(1)
EOF
}
KS=${KIMI_SERVE:-$REPO/.venv/bin/kimi-serve}
if [ ! -x "$KS" ]; then
  index_reachable || cannot "no kimi-serve at $KS and the package index $INDEX is out of reach: carry .venv or set KIMI_SERVE"
  timeout 240 scripts/dev-venv.sh > "$OUT/dev-venv.log" 2>&1 || cannot "scripts/dev-venv.sh failed (dev-venv.log)"
fi
KSPY=$(dirname "$KS")/python
"$KS" --version > "$OUT/kimi-serve-version.txt" 2>&1 || cannot "$KS does not run"
ok "kimi-serve $(cat "$OUT/kimi-serve-version.txt")"

# ---- 3. the engine from the GPU lock --------------------------------------------------------------------------
if [ -n "${ENGINE_PYTHON:-}" ]; then
  PYE=$ENGINE_PYTHON
  "$PYE" -c 'import sglang' 2>/dev/null || cannot "ENGINE_PYTHON=$PYE has no sglang"
  say "NOTE  engine: reused $PYE (ENGINE_PYTHON): the GPU lock's install is NOT proven by this run"
else
  PY311=""
  for p in python3.11 python3; do
    if command -v "$p" >/dev/null && [ "$("$p" -c 'import sys; print(sys.version_info[:2] == (3, 11))')" = True ]; then
      PY311=$(command -v "$p"); break
    fi
  done
  [ -n "$PY311" ] || cannot "no CPython 3.11 on PATH: the GPU lock targets 3.11"
  index_reachable || cannot "the package index $INDEX is out of reach: the GPU lock installs only from it (pinned \
hashes, no other source); set ENGINE_PYTHON to an installed engine to run the other steps"
  t=$(date +%s)
  export UV_CACHE_DIR="$WORK/uv-cache"
  if timeout 330 "$KS" engine install --lock gpu --prefix "$WORK/engine" --profile prod --interpreter link \
      --python "$PY311" --quiet --json > "$OUT/engine-install.json" 2> "$OUT/engine-install.err"; then
    ok "engine install --lock gpu (prod's patch sets applied) in $(( $(date +%s) - t ))s"
  else
    fail "engine install --lock gpu exited $? after $(( $(date +%s) - t ))s: $(tail -n1 "$OUT/engine-install.err")"
    finish 1
  fi
  PYE=$WORK/engine/bin/python
  timeout 60 "$KS" engine status --prefix "$WORK/engine" --json > "$OUT/engine-status.json" 2>&1
  say "NOTE  engine status exited $? (engine-status.json)"
fi
timeout 180 "$PYE" - > "$OUT/engine-facts.txt" 2>&1 <<'EOF'
import importlib, os, shutil, site
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())
print("capability", torch.cuda.get_device_capability(0))
x = torch.randn(512, 512, device="cuda")
print("matmul", bool(torch.isfinite(x @ x).all()))
for name in ("sglang", "sgl_kernel", "flashinfer", "triton", "xgrammar"):
    try:
        print("import", name, getattr(importlib.import_module(name), "__version__", "?"))
    except Exception as exc:  # noqa: BLE001
        print("import", name, "FAILED", type(exc).__name__, str(exc)[:200])
nvcc = os.path.join(site.getsitepackages()[0], "nvidia", "cu13", "bin", "nvcc")
print("nvcc: CUDA_HOME", os.environ.get("CUDA_HOME"), "PATH", shutil.which("nvcc"), "lock's", os.path.exists(nvcc))
EOF
rc=$?
if [ "$rc" -eq 0 ] && ! grep -q FAILED "$OUT/engine-facts.txt"; then
  ok "engine imports and a CUDA matmul: $(head -n1 "$OUT/engine-facts.txt")"
else
  fail "engine facts (exit $rc): $(grep -m1 -E 'FAILED|Error' "$OUT/engine-facts.txt")"
fi

# ---- 4. the collective self-test ----------------------------------------------------------------------------
case "$NGPU" in 1|2|4|8) TP=$NGPU ;; *) TP=1 ;; esac
cat > "$WORK/selftest.yaml" <<EOF
extends: prod
python: $PYE
gpus: $TP
parallel: {tp_size: $TP}
EOF
timeout 360 "$KSPY" - "$WORK/selftest.yaml" > "$OUT/selftest.txt" 2>&1 <<'EOF'
import sys
from kimi_serve.check.launch import validated_launch
from kimi_serve.profile.loader import load_profile
from kimi_serve.up.selftest import selftest

profile = load_profile(sys.argv[1])
found = selftest(profile, validated_launch(profile), 300.0)
for f in found:
    print(f.status, f.line())
sys.exit(1 if any(f.status == "fail" for f in found) else 0)
EOF
rc=$?
if [ "$rc" -eq 0 ]; then ok "collective self-test at TP $TP: $(head -n1 "$OUT/selftest.txt")"
else fail "collective self-test at TP $TP (exit $rc): $(head -n1 "$OUT/selftest.txt")"; fi

# ---- 5. real SGLang on a tiny Kimi-shaped model -------------------------------------------------------------
MODEL=$WORK/tiny-kimi
DRAFT=$WORK/tiny-eagle3
timeout 120 env PYTHONPATH="$REPO" "$PYE" - "$MODEL" "$DRAFT" > "$OUT/model.txt" 2>&1 <<'EOF'
import json, pathlib, sys
from kimi_serve.core.resources import package_root
from kimi_serve.simulator.tokenizer import build_standin

model, draft = (pathlib.Path(p) for p in sys.argv[1:3])
assets = package_root() / "kimi_serve" / "simulator" / "assets"
cfg = dict(json.loads((assets / "kimi-k25" / "config.json").read_text())["text_config"])  # MLA dims, INT4 experts
cfg.update(architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3", num_hidden_layers=4, hidden_size=2048,
           intermediate_size=4096, moe_intermediate_size=256, n_routed_experts=16, num_experts_per_tok=4,
           num_attention_heads=16, num_key_value_heads=16, first_k_dense_replace=1, torch_dtype="bfloat16")
model.mkdir(parents=True, exist_ok=True)
(model / "config.json").write_text(json.dumps(cfg, indent=1))
(model / "generation_config.json").write_text(json.dumps({"bos_token_id": 163584, "eos_token_id": 163586}))
build_standin().save_pretrained(str(model))
dcfg = json.loads((assets / "eagle3" / "config.json").read_text())
dcfg.update(hidden_size=2048, intermediate_size=4096, num_attention_heads=16, num_key_value_heads=4,
            draft_vocab_size=163840)
draft.mkdir(parents=True, exist_ok=True)
(draft / "config.json").write_text(json.dumps(dcfg, indent=1))
print("model", cfg["architectures"], "quantization", cfg.get("quantization_config", {}).get("quant_method"))
EOF
rc=$?
if [ "$rc" -eq 0 ]; then ok "tiny model: $(tail -n1 "$OUT/model.txt")"; else fail "tiny model (exit $rc, model.txt)"; finish 1; fi

start_server() {  # $1: a tag; the server's log and command line go to $OUT/server-TAG.*
  local tag=$1 log="$OUT/server-$1.log" code=000 t
  local args=(-P -m sglang.launch_server --model-path "$MODEL" --load-format dummy --served-model-name kimi-k2.5
    --trust-remote-code --tp-size 1 --context-length 8192 --mem-fraction-static 0.6 --max-running-requests 8
    --chunked-prefill-size 2048 --cuda-graph-max-bs-decode 8
    --speculative-algorithm EAGLE3 --speculative-draft-model-path "$DRAFT" --speculative-draft-load-format dummy
    --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4
    --tool-call-parser kimi_k2 --reasoning-parser kimi_k2 --enable-metrics --watchdog-timeout 300
    --host 127.0.0.1 --port "$PORT" --log-level info)
  echo "$PYE ${args[*]}" > "$OUT/server-$tag.cmd"
  mkdir -p "$WORK/cache" "$WORK/home"
  t=$(date +%s)
  HOME="$WORK/home" XDG_CACHE_HOME="$WORK/cache" SGLANG_CACHE_DIR="$WORK/cache/sglang" \
    TRITON_CACHE_DIR="$WORK/cache/triton" PYTHONUNBUFFERED=1 setsid "$PYE" "${args[@]}" > "$log" 2>&1 &
  SPID=$!
  while kill -0 "$SPID" 2>/dev/null && [ $(( $(date +%s) - t )) -lt 240 ]; do
    code=$(curl -s -o /dev/null -w '%{http_code}' -m 5 "http://127.0.0.1:$PORT/health" || true)
    [ "$code" = 200 ] && break
    sleep 2
  done
  STARTUP_S=$(( $(date +%s) - t ))
  [ "$code" = 200 ] && return 0
  grep -E 'Error|Traceback|error:' "$log" | tail -n 5 > "$OUT/server-$tag.errors.txt"
  return 1
}

if start_server int4-eagle3; then
  TAG=int4-eagle3
  ok "SGLang healthy after ${STARTUP_S}s (INT4 MoE experts, EAGLE-3 3/1/4, kimi_k2 parsers)"
else
  fail "SGLang (INT4 experts) not healthy after ${STARTUP_S}s: $(head -n1 "$OUT/server-int4-eagle3.errors.txt")"
  stop_server
  TAG=""
  if time_left; then  # tell the INT4 MoE path apart from the rest: the same model without its quantization
    "$PYE" -c 'import json, sys; p = sys.argv[1] + "/config.json"; c = json.load(open(p))
c.pop("quantization_config", None); json.dump(c, open(p, "w"))' "$MODEL"
    if start_server bf16-eagle3; then TAG=bf16-eagle3; ok "SGLang healthy without INT4 after ${STARTUP_S}s"
    else fail "SGLang (bf16) not healthy either: $(head -n1 "$OUT/server-bf16-eagle3.errors.txt")"; fi
  else
    skip "bf16 retry: out of time"
  fi
fi

if [ -n "$TAG" ]; then
  curl -s -m 10 "http://127.0.0.1:$PORT/metrics" > "$OUT/metrics.txt"
  grep -E '^sglang:(startup|weight_memory|kv_cache_memory|max_total_num_tokens|spec_)' "$OUT/metrics.txt" \
    > "$OUT/startup-metrics.txt"
  grep -E 'Load weight end|Capture cuda graph end|KV Cache is allocated|max_total_num_tokens|Application startup' \
    "$OUT/server-$TAG.log" >> "$OUT/startup-metrics.txt"
  say "NOTE  startup: healthy in ${STARTUP_S}s; $(grep -c . "$OUT/startup-metrics.txt") metric/phase lines (startup-metrics.txt)"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader > "$OUT/gpu-memory-used.txt" 2>&1

  # ---- 6. kimi-serve verify ---------------------------------------------------------------------------------
  t=$(date +%s)
  timeout 150 "$KS" verify --host "127.0.0.1:$PORT" --model kimi-k2.5 --suite quick --timeout 90 --max-tokens 256 \
    --json > "$OUT/verify.json" 2> "$OUT/verify.err"
  rc=$?
  case "$rc" in
    0|1) ok "kimi-serve verify exited $rc in $(( $(date +%s) - t ))s (random weights: findings expected; verify.json)" ;;
    *) fail "kimi-serve verify exited $rc in $(( $(date +%s) - t ))s: $(tail -n1 "$OUT/verify.err")" ;;
  esac
  stop_server
fi

# ---- 7. what this machine proves ------------------------------------------------------------------------------
cat <<EOF | tee -a "$SUMMARY"

What this run can prove on a one-GPU machine (this one: $NGPU GPU(s), compute capability $CAP):
  - the GPU lock installs with kimi-serve's own engine install and patch sets (unless ENGINE_PYTHON was given);
  - torch cu130, sgl_kernel, FlashInfer and SGLang import and run a CUDA kernel under this driver;
  - the JIT toolchain as found here (nvcc, c++) for the kernels SGLang builds at start;
  - real SGLang 0.5.23 starts a Kimi-shaped MLA + MoE model (INT4 experts config, dummy weights) with EAGLE-3 and the
    kimi_k2 parsers, captures its CUDA graphs and serves; its startup metrics;
  - kimi-serve verify runs end to end against it (its verdict on random weights is not a contract result);
  - the collective self-test runs in the engine at TP $TP (at TP 1 no all-reduce path engages: it proves the ranks,
    the NCCL reference and the reporting, not the paths' sums).
What it cannot prove:
  - anything SM120: patches 0001-0005 are inert off compute capability 12.0;
  - TP8 and the all-reduce paths' sums (FlashInfer fusion, torch symmetric memory, PCIe-IPC): one GPU, no peers;
  - PCIe P2P, ACS/IOMMU, NCCL over PCIe across sockets (NCCL_P2P_LEVEL=SYS);
  - the prod draft's class (kimi-k2.5-eagle3-mla loads as Eagle3DeepseekV2ForCausalLM; the stand-in is Llama-EAGLE-3);
  - real weights, K2.5's vision tower, the KV capacity at 131072 tokens, the systemd sandbox.
EOF
finish "$FAILED"
