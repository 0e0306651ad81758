"""The session's SGLang interpreter and shared simulators (tests/conftest.py ``sglang_session``, ``simulator_pool``)."""

from __future__ import annotations

import functools
import os
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from kimi_serve.core.settings import SIM_STEP_ENV, with_pythonpath
from kimi_serve.simulator import launcher

# The pool's standard servers: prod's parsers (PARSED), and at TP8 (PARSED_TP8). Modules that ask for the same flags,
# keys and step share one simulator: test_simulator_constrain and test_simulator_tools_http (PARSED_TP8,
# SHARED_KEY); test_admin_key_sglang and test_router_control_plane (PARSED, their client and admin keys).
SHARED_MODEL = "kimi-k2.5"
SHARED_KEY = "sim-shared-key"
PARSED = [
    "--model-path",
    "/models/Kimi-K2.5",
    "--served-model-name",
    SHARED_MODEL,
    "--trust-remote-code",
    "--tool-call-parser",
    "kimi_k2",
    "--reasoning-parser",
    "kimi_k2",
    "--host",
    "127.0.0.1",
]
PARSED_TP8 = [*PARSED[:5], "--tp-size", "8", *PARSED[5:]]


KIMI_SET = "sglang-0.5.23-kimi"


def stock_sglang_site(python: str, folder: Path) -> Path:
    """A site folder whose ``sglang`` is the engine's with prod's Kimi patch set reverted: SGLang 0.5.23's own
    kimi_k2 parsers and serving layer, whose faults verify and the traffic counter must detect (the CPU engine of
    scripts/build-cpu-venv.sh carries prod's patch sets, as prod does). Its files are hard links to the engine's (copies
    across file systems), the files the set touches are copies, then restored by kimi-serve's own revert. Put it first
    on a child's PYTHONPATH (:func:`stock_environ`)."""
    from kimi_serve.patches import load_patch_set, revert
    from kimi_serve.sglang.site import site_packages_of

    real = site_packages_of(python)
    site = folder / "site"

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(real / "sglang", site / "sglang", copy_function=link, ignore=shutil.ignore_patterns("__pycache__"))
    patch_set = load_patch_set(KIMI_SET)
    for rel in {f for p in patch_set.patches for f in p.files}:
        (site / rel).unlink()
        shutil.copy2(real / rel, site / rel)  # never written through a link into the engine
    revert(site, patch_set, state_dir=folder / "state")
    return site


def stock_environ(site: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with the stock sglang of :func:`stock_sglang_site` first on PYTHONPATH."""
    return with_pythonpath(dict(os.environ) if env is None else env, site)


@dataclass(frozen=True)
class SGLangSession:
    python: str  # the CPU SGLang interpreter
    probe_socket: str | None  # the run's probe server, when one is up


def wait_probe_server(sock: str, timeout: float = 240) -> bool:
    """Until a probe server listens on ``sock`` (its first ~25 s: importing SGLang); False if it never does."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(sock)
            return True
        except OSError:
            time.sleep(0.25)
    return False


def venv_redacts_server_info(python: str) -> bool:
    """Whether the CPU venv's own sglang carries patch 0007 (the /server_info key redaction), as `kimi-serve patches
    status` reads it: scripts/build-cpu-venv.sh builds it patched; an engine built before that is not."""
    return _redacts(python)


@functools.cache
def _redacts(python: str) -> bool:
    from kimi_serve.patches import load_patch_set, status
    from kimi_serve.sglang.site import resolve_site_packages

    site = resolve_site_packages(None, python)
    return bool(status(site, load_patch_set("sglang-0.5.23-sm120")).features.get("redact_api_key_in_server_info"))


def start_keyed(python: str, flags: list[str], key: str, folder: Path) -> tuple[launcher.Simulator, int]:
    """A simulator of its own (not pooled) with ``flags``, the API key in a 0600 ``--config`` file, a free port, no
    warm-up and a fixed 1 ms step: started, not yet waited for (``wait_ready``); and its port."""
    secrets = folder / "secrets.yaml"
    secrets.write_text(f"api-key: {key}\n")
    secrets.chmod(0o600)
    port = launcher.free_port()
    env = launcher.environment(warmup=0.0)
    env[SIM_STEP_ENV] = "0.001"
    argv = [*flags, "--host", "127.0.0.1", "--port", str(port), "--config", str(secrets)]
    sim = launcher.Simulator.start(launcher.command(python, argv), env, f"http://127.0.0.1:{port}", folder / "sim.log")
    return sim, port


class SimulatorPool:
    """Simulators shared by every test of a worker that asks for the same flags: one start per flag set (an SGLang
    import, ~20 s of CPU), stopped when the session ends. A test that stops or reconfigures its server starts its
    own instead."""

    def __init__(self, python: str, directory: Path, site: Path | None = None) -> None:
        self.python, self.directory, self.site = python, directory, site  # site: stock_sglang_site's, or the engine's
        self._running: dict[tuple[object, ...], launcher.Simulator] = {}

    def get(
        self,
        flags: list[str],
        *,
        key: str | None = None,
        admin_key: str | None = None,
        step: str = "0.001",
        env: dict[str, str] | None = None,
    ) -> launcher.Simulator:
        """A ready simulator with ``flags`` (plus ``--config`` with the keys, and a free ``--port``); ``env``: its
        simulator knobs (KIMI_SERVE_SIM_*) on top."""
        ident = (tuple(flags), step, key, admin_key, tuple(sorted((env or {}).items())))
        sim = self._running.get(ident)
        if sim is not None and sim.server.proc.poll() is None:
            return sim
        run = self.directory / f"sim-{len(self._running)}"
        run.mkdir()
        args = list(flags)
        if key is not None:
            secrets = run / "secrets.yaml"
            secrets.write_text(f"api-key: {key}\n" + (f"admin-api-key: {admin_key}\n" if admin_key else ""))
            secrets.chmod(0o600)
            args += ["--config", str(secrets)]
        port = launcher.free_port()
        child_env = {**launcher.environment(warmup=0.0), SIM_STEP_ENV: step, **(env or {})}
        if self.site is not None:
            child_env = stock_environ(self.site, child_env)
        sim = launcher.Simulator.start(
            launcher.command(self.python, [*args, "--port", str(port)]),
            child_env,
            f"http://127.0.0.1:{port}",
            run / "simulator.log",
        )
        try:
            sim.wait_ready(240)
        except BaseException:
            sim.stop()
            raise
        self._running[ident] = sim
        return sim

    def stop_all(self) -> None:
        for sim in self._running.values():
            sim.stop()


def prod_flags(*leave_out: str) -> list[str]:
    """Prod's SGLang flags (the `sim` profile: prod's, served by the simulator) without the port and ``leave_out``."""
    from kimi_serve.profile.launch import build_launch
    from kimi_serve.profile.loader import load_profile

    args = list(build_launch(load_profile("sim"), "python").server_args)
    out: list[str] = []
    i = 0
    while i < len(args):
        if args[i] in (*leave_out, "--port"):
            i += 2
            continue
        out.append(args[i])
        i += 1
    return out
