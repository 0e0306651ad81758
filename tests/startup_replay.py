"""STAND-IN for `python -m sglang.launch_server`: replays SGLang 0.5.23-style start-up logs that a CPU box cannot
produce (CUDA OOM, NCCL failure, a hang in NCCL init, a crash after ready), with SGLang's process model and exit codes.

Usage: ``python tests/startup_replay.py --scenario NAME <sglang flags...>`` (``--host``, ``--port``, ``--tp-size`` are
read from the flags). The log lines use SGLang 0.5.23's format strings (docs/sglang-startup-log.md):
records on stderr, ``[ts TPn]`` rank tags, tqdm bars as ``\\r`` fragments, unprefixed multi-line tracebacks; access log
on stdout. Like SGLang it starts one "scheduler" process per rank (they only sleep) and, on a scheduler exception,
SIGKILLs its children and itself (status -9). Scenarios:

  ok                 full start, real HTTP /health (503 while warming, then 200) on --port, runs until SIGTERM (exit 0)
  cuda_oom           TP3 hits torch.OutOfMemoryError at KV-cache allocation -> exit -9            (docs/sglang-startup-log.md)
  nccl_error         a rank fails in NCCL init with "RuntimeError: NCCL error: ..." -> exit -9     (docs/sglang-startup-log.md)
  nccl_hang          "Init parallel begin." then silence forever; ranks ignore SIGTERM, no PDEATHSIG (worst case)
  crash_after_ready  ok, then a scheduler crashes (-6) and the watchdog takes everything down -> exit -9
  stuck_stop         ok, but the main process ignores SIGTERM (only SIGKILL ends it)
  oom_stays_alive    TP3 logs torch.OutOfMemoryError at KV-cache allocation, but nothing exits: the main process
                     waits forever (no SIGTERM handler yet, as during SGLang's load) and the ranks ignore SIGTERM and
                     have no PDEATHSIG (only a SIGKILL of the group frees "the GPUs")
  oom_stays_alive_stuck  the same, and the main process ignores SIGTERM too (only SIGKILL ends it)
  dies_quietly       ok, with uvicorn's access line for each request; answers 20 GET /health (a router's health
                     checks), then is SIGKILLed (no record says why: a killed replica) -> exit -9
"""

from __future__ import annotations

import argparse
import http.server
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import datetime

STEP = float(os.environ.get("REPLAY_STEP_SECONDS", "0.02"))
_RANK_CHILD = (
    "import ctypes, signal, sys, time\n"
    "if sys.argv[1] == 'pdeathsig': ctypes.CDLL(None).prctl(1, signal.SIGKILL)\n"
    "else: signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "time.sleep(3600)\n"
)


def ts() -> str:
    return datetime.now().strftime("%Y-%m-%d %H:%M:%S")


def err(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


def rec(msg: str, rank: int | None = None) -> None:
    tag = f" TP{rank}" if rank is not None else ""
    err(f"[{ts()}{tag}] {msg}\n")
    time.sleep(STEP)


def all_ranks(tp: int, msg: str) -> None:
    for r in range(tp):
        rec(msg, r if tp > 1 else None)


def bar(desc: str, total: int, rate: str) -> None:
    for n in range(total + 1):
        err(f"\r{desc}: {100 * n // total:3d}% Completed | {n}/{total} [00:{n:02d}<00:{total - n:02d}, {rate}]")
        time.sleep(STEP)
    err("\n")


class Replay:
    def __init__(self, scenario: str, host: str, port: int, tp: int) -> None:
        self.scenario, self.host, self.port, self.tp = scenario, host, port, tp
        self.ranks: list[subprocess.Popen[bytes]] = []
        self.ready = False

    def spawn_ranks(self, mode: str) -> None:
        for _ in range(self.tp):
            self.ranks.append(subprocess.Popen([sys.executable, "-c", _RANK_CHILD, mode]))

    def die_like_sglang(self) -> None:
        """SIGQUIT path: kill_process_tree(getpid()) SIGKILLs the children, then the process itself (-9)."""
        rec("Received sigquit from a child process. It usually means the child failed.")
        rec(f"kill_process_tree called: parent_pid={os.getpid()}, include_parent=True, pid={os.getpid()}")
        for child in self.ranks:
            child.kill()
        os.kill(os.getpid(), signal.SIGKILL)

    def head(self) -> None:
        err(
            f"{os.path.dirname(__file__)}/sglang/launch_server.py:71: UserWarning: 'python -m sglang.launch_server' "
            "is still supported, but 'sglang serve' is the recommended entrypoint.\n"
        )
        rec(
            f"server_args={{'model_path': '/models/Kimi-K2.5', 'tp_size': {self.tp}, 'host': '{self.host}', "
            f"'port': {self.port}}}"
        )
        all_ranks(self.tp, "Init parallel begin.")

    def load(self) -> None:
        rec("sglang is using nccl==2.27.5", 0)
        all_ranks(self.tp, "Init parallel ends. elapsed=3.91 s")
        all_ranks(self.tp, "Load weight begin. avail mem=138.21 GB")
        bar("Multi-thread loading shards", 8, " 7.48s/it")
        all_ranks(
            self.tp,
            "Load weight end. elapsed=485.12 s, type=KimiK25ForConditionalGeneration, "
            "quant=compressed-tensors, avail mem=63.57 GB, mem usage=74.64 GB.",
        )

    def kv(self, failing_rank: int | None = None) -> None:
        for r in range(self.tp):
            if r == failing_rank:
                continue
            rec("KV Cache is allocated. dtype: torch.bfloat16, #tokens: 687584, KV size: 45.00 GB", r)
        all_ranks(self.tp, "Memory pool end. avail mem=18.11 GB")

    def graphs_and_http(self) -> None:
        all_ranks(
            self.tp, "Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=4, avail mem=15.29 GB"
        )
        for n in range(6):
            err(
                f"\rCapturing batches (bs={64 >> n} avail_mem=15.27 GB): {100 * n // 5:3d}%|#    | {n}/5 "
                "[00:02<00:55,  2.13s/it]"
            )
            time.sleep(STEP)
        err("\n")
        all_ranks(
            self.tp,
            "Capture target verify CUDA graph end. bs=[1, 2, 4], elapsed=38.87 s, mem usage=1.41 GB, "
            "avail mem=13.88 GB.",
        )
        rec(
            "max_total_num_tokens=687584, chunked_prefill_size=16384, max_prefill_tokens=16384, "
            "max_running_requests=64, context_len=262144, available_gpu_mem=12.90 GB",
            0,
        )
        rec("Engine startup timings (s): load_weight=488.00, kv_cache_allocation=1.92, scheduler_e2e=609.77")
        server = http.server.ThreadingHTTPServer((self.host, self.port), self.handler())
        threading.Thread(target=server.serve_forever, daemon=True).start()
        rec(f"INFO:     Started server process [{os.getpid()}]")
        rec(f"INFO:     Uvicorn running on http://{self.host}:{self.port} (Press CTRL+C to quit)")
        print(f'[{ts()}] INFO:     127.0.0.1:40112 - "GET /model_info HTTP/1.1" 200 OK', flush=True)
        time.sleep(0.3)
        self.ready = True
        rec("The server is fired up and ready to roll!")

    def handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        replay = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                code = (200 if replay.ready else 503) if self.path in ("/health", "/ready") else 404
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()
                if replay.scenario == "dies_quietly":  # uvicorn's access log, on stdout
                    port = self.client_address[1]
                    print(f'[{ts()}] INFO:     127.0.0.1:{port} - "GET {self.path} HTTP/1.1" {code} OK', flush=True)

            def log_message(self, *_args: object) -> None:
                pass

        return Handler

    def run(self) -> int:
        sc = self.scenario
        stuck = sc == "nccl_hang"
        stays = sc.startswith("oom_stays_alive")
        self.spawn_ranks("ignore-term" if stuck or stays else "pdeathsig")
        if sc in ("stuck_stop", "oom_stays_alive_stuck"):
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        self.head()
        if stuck:
            while True:
                time.sleep(3600)
        if sc == "nccl_error":
            rec(
                "Scheduler hit an exception: Traceback (most recent call last):\n"
                '  File "<site-packages>/sglang/srt/managers/scheduler.py", line 6362, in run_scheduler_process\n'
                "    scheduler = Scheduler(server_args, port_args)\n"
                '  File "<site-packages>/sglang/srt/distributed/device_communicators/pynccl_wrapper.py", line 472, '
                "in NCCL_CHECK\n"
                '    raise RuntimeError(f"NCCL error: {error_str}")\n'
                "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)\n",
                5,
            )
            self.die_like_sglang()
        self.load()
        if sc == "cuda_oom" or stays:
            self.kv(failing_rank=3)
            rec(
                "Scheduler hit an exception: Traceback (most recent call last):\n"
                '  File "<site-packages>/sglang/srt/managers/scheduler.py", line 6362, in run_scheduler_process\n'
                "    scheduler = Scheduler(server_args, port_args)\n"
                '  File "<site-packages>/sglang/srt/mem_cache/memory_pool.py", line 4865, in _create_buffers\n'
                "    torch.zeros(\n"
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 755.00 MiB. GPU 3 has a total capacity "
                "of 139.81 GiB of which 402.19 MiB is free. Including non-PyTorch memory, this process has 131.27 GiB "
                "memory in use.\n",
                3,
            )
            if stays:  # the watchdog never fires: the server hangs on with its GPUs held
                while True:
                    time.sleep(3600)
            self.die_like_sglang()
        self.kv()
        self.graphs_and_http()
        if sc == "dies_quietly":  # a router's health checks, then a SIGKILL from outside: nothing says why
            for _ in range(20):
                with urllib.request.urlopen(f"http://{self.host}:{self.port}/health", timeout=10):
                    pass
            os.kill(os.getpid(), signal.SIGKILL)
        if sc == "crash_after_ready":
            time.sleep(2.0)
            rec(
                f"Subprocess scheduler_3 (pid={self.ranks[3 % self.tp].pid}) crashed with exit code -6. "
                "Triggering SIGQUIT for cleanup..."
            )
            rec("SIGQUIT received. signum=3, frame=None. It usually means one child failed.")
            self.die_like_sglang()
        stop = threading.Event()
        if sc != "stuck_stop":
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
        stop.wait()
        rec("SIGTERM received. signum=15 frame=None. Draining requests and shutting down...")
        rec("INFO:     Shutting down")
        for child in self.ranks:
            child.kill()
            child.wait()
        rec(f"kill_process_tree called: parent_pid={os.getpid()}, include_parent=False, pid={os.getpid()}")
        return 0


def main() -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--scenario", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--tp-size", type=int, default=1)
    args, _rest = parser.parse_known_args()
    return Replay(args.scenario, args.host, args.port, args.tp_size).run()


if __name__ == "__main__":
    sys.exit(main())
