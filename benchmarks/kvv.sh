#!/usr/bin/env bash
# Run Moonshot's Kimi Vendor Verifier (github MoonshotAI/Kimi-Vendor-Verifier) against `kimi-serve simulate`.
#
#   benchmarks/kvv.sh KVV_CHECKOUT [OUT_DIR]
#
# KVV_CHECKOUT: a checkout of the verifier with a virtual environment at KVV_CHECKOUT/.venv holding what its tests
# import (httpx openai jsonschema pytest pytest-xdist pytest-rerunfailures pillow loguru); nothing of it is copied
# into this project. Starts the simulator with the sim profile on 127.0.0.1:$KVV_PORT (default 31919), runs
# tests/tool_call_json_schema, tests/k3_features and tests/params with --think-mode opensource (model kimi-k2.5),
# writes one JUnit XML per test directory to OUT_DIR (default ./kvv-out) and prints pass/fail counts per file and
# per case class (docs/simulator.md "Kimi Vendor Verifier" has the table and what is out of scope).
set -euo pipefail
kvv=$(cd "${1:?usage: benchmarks/kvv.sh KVV_CHECKOUT [OUT_DIR]}" && pwd)
out=$(mkdir -p "${2:-kvv-out}" && cd "${2:-kvv-out}" && pwd)
port=${KVV_PORT:-31919}
repo=$(cd "$(dirname "$0")/.." && pwd)
ks="$repo/.venv/bin/kimi-serve"
py="$kvv/.venv/bin/python"
[ -x "$py" ] || { echo "kvv.sh: no $py (create the verifier's venv first)" >&2; exit 2; }

if [ -z "${KVV_SUMMARY_ONLY:-}" ]; then  # KVV_SUMMARY_ONLY=1: only re-print the table of a run in OUT_DIR
  "$ks" simulate --profile sim --port "$port" --warmup 0 >"$out/simulator.log" 2>&1 &
  sim=$!
  trap 'kill "$sim" 2>/dev/null; wait "$sim" 2>/dev/null || true' EXIT
  for _ in $(seq 1 300); do
    curl -fs "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    kill -0 "$sim" 2>/dev/null || { echo "kvv.sh: the simulator exited (see $out/simulator.log)" >&2; exit 1; }
    sleep 1
  done

  common=(--base-url "http://127.0.0.1:$port/v1" --api-key none --smoke-model kimi-k2.5 --think-mode opensource
          -p no:cacheprovider -q -o addopts= -rN)
  cd "$kvv"
  for suite in tool_call_json_schema k3_features params; do
    extra=()
    [ "$suite" = tool_call_json_schema ] && extra=(--thinking -n 2 --tool-json-report "$out/tool-call-schema-report.json")
    "$py" -m pytest "tests/$suite" "${common[@]}" "${extra[@]}" --junitxml "$out/$suite.xml" >"$out/$suite.log" 2>&1 \
      || true
    tail -1 "$out/$suite.log"
  done
  kill "$sim" 2>/dev/null || true
fi

"$repo/.venv/bin/python" - "$out" <<'EOF'
import re, sys, collections, xml.etree.ElementTree as ET
from pathlib import Path
out = Path(sys.argv[1])
for suite in ("tool_call_json_schema", "k3_features", "params"):
    per = collections.defaultdict(lambda: [0, 0])
    fails = []
    final = {}  # pytest-rerunfailures writes one <testcase> per attempt: the last one is the outcome
    for tc in ET.parse(out / f"{suite}.xml").iter("testcase"):
        final[(tc.get("classname", ""), tc.get("name", ""))] = tc
    for (classname, name), tc in final.items():
        m = re.search(r"\[(Test\w+):", name)
        cls = m.group(1) if m else f"{classname.split('.')[-1]}::{name.split('[')[0]}"
        if tc.find("skipped") is not None:
            continue
        bad = tc.find("failure") is not None or tc.find("error") is not None
        per[cls][1 if bad else 0] += 1
        if bad:
            fails.append(name)
    total = [sum(v[0] for v in per.values()), sum(v[1] for v in per.values())]
    print(f"== {suite}: {total[0]} passed, {total[1]} failed")
    for cls, (ok, bad) in sorted(per.items()):
        print(f"   {cls:<60} {ok:>4} passed {bad:>4} failed")
    for name in fails:
        print(f"   FAIL {name}")
EOF
