"""The A/B sweep: for each profile, bring it up (or attach to ``--host``), pass the contract check, run every
(concurrency x repeat) cell not recorded yet, stop it; then the report, the table and the charts.

Resumable: each finished cell is ``cells/PROFILE/cC-rR.json`` in ``--out``, tagged with the profile's fingerprint and
the workload's digest; a profile whose cells are all recorded is not started. ``bench.json`` pins the workload.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kimi_serve.bench import loadgen, servers
from kimi_serve.bench import report as rp
from kimi_serve.bench.workload import Workload, prepare
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.files import write_atomic
from kimi_serve.core.inputs import read_json
from kimi_serve.profile.loader import Profile, load_profile
from kimi_serve.profile.schema import default_of

CELL_TIMEOUT_S = 1800.0
Say = Callable[[str], None]


@dataclass
class BenchOptions:
    profile: str
    against: str
    concurrency: list[int]
    requests: int
    workload: str
    repeat: int
    out: Path
    # the two profiles, loaded once by the command (with --set overrides and all); None: a --host label that names
    # no profile (the server is already running)
    profiles: tuple[Profile | None, Profile | None]
    hosts: list[str] = field(default_factory=list)  # one per profile, in order; empty: bring the profiles up
    api_key: str | None = None
    tokenizer: str | None = None
    speedup: float | None = None  # simulator profiles: the performance model's clock speed-up
    perf: dict[str, Any] | None = None  # simulator profiles: performance model parameter overrides


@dataclass
class Arm:
    name: str
    role: str  # "profile" (A) or "against" (B)
    profile: Profile | None  # the loaded profile, None for a --host label that is not one
    host: str | None
    fingerprint: str


def _write_json(path: Path, data: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(data, indent=2) + "\n")


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = read_json(path)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _matches(have: dict[str, Any] | None, want: dict[str, Any]) -> bool:
    return have is not None and {k: have.get(k) for k in want} == want


def _cell_path(out: Path, name: str, concurrency: int, repeat: int) -> Path:
    return out / "cells" / name / f"c{concurrency}-r{repeat}.json"


def check_arms(profile: str, against: str, hosts: list[str]) -> None:
    """The two arms' names and hosts as given, before anything is loaded (exit 2)."""
    if profile == against:
        raise KimiServeError(
            "--profile and --against name the same profile",
            where="bench",
            hint="compare two profiles, e.g. --profile sim --against sim-baseline (with --host, two different labels)",
        )
    if len(hosts) not in (0, 2):
        raise KimiServeError(
            "give --host twice (the --profile server, then the --against server) or not at all",
            where="--host",
            hint="--host 127.0.0.1:30000 --host 127.0.0.1:30001",
        )


def arm_profiles(profile: str, against: str, hosts: list[str]) -> tuple[Profile | None, Profile | None]:
    """The two arms' profiles, each loaded once here (the names checked first, :func:`check_arms`); with ``hosts`` a
    name that is no profile is only the running server's label (None)."""
    check_arms(profile, against, hosts)
    return _arm_profile(profile, bool(hosts)), _arm_profile(against, bool(hosts))


def _arm_profile(name: str, labelled: bool) -> Profile | None:
    try:
        return load_profile(name)
    except KimiServeError:
        if not labelled:
            raise
        return None


def _arms(opts: BenchOptions) -> list[Arm]:
    check_arms(opts.profile, opts.against, opts.hosts)
    arms = []
    for i, (name, role) in enumerate(((opts.profile, "profile"), (opts.against, "against"))):
        host = opts.hosts[i] if opts.hosts else None
        profile = opts.profiles[i]
        if profile is None and host is None:
            raise KimiServeError(
                f"no profile {name} to bring up", where=f"--{role}", hint="pass a profile name or path, or --host"
            )
        if host is not None:
            from kimi_serve.verify import parse_target

            host = parse_target(host).base_url
        label = profile.name if profile is not None else name
        fp = f"host:{host}" if host or profile is None else servers.fingerprint(profile)
        arms.append(Arm(label, role, profile, host, fp))
    return arms


def _check_manifest(opts: BenchOptions, workload: Workload) -> None:
    path = opts.out / "bench.json"
    want = {"workload": workload.name, "workload_digest": workload.digest, "requests": opts.requests}
    have = _read_json(path)
    if have is not None and not _matches(have, want):
        raise KimiServeError(
            f"{opts.out} holds results for another workload or request count ({have.get('workload')}"
            f", {have.get('requests')} requests)",
            where="--out",
            hint="pass a new --out DIR, or the same --workload and --requests as before",
        )
    _write_json(path, want)


def _standin_tokenizer(out: Path, python: str) -> str:
    """The simulator's stand-in tokenizer saved as a folder bench_serving can load (once per --out)."""
    from kimi_serve.core import proc
    from kimi_serve.simulator import launcher

    folder = out / "tokenizer-standin"
    if (folder / "tokenizer.json").is_file():
        return str(folder)
    code = (
        "import sys; from kimi_serve.simulator.tokenizer import build_standin; "
        "build_standin().save_pretrained(sys.argv[1])"
    )
    done = proc.run(proc.python_argv(python, "-c", code, str(folder)), timeout=300, env=launcher.environment())
    if not done.ok:
        raise KimiServeError(
            f"cannot save the simulator's stand-in tokenizer: {done.describe()}",
            where="bench",
            exit_code=ExitCode.ENVIRONMENT,
        )
    return str(folder)


def progress_line(name: str, concurrency: int, figures: dict[str, Any], simulated: bool, speedup: float) -> str:
    """One finished cell, in the table's time base: a simulator run ``speedup`` times faster is converted back to
    the model's time (as the report does), and the line says which base it shows."""
    from kimi_serve.bench.verdict import to_model_time

    shown = to_model_time(figures, speedup) if simulated else figures
    faster = f"; run {speedup:g}x faster" if speedup != 1 else ""
    base = f" (MODEL numbers, model time{faster})" if simulated else ""
    return (
        f"{name}: concurrency {concurrency}: {shown.get('output_throughput') or 0:.1f} tok/s, "
        f"{figures.get('errors', 0)} errors{base}"
    )


def _run_arm(arm: Arm, todo: list[tuple[int, int]], opts: BenchOptions, workload: Workload, say: Say) -> None:
    from kimi_serve.sglang.site import require_sglang_python

    knobs = servers.sim_env(opts.speedup, opts.perf)
    prof = arm.profile
    with contextlib.ExitStack() as stack:
        if arm.host or prof is None:
            assert arm.host, "an arm without a profile is a --host label"
            served = servers.attach(arm.host, opts.api_key, prof.model.served_name if prof else None, opts.tokenizer)
        else:
            served = stack.enter_context(servers.bring_up(prof, opts.out, knobs, say))
        suite = prof.verify.suite if prof is not None else str(default_of("verify.suite"))
        timeout = float(prof.verify.timeout if prof is not None else default_of("verify.timeout"))
        servers.contract_check(served.endpoint, arm.name, suite=suite, timeout=timeout, wait=10.0, say=say)
        python = require_sglang_python(str(prof.python) if prof is not None and prof.python else None)
        endpoint = served.endpoint
        tokenizer = opts.tokenizer or (_standin_tokenizer(opts.out, python) if served.simulated else None)
        if tokenizer:
            endpoint = dataclasses.replace(endpoint, tokenizer=tokenizer)
        states = (served.server_info.get("internal_states") or [{}])[0] or {}
        perf_model = states.get("perf_model") if served.simulated else None
        meta = {
            "name": arm.name,
            "role": arm.role,
            "source": "host" if arm.host else "profile",
            "base_url": endpoint.base_url,
            "fingerprint": arm.fingerprint,
            "simulated": served.simulated,
            "speedup": (perf_model or {}).get("params", {}).get("speedup", 1.0) if served.simulated else 1.0,
            "perf_model": perf_model,
        }
        _write_json(opts.out / "profiles" / f"{arm.name}.json", meta)
        for concurrency, repeat in todo:
            say(
                f"{arm.name}: concurrency {concurrency}, repeat {repeat + 1}/{opts.repeat}: running "
                f"sglang.bench_serving ({opts.requests} requests)"
            )
            figures = loadgen.run_cell(
                python,
                endpoint,
                workload,
                concurrency,
                opts.requests,
                opts.out / "runs" / arm.name,
                seed=repeat,
                timeout=CELL_TIMEOUT_S,
            )
            _write_json(
                _cell_path(opts.out, arm.name, concurrency, repeat),
                {
                    "profile": arm.name,
                    "concurrency": concurrency,
                    "repeat": repeat,
                    "fingerprint": arm.fingerprint,
                    "workload_digest": workload.digest,
                    "simulated": served.simulated,
                    "speedup": meta["speedup"],
                    "recorded": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "figures": figures,
                },
            )
            say(progress_line(arm.name, concurrency, figures, served.simulated, float(meta["speedup"] or 1.0)))


def run_bench(opts: BenchOptions, say: Say) -> dict[str, Any]:
    """The whole A/B; returns the report (also written to ``--out``/report.json, with the charts)."""
    from kimi_serve.bench import chart

    if opts.requests < 1 or opts.repeat < 1 or not opts.concurrency or min(opts.concurrency) < 1:
        raise KimiServeError(
            "--requests, --repeat and every --concurrency must be >= 1",
            where="bench",
            hint="e.g. --concurrency 1,4,16,32,64 --requests 64 --repeat 1",
        )
    arms = _arms(opts)
    opts.out.mkdir(parents=True, exist_ok=True)
    workload = prepare(opts.workload, opts.requests, opts.out)
    _check_manifest(opts, workload)
    cells: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for arm in arms:
        recorded = {"fingerprint": arm.fingerprint, "workload_digest": workload.digest}
        todo = [
            (c, r)
            for c in opts.concurrency
            for r in range(opts.repeat)
            if not _matches(_read_json(_cell_path(opts.out, arm.name, c, r)), recorded)
        ]
        done = len(opts.concurrency) * opts.repeat - len(todo)
        if not todo:
            say(f"{arm.name}: all {done} cells already recorded in {opts.out}: skipped (not started)")
        else:
            if done:
                say(f"{arm.name}: {done} cells already recorded, {len(todo)} to run")
            _run_arm(arm, todo, opts, workload, say)
        cells[arm.name] = {
            c: [
                (_read_json(_cell_path(opts.out, arm.name, c, r)) or {}).get("figures") or {}
                for r in range(opts.repeat)
            ]
            for c in opts.concurrency
        }
    metas = [
        _read_json(opts.out / "profiles" / f"{a.name}.json") or {"name": a.name, "role": a.role, "simulated": False}
        for a in arms
    ]
    report = rp.build(
        profiles=metas,
        cells=cells,
        concurrency=opts.concurrency,
        repeat=opts.repeat,
        workload={"name": workload.name, "digest": workload.digest, "requests": opts.requests},
    )
    missing = chart.matplotlib_missing()
    if missing:
        report["charts_skipped"] = missing
        say(f"charts skipped: {missing}")
    else:
        report["charts"], _plotted = chart.draw(report, opts.out)
    _write_json(opts.out / "report.json", report)
    return report
