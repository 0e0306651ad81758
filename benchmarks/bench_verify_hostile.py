"""Peak RSS of `kimi-serve verify` against servers that never end their answers (verify's read limits at work).

Each run starts a fresh Python process that runs verify (the quick and full suites, verify's own limits) against the
contract stand-in server in a hostile mode (tests/contract_server.py; not SGLang; it runs in the same process, so
the peak includes its own buffers): an endless JSON body, an endless
event stream, one endless line. Prints the child's peak RSS (ru_maxrss), the wall time, and the findings. Before the
limits, one `verify --timeout 20` against an endless body peaked at 7.1 GB; now the peak is bounded by the total
budget (64 MiB a run) held about twice plus the interpreter, within verify's 256 MiB memory budget.

    .venv/bin/python benchmarks/bench_verify_hostile.py [TIMEOUT]
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_CHILD = """
import json, resource, sys, time
sys.path.insert(0, {tests!r})
from contract_server import ContractServer
from kimi_serve.verify import run_verify
with ContractServer({mode!r}) as srv:
    start = time.monotonic()
    report = run_verify(srv.host, suite={suite!r}, timeout={timeout})
    wall = time.monotonic() - start
codes = sorted({{f.code for p in report.probes for f in p.findings}})
print(json.dumps({{"wall": wall, "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "exit": report.exit_code, "codes": codes}}))
"""


def main(argv: list[str]) -> int:
    timeout = float(argv[0]) if argv else 20.0
    print(f"{'mode':<15} {'suite':<6} {'exit':>4} {'wall (s)':>9} {'peak RSS (MiB)':>15}  findings")
    for mode in ("endless-body", "endless-stream", "huge-line"):
        for suite in ("quick", "full"):
            code = _CHILD.format(tests=str(REPO / "tests"), mode=mode, suite=suite, timeout=timeout)
            started = time.monotonic()
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            assert row["wall"] < timeout + 10, row
            print(
                f"{mode:<15} {suite:<6} {row['exit']:>4} {row['wall']:9.2f} {row['maxrss_kib'] / 1024:15.1f}  "
                f"{','.join(row['codes'])}  (process {time.monotonic() - started:.1f}s)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
