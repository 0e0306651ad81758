"""The servers `bench` measures: a profile brought up for the sweep with `up`'s launch, environment and preflight
and :mod:`kimi_serve.process.ready`'s start and wait (a simulator on a free loopback port, with the performance
model's knobs), or one already running (``--host``). Either way a server that fails the contract check is never
benchmarked.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimi_serve.bench.loadgen import BenchEndpoint
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.net import host_port
from kimi_serve.core.settings import SIM_PERF_ENV, SIM_SPEEDUP_ENV
from kimi_serve.profile.loader import Profile

Say = Callable[[str], None]


@dataclass
class Served:
    endpoint: BenchEndpoint
    server_info: dict[str, Any] = field(default_factory=dict)
    ready_after_s: float | None = None  # None: already running (--host)

    @property
    def simulated(self) -> bool:
        return "simulator" in self.server_info


def sim_env(speedup: float | None, perf: dict[str, Any] | None) -> dict[str, str]:
    """A simulator's performance-model knobs (its clock speed-up, parameter overrides) as its environment."""
    env = {SIM_SPEEDUP_ENV: f"{speedup:g}"} if speedup else {}
    return {**env, SIM_PERF_ENV: json.dumps(perf)} if perf else env


def fingerprint(profile: Profile) -> str:
    """What the profile runs (its SGLang flags and environment): cells recorded for another fingerprint are stale."""
    from kimi_serve.check.launch import launch_for

    launch = launch_for(profile)
    data = json.dumps({"args": list(launch.server_args), "env": launch.env, "engine": launch.engine}, sort_keys=True)
    return hashlib.sha256(data.encode()).hexdigest()[:16]


def get_json(base_url: str, path: str, api_key: str | None, timeout: float = 10.0) -> dict[str, Any]:
    """The JSON object a GET answers with 200 (core/http.py: a deadline, bounded reads); {} for anything else."""
    from kimi_serve.core.http import TransportError, request

    try:
        reply = request("GET", base_url + path, deadline=time.monotonic() + timeout, api_key=api_key)
        data = json.loads(reply.body) if reply.status == 200 and not (reply.timed_out or reply.limit) else {}
    except (TransportError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def contract_check(endpoint: BenchEndpoint, label: str, *, suite: str, timeout: float, wait: float, say: Say) -> None:
    """kimi_serve.verify's contract check; KimiServeError (exit 1, or 3 unreachable) when the server fails it."""
    from kimi_serve.verify import VerifyOptions, run_verify

    options = VerifyOptions(api_key=endpoint.api_key, model=endpoint.model, wait=wait, timeout=timeout, suite=suite)
    report = run_verify(endpoint.base_url, options)
    if report.exit_code == 0:
        say(f"{label}: contract check passed ({suite} suite, {report.elapsed_s:.1f}s)")
        return
    first = next((f for p in report.probes for f in p.findings), None) or report.error
    what = f"{first.code}: {first.message}" if first else "see kimi-serve verify"
    raise KimiServeError(
        f"{label} at {endpoint.base_url} fails the contract check ({what}); not benchmarked",
        where="bench",
        hint=f"run kimi-serve verify --host {endpoint.base_url} and fix the server",
        exit_code=ExitCode(report.exit_code) if report.exit_code in (1, 3) else ExitCode.FAILED,
    )


def attach(base_url: str, api_key: str | None, model: str | None, tokenizer: str | None) -> Served:
    """A server that is already running: its model from /v1/models unless given, its /server_info."""
    models = get_json(base_url, "/v1/models", api_key)
    served = model or next((m.get("id") for m in models.get("data") or [] if isinstance(m, dict)), None)
    if not served:
        raise KimiServeError(
            f"{base_url} lists no model in /v1/models",
            where="--host",
            hint="start the server, or check --host and the API key",
            exit_code=ExitCode.UNREACHABLE,
        )
    info = get_json(base_url, "/server_info", api_key)
    return Served(BenchEndpoint(base_url, str(served), api_key, tokenizer), info)


@contextlib.contextmanager
def bring_up(profile: Profile, log_dir: Path, knobs: dict[str, str], say: Say) -> Iterator[Served]:
    """Start ``profile`` as `up` does (its validated launch and environment; the preflight for SGLang), wait until
    ready (:mod:`kimi_serve.process.ready`, as the contract dry run does), yield it, stop it (SIGTERM to its main pid,
    SIGKILL to its group after service.stop_timeout)."""
    from kimi_serve.check.launch import server_env, validated_launch
    from kimi_serve.core.keyfile import read_key_file
    from kimi_serve.process import ready
    from kimi_serve.simulator import launcher
    from kimi_serve.verify import parse_target

    launch = validated_launch(profile)
    argv, host, port = list(launch.argv), launch.host, launch.port
    env = server_env(launch)
    if launch.engine == "simulator":
        host, port = "127.0.0.1", launcher.free_port("127.0.0.1")
        argv = launcher.with_flag(launcher.with_flag(argv, "--host", host), "--port", str(port))
        env.update(knobs)
    else:
        from kimi_serve.host.preflight import preflight

        preflight(profile, launch, say)
    key_file = launch.api_key_file
    api_key = read_key_file(Path(key_file), profile.where("server.api_key_file")) if key_file else None
    target = parse_target(host_port(host, port))
    log_path = log_dir / f"server-{profile.name}.log"
    say(f"{profile.name}: starting {launch.engine} on {target.base_url} (log {log_path})")
    server = ready.start(argv, env, log_path, where=profile.name)
    try:
        ready_after = ready.wait_until_ready(
            server,
            target,
            timeout=profile.startup.timeout,
            what=profile.name,
            api_key=api_key,
            tp_size=profile.parallel.tp_size,
        )
        say(f"{profile.name}: ready after {ready_after:.1f}s")
        tokenizer = str(profile.model.path) if launch.engine != "simulator" else None
        served = Served(
            BenchEndpoint(target.base_url, profile.model.served_name, api_key, tokenizer),
            get_json(target.base_url, "/server_info", api_key),
            ready_after,
        )
        yield served
    finally:
        code = server.stop(profile.service.stop_timeout)
        server.close()
        say(f"{profile.name}: stopped (status {code})")
