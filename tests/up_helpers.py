"""Helpers for the `up` tests: free ports, process-group inspection from /proc, the CPU SGLang test profile."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPLAY = HERE / "startup_replay.py"
CPU_DIR = HERE / "sglang_cpu"


_PORT_BLOCK = 1000
_PORT_GAP = 4  # unpicked ports after each pick: a caller may bind the ports just above the one it got (replicas)
_port_next = 0


def free_run(count: int = 1) -> int:
    """The first of ``count`` consecutive free ports, from this xdist worker's own block of 10000-19999: outside the
    kernel's ephemeral range (32768-60999), where a parallel test's client connection can take a port between the
    pick and a server's bind (CI saw a replica's EADDRINUSE 25 s after its port was picked there), and apart from the
    other workers' blocks and nccl_port's 20000-21999. Checked on the wildcard address, which a bind on any address
    of the port would refuse."""
    global _port_next
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    base = 10000 + (int(worker) if worker.isdigit() else 0) % 10 * _PORT_BLOCK
    for _ in range(_PORT_BLOCK):
        first = base + _port_next % (_PORT_BLOCK - count + 1)
        _port_next += count + _PORT_GAP
        socks = [socket.socket() for _ in range(count)]
        try:
            for offset, sock in enumerate(socks):
                sock.bind(("0.0.0.0", first + offset))
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
        return first
    raise RuntimeError(f"no {count} consecutive free ports in {base}-{base + _PORT_BLOCK - 1}")


def free_port() -> int:
    """A free port (:func:`free_run`)."""
    return free_run(1)


_NCCL_BLOCK = 100
_nccl_next = 0


def nccl_port() -> int:
    """A port for a real SGLang's torch.distributed store (``--nccl-port``), from this xdist worker's own block of
    20000-21999: below SGLang's own random draw (22000-29999, checked free at start, bound by the scheduler minutes
    later) and the kernel's ephemeral range, so two real servers of one run never hold the same one. CI saw
    EADDRINUSE when two concurrent servers drew the same port themselves."""
    global _nccl_next
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    base = 20000 + (int(worker) if worker.isdigit() else 0) % (2000 // _NCCL_BLOCK) * _NCCL_BLOCK
    for _ in range(_NCCL_BLOCK):
        port = base + _nccl_next % _NCCL_BLOCK
        _nccl_next += 1
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {base}-{base + _NCCL_BLOCK - 1}")


def live_group(pgid: int) -> list[int]:
    """Non-zombie processes in process group ``pgid`` (read from /proc, independently of kimi_serve.process.child)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        state, _ppid, pgrp = text[text.rindex(")") + 2 :].split()[:3]
        if state != "Z" and int(pgrp) == pgid:
            pids.append(int(stat.parent.name))
    return pids


def server_pid(output: str) -> int:
    m = re.search(r"server pid (\d+) \(own session", output)
    assert m, f"no server pid in output:\n{output}"
    return int(m.group(1))


def cpu_profile(directory: Path, port: int, python: str, *, model: Path | None = None, name: str = "cpu") -> Path:
    """A profile that runs SGLang's real launch_server on CPU with the tiny dummy Llama (tests/sglang_cpu/). With
    SGLang's own --sleep-on-idle: an idle scheduler on CPU otherwise polls at ~0.8 of a core while the server lives."""
    path = directory / f"{name}.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        description: real SGLang on CPU, tiny dummy Llama (tests only)
        engine: sglang
        python: {python}
        gpus: 1
        patch_set: null
        model:
          path: {model or CPU_DIR / "tiny-llama"}
          served_name: tiny
          trust_remote_code: true
          attention_heads: 4
        parallel:
          tp_size: 1
        speculative:
          enabled: false
        allreduce:
          flashinfer_fusion_backend: null
          torch_symm_mem: false
          pcie_ipc: false
        memory:
          mem_fraction_static: 0.5
          chunked_prefill_size: 1024
          cuda_graph_max_bs_decode: 4
        server:
          host: 127.0.0.1
          port: {port}
          enable_metrics: false
        env:
          PYTHONPATH: {CPU_DIR / "stubs"}
        extra_args: [--device, cpu, --load-format, dummy, --skip-tokenizer-init, --max-total-tokens, "4096",
                     --nccl-port, "{nccl_port()}", --sleep-on-idle]
        startup:
          timeout: 300
        verify:
          timeout: 30
        service:
          stop_timeout: 30
        """)
    )
    return path


def free_pair() -> int:
    """A port P with P+1 free too (replica i listens at server.port + i)."""
    return free_run(2)


def dp2_profile(directory: Path, key_file: Path | None) -> tuple[Path, int, int]:
    """A sim-dp2 profile (two simulator replicas behind SGLang's router) on free ports, the key file when given:
    (its path, the first replica's port, the router's port)."""
    base = free_pair()
    router = metrics = base
    while len({base, base + 1, router, metrics}) < 4:  # each bind is released before the next: a port can repeat
        router, metrics = free_port(), free_port()
    key = f", api_key_file: {key_file}" if key_file else ""
    path = directory / "dp2-test.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        extends: sim-dp2
        server: {{port: {base}{key}}}
        router: {{port: {router}, metrics_port: {metrics}}}
        """)
    )
    return path, base, router


class UpProcess:
    """`kimi-serve up` as a child process, its stdout+stderr collected line by line."""

    def __init__(self, args: list[str], state: Path, extra_env: dict[str, str] | None = None) -> None:
        env = {**os.environ, **(extra_env or {}), "KIMI_SERVE_STATE_DIR": str(state)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kimi_serve", "up", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, text: str, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if text in self.output:
                return True
            if self.proc.poll() is not None:
                self._reader.join(5)
                return text in self.output
            time.sleep(0.2)
        return False

    def finish(self, timeout: float) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(5)
        return code
