"""Wall time and peak RSS of `kimi-serve verify --timeout T` against streams that stay inside the read limits but
are built to cost: ~99k one-delta chunks, 16 MiB of SSE comment lines, 110k tool calls, a body nested 100k deep.

The stand-in (tests/contract_server.py, not SGLang) runs in this process and rewrites its streamed chat answers;
verify runs as a child process (`kimi-serve verify --json`), whose wall time and peak RSS (``wait4``) are printed
with its exit code and findings. Before verify's bounds (docs/verify.md "Read limits"), 99k deltas took 27-40 s at
``--timeout 5`` on a loaded machine (each delta copied the whole text), the comment lines reached 626 MB and the tool
calls 517-795 MB; a deep body ended verify in exit 70. Measured here at ``--timeout 5`` (2 shared cores; the wall
time includes the child's start, ~0.7 s), before -> after:

    deltas      exit 1  11.6 s  258 MiB  timeout       ->  exit 1  3.8 s  164 MiB  too_large (250k JSON objects)
    comments    exit 1  10.2 s  169 MiB  timeout       ->  exit 1  1.3 s   70 MiB  too_large (400k lines)
    tool-calls  exit 1  10.5 s  337 MiB  timeout       ->  exit 1  3.6 s  149 MiB  too_many_tool_calls, too_large
    deep        exit 70  1.4 s  133 MiB  (a traceback) ->  exit 1  1.0 s  133 MiB  too_large (64 levels)

    .venv/bin/python benchmarks/bench_verify_floods.py [TIMEOUT]
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from contract_server import ContractServer  # noqa: E402

HEAD = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "kimi-k2.5"}


def _event(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return b"data: " + json.dumps({**HEAD, "choices": [choice]}).encode() + b"\n\n"


def _call(i: int) -> bytes:
    fn = {"name": "get_weather", "arguments": "{}"}
    return _event({"tool_calls": [{"index": i, "id": f"c{i}", "type": "function", "function": fn}]})


def _flood(kind: str) -> bytes:
    start, end = _event({"role": "assistant", "content": ""}), b"data: [DONE]\n\n"
    if kind == "deltas":
        return start + _event({"content": "x" * 8}) * 99_000 + _event({}, "stop") + end
    if kind == "comments":
        return start + b":\n" * (8 * 1024 * 1024 - 1024) + _event({"content": "hi"}) + _event({}, "stop") + end
    if kind == "tool-calls":
        return start + b"".join(_call(i) for i in range(110_000)) + _event({}, "tool_calls") + end
    raise ValueError(kind)


def _rewrite(kind: str) -> Any:
    flood = b"[" * 100_000 + b"]" * 100_000 if kind == "deep" else _flood(kind)

    def rewrite(path: str, status: int, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        if path != "/v1/chat/completions":
            return status, headers, body
        stream = "event-stream" in headers.get("Content-Type", "")
        if kind == "deep" and not stream:
            return status, headers, body[:-1] + b', "x": ' + flood + b"}"
        return (status, headers, flood) if stream and kind != "deep" else (status, headers, body)

    return rewrite


_CHILD = (
    "import resource, sys\n"
    "from kimi_serve.cli import main\n"
    "rc = main()\n"
    "print('MAXRSS_KIB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    "raise SystemExit(rc)\n"
)


def main(argv: list[str]) -> int:
    timeout = argv[0] if argv else "5"
    print(f"{'flood':<11} {'exit':>4} {'wall (s)':>9} {'peak RSS (MiB)':>15}  findings")
    for kind in ("deltas", "comments", "tool-calls", "deep"):
        with ContractServer(rewrite=_rewrite(kind)) as srv:
            started = time.monotonic()
            child = subprocess.run(
                [sys.executable, "-c", _CHILD, "verify", "--host", srv.host, "--timeout", timeout, "--json"],
                capture_output=True,
                text=True,
                cwd=REPO,
                check=False,
            )
            wall = time.monotonic() - started
        rss = [line.split()[1] for line in child.stderr.splitlines() if line.startswith("MAXRSS_KIB")]
        try:
            codes = sorted({f["code"] for f in json.loads(child.stdout)["findings"]})
        except ValueError:
            codes = [next((x for x in reversed(child.stderr.splitlines()) if "Error" in x), "?")[:90]]
        peak = f"{int(rss[0]) / 1024:.0f}" if rss else "?"
        print(f"{kind:<11} {child.returncode:>4} {wall:9.1f} {peak:>15}  {','.join(codes)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
