"""The contract dry run (`check --contract`): the simulator with the profile's exact SGLang flags on a free loopback
port, the verify suite against it, so a profile that loses its parsers fails before the real server is touched. The
simulator resolves the draft's class as SGLang's start-up does (:mod:`kimi_serve.simulator.draft`): reported, and a
draft SGLang would refuse keeps it from starting. It runs in the profile's Python, else $KIMI_SERVE_SGLANG_PYTHON.
"""

from __future__ import annotations

import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.keyfile import new_key, write_key_file
from kimi_serve.profile.loader import Profile
from kimi_serve.sglang.site import require_sglang_python
from kimi_serve.simulator import launcher
from kimi_serve.simulator.draft import LOG_PREFIX as DRAFT_PREFIX
from kimi_serve.simulator.server import ERROR_PREFIX

HOST = "127.0.0.1"
_FIX = re.compile(r"^(?P<message>.*) \(fix: (?P<fix>.*)\)$")


@dataclass
class DryRun:
    report: Any  # kimi_serve.verify report (has .exit_code)
    argv: list[str]  # the simulator command that ran (the profile's flags, host/port replaced)
    ready_after_s: float
    simulator_exit: int  # status after SIGTERM; 0 is a clean stop
    log_path: Path
    draft: str | None = None  # SGLang's resolution of the draft's class, as the simulator logged it

    @property
    def exit_code(self) -> int:
        return int(self.report.exit_code)


@dataclass
class PendingDryRun:
    """A simulator started for the dry run, not yet checked (:func:`start_contract_dryrun`)."""

    profile: Profile
    sim: launcher.Simulator
    argv: list[str]
    api_key: Any  # kimi_serve.verify.ApiKey
    log_path: Path
    startup_timeout: float
    started: float = 0.0  # time.monotonic() when the simulator was started

    def cancel(self) -> None:
        self.sim.stop()

    def finish(self) -> DryRun:
        """Wait for readiness, run the verify suite as `up` does (same wait, timeout, suite and pacing), stop."""
        from kimi_serve.verify import AFTER_START_WAIT, VerifyOptions, run_verify

        try:
            self._wait_ready()
            ready_after = time.monotonic() - self.started
            verify = self.profile.verify
            options = VerifyOptions(
                api_key=self.api_key.value,
                key_source=self.api_key.source,
                model=self.profile.model.served_name,
                wait=AFTER_START_WAIT,
                timeout=float(verify.timeout),
                suite=verify.suite,
                accept_floor=self.profile.speculative.accept_floor,
                spec_expected=self.profile.speculative.enabled,
                family=self.profile.model.family,
                preserve_thinking=self.profile.model.preserve_thinking,
            )
            report = run_verify(self.sim.base_url, options)
        finally:
            status = self.sim.stop()
        return DryRun(
            report=report,
            argv=self.argv,
            ready_after_s=ready_after,
            simulator_exit=status,
            log_path=self.log_path,
            draft=self.sim.said(DRAFT_PREFIX),
        )

    def _wait_ready(self) -> None:
        """The simulator's readiness; when it refused to start (a draft SGLang cannot load), its own line."""
        try:
            self.sim.wait_ready(max(1.0, self.startup_timeout - (time.monotonic() - self.started)))
        except KimiServeError as exc:
            refusal = self.sim.said(ERROR_PREFIX)
            if refusal is None:
                raise
            parts = _FIX.match(refusal)
            raise KimiServeError(
                f"the simulator refused the profile's launch: {parts['message'] if parts else refusal}",
                hint=parts["fix"] if parts else exc.hint,
                exit_code=exc.exit_code,
            ) from None


def start_contract_dryrun(
    profile: Profile,
    *,
    log_dir: Path | None = None,
    stand_in_key: bool = False,
) -> PendingDryRun:
    """Start the simulator with the profile's exact flags and return at once (`check` runs its SGLang tier meanwhile).
    Pacing, verify wait, timeout, suite and start deadline are `up`'s: a profile that passes here passes `up`'s contract
    check on the same SGLang. ``stand_in_key``: a throwaway key file when the profile's does not exist here."""
    from kimi_serve.check.launch import launch_for
    from kimi_serve.core.keyfile import read_key_file
    from kimi_serve.verify import ApiKey

    launch = launch_for(profile)
    port = launcher.free_port(HOST)
    args = launcher.with_flag(launcher.with_flag(list(launch.server_args), "--host", HOST), "--port", str(port))
    run_dir = Path(log_dir or tempfile.mkdtemp(prefix="kimi-serve-contract-"))
    key_file = launch.api_key_file
    label = "profile key file"
    if key_file and stand_in_key and not Path(key_file).exists():
        key_file = str(run_dir / "stand-in-secrets.yaml")  # a throwaway 0600 SGLang config holding a random key
        write_key_file(Path(key_file), new_key())
        args = launcher.with_flag(args, "--config", key_file)
        label = "stand-in key file"
    where = profile.where("server.api_key_file")
    launcher.check_config_file(args, where)
    api_key = ApiKey(read_key_file(Path(key_file), where), f"{label} {key_file}") if key_file else ApiKey(None, "none")
    python = require_sglang_python(launch.argv[0])
    argv = launcher.command(python, args)
    # `up`'s environment (server_env): this process's, then the profile's env; only the simulated start is shorter.
    env = launcher.environment({**launcher.environment(), **launch.env}, warmup=0.5, load=0)
    log_path = run_dir / "simulator.log"
    started = time.monotonic()
    sim = launcher.Simulator.start(argv, env, f"http://{HOST}:{port}", log_path)
    return PendingDryRun(
        profile,
        sim,
        argv,
        api_key,
        log_path,
        float(profile.startup.timeout),
        started,
    )
