"""Peak memory of `kimi-serve logs -n N` against the size of `up`'s log (issue 44: `logs -n 3` of a 300 MB log held
504 MB when it read the whole file).

Writes a 300 MB log of ~120-byte lines (and a 300 MB sparse one: a hole, then a few lines) under a temporary state
root, runs `python -m kimi_serve logs -p sim --up -n N` on each, and prints the command's wall time and peak RSS
(``ru_maxrss`` from ``wait4``) beside the same command on a 1 KB log. Target: the same peak RSS whatever the log's
size and N (the file is read from its end in 64 KiB blocks, the lines copied out in blocks).

    .venv/bin/python benchmarks/bench_logs_tail.py [MB]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LINE = "2026-01-01 00:00:00 [INFO] TP0 Decode batch. #running-req: 48, #token: 123456, gen throughput: 1234.5\n"


def run(state: Path, lines: int) -> tuple[float, float, int]:
    """(seconds, peak RSS in MB, bytes written to stdout) of one `logs -n lines`."""
    env = {**os.environ, "KIMI_SERVE_STATE_DIR": str(state)}
    start = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kimi_serve", "logs", "-p", "sim", "--up", "-n", str(lines)],
            stdout=out,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        took = time.monotonic() - start
        assert os.waitstatus_to_exitcode(status) == 0
        size = out.seek(0, os.SEEK_END)
    return took, usage.ru_maxrss / 1024, size


def main() -> None:
    mb = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    with tempfile.TemporaryDirectory() as tmp:
        cases: dict[str, Path] = {}
        for name in ("tiny", "lines", "sparse"):
            state = Path(tmp) / name
            (state / "logs").mkdir(parents=True)
            cases[name] = state / "logs" / "up-sim-20260101-000000.log"
        cases["tiny"].write_text(LINE * 10)
        with cases["lines"].open("w") as f:
            block = LINE * 10_000
            for _ in range(mb * 1024 * 1024 // len(block)):
                f.write(block)
        with cases["sparse"].open("wb") as f:
            f.truncate(mb * 1024 * 1024)
            f.seek(0, os.SEEK_END)
            f.write(LINE.encode() * 1000)
        for name, path in cases.items():
            for lines in (3, 1000) if name != "sparse" else (3,):
                took, rss, out = run(path.parent.parent, lines)
                size = path.stat().st_size / 1e6
                print(
                    f"{name:6s} log {size:8.1f} MB  -n {lines:<5d} {took:5.2f} s  peak RSS {rss:6.1f} MB  ({out} B out)"
                )


if __name__ == "__main__":
    main()
