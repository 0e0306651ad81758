"""Wall time and peak RSS of `kimi-serve verify --suite full --timeout T` against answers that stay inside verify's
read limits but are built to cost (tests/hostile_answers.py): 200 KB of `[` as every chat answer, a plain answer with
110k tool calls, streams of 1,000-character deltas (16 MiB a stream), streams of 99k one-delta chunks, a value
nested 100k deep, 16 MiB of SSE comment lines, streams of tool calls with 16 MiB of arguments.

The stand-in (tests/contract_server.py, not SGLang) runs in this process and rewrites its chat answers; verify runs
as a child process (`kimi-serve verify --json`), whose wall time and peak RSS (``wait4``) are printed with its exit
code and findings. A child still running at ``--kill-after`` is killed and shown as such. The bound verify keeps:
wall time within ``--timeout`` plus a few seconds, peak RSS within 256 MiB (docs/verify.md "Read limits").

Measured at ``--suite full --timeout 15`` (default concurrency 8; 2 shared, loaded cores; the wall time includes
the child's start, ~1 s), before -> after the bounds of docs/verify.md ("Read limits", 8 connections):

    kind        before                              after
    brackets    killed at 300 s, 39 MiB             exit 1   0.9 s   39 MiB  stream_not_sse, too_large
    tool-calls  exit 1   23.0 s  816 MiB            exit 1   2.1 s   84 MiB  too_large (4 MiB, not a stream)
    big-deltas  exit 1   18.1 s  944 MiB            exit 1   7.2 s  208 MiB  too_large (64 MiB a run)
    deltas      exit 1   17.2 s 1012 MiB            exit 1   9.9 s  160 MiB  too_large
    deep        exit 1    2.5 s   86 MiB            exit 1   2.9 s   85 MiB  too_large (64 levels)
    comments    exit 1    4.2 s  101 MiB            exit 1   7.7 s  102 MiB  too_large (400k lines)
    big-argum.  exit 1   10.4 s  848 MiB            exit 1   2.5 s  202 MiB  too_large (1 Mi argument chars)

(big-deltas at ``--concurrency 64``: 9.2 s, 198 MiB.) The wall times swing by a few seconds with the machine's load.

    .venv/bin/python benchmarks/bench_verify_floods.py [--timeout T] [--suite S] [--concurrency N]
        [--kill-after S] [KIND ...]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from contract_server import ContractServer  # noqa: E402
from hostile_answers import KINDS, answer, rewrite  # noqa: E402


def _run(argv: list[str], kill_after: float) -> tuple[int | None, float, int, str, str]:
    """(exit code or None when killed, wall s, peak RSS KiB, stdout, stderr) of one verify child."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, open(os.devnull, "rb") as stdin:
        started = time.monotonic()
        child = subprocess.Popen(argv, stdin=stdin, stdout=out, stderr=err, cwd=REPO)
        timer = threading.Timer(kill_after, child.send_signal, (signal.SIGKILL,))
        timer.start()
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.monotonic() - started
        timer.cancel()
        child.returncode = code = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        return (
            (None if code == -signal.SIGKILL else code),
            wall,
            usage.ru_maxrss,
            out.read().decode(),
            err.read().decode(),
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kinds", nargs="*", metavar="KIND", help=f"of {', '.join(KINDS)} (default: all)")
    parser.add_argument("--timeout", default="15")
    parser.add_argument("--suite", default="full")
    parser.add_argument("--concurrency", default=None)
    parser.add_argument("--kill-after", type=float, default=300.0)
    args = parser.parse_args()
    print(f"{'kind':<11} {'exit':>6} {'wall (s)':>9} {'peak RSS (MiB)':>15}  findings", flush=True)
    for kind in args.kinds or KINDS:
        answer(kind, True), answer(kind, False)  # built before the clock starts
        with ContractServer(rewrite=rewrite(kind)) as srv:
            argv = [sys.executable, "-m", "kimi_serve", "verify", "--host", srv.host, "--json"]
            argv += ["--timeout", args.timeout, "--suite", args.suite]
            argv += ["--concurrency", args.concurrency] if args.concurrency is not None else []
            code, wall, rss, out, err = _run(argv, args.kill_after)
        try:
            codes = sorted({f["code"] for f in json.loads(out)["findings"]})
        except ValueError:
            codes = [next((x for x in reversed(err.splitlines()) if x.strip()), "?")[:90]]
        shown = "killed" if code is None else str(code)
        print(f"{kind:<11} {shown:>6} {wall:9.1f} {rss / 1024:15.0f}  {','.join(codes)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
