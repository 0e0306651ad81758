"""The contract dry run before a restart (`kimi-serve check --profile NAME --contract`): start the simulator with the
profile's exact SGLang flags on a free loopback port, wait until ready, run the verify suite against it, stop it.

A profile whose flags lose ``--tool-call-parser kimi_k2`` or ``--reasoning-parser kimi_k2`` fails here with verify's
diagnosis, before the real server is touched. On the serving host the profile's own Python (the installed, patched
SGLang) runs it; elsewhere ``$KIMI_SERVE_SGLANG_PYTHON`` (the CPU venv).
"""

from __future__ import annotations

import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimi_serve.core.settings import SIM_STEP_ENV
from kimi_serve.profile.loader import Profile
from kimi_serve.sglang.site import require_sglang_python
from kimi_serve.simulator import launcher

HOST = "127.0.0.1"
STARTUP_TIMEOUT = 180.0  # sglang import + resolution on a busy 2-core machine stays well under this


@dataclass
class DryRun:
    report: Any  # kimi_serve.verify report (has .exit_code)
    argv: list[str]  # the simulator command that ran (the profile's flags, host/port replaced)
    ready_after_s: float
    simulator_exit: int  # status after SIGTERM; 0 is a clean stop
    log_path: Path

    @property
    def exit_code(self) -> int:
        return int(self.report.exit_code)


def _stand_in_key_file(directory: Path) -> Path:
    """A throwaway 0600 SGLang config holding a random key: the API-key path is exercised, no real key is needed."""
    path = directory / "stand-in-secrets.yaml"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"api-key: {secrets.token_urlsafe(24)}\n")
    return path


def run_contract_dryrun(profile: Profile | str, *, suite: str | None = None, timeout: float | None = None,
                        startup_timeout: float = STARTUP_TIMEOUT, log_dir: Path | None = None,
                        stand_in_key: bool = False) -> DryRun:
    """``stand_in_key``: when the profile's API-key file does not exist here (CI, a laptop), use a throwaway one."""
    from kimi_serve.check.report import launch_for
    from kimi_serve.core.keyfile import read_key_file
    from kimi_serve.profile.loader import load_profile
    from kimi_serve.verify import run_verify

    if isinstance(profile, str):
        profile = load_profile(profile)
    launch = launch_for(profile)
    port = launcher.free_port(HOST)
    args = launcher.with_flag(launcher.with_flag(list(launch.server_args), "--host", HOST), "--port", str(port))
    run_dir = Path(log_dir or tempfile.mkdtemp(prefix="kimi-serve-contract-"))
    key_file = launch.api_key_file
    if key_file and stand_in_key and not Path(key_file).exists():
        key_file = str(_stand_in_key_file(run_dir))
        args = launcher.with_flag(args, "--config", key_file)
    where = profile.where("server.api_key_file")
    launcher.check_config_file(args, where)
    api_key = read_key_file(Path(key_file), where) if key_file else None
    python = require_sglang_python(launch.argv[0])
    argv = launcher.command(python, args)
    env = launcher.environment({**launcher.environment(), **launch.env}, warmup=0.5, load=0)
    env[SIM_STEP_ENV] = "0.001"  # a contract check, not a speed test: keep the multi-token steps, drop the pacing
    log_path = run_dir / "simulator.log"
    sim = launcher.Simulator.start(argv, env, f"http://{HOST}:{port}", log_path)
    try:
        ready_after = sim.wait_ready(startup_timeout)
        verify = profile.verify
        report = run_verify(sim.base_url, api_key=api_key, model=profile.model.served_name, wait=10.0,
                            timeout=float(timeout or verify.timeout), suite=suite or verify.suite)
    finally:
        status = sim.stop()
    return DryRun(report=report, argv=argv, ready_after_s=ready_after, simulator_exit=status, log_path=log_path)
