"""`kimi-serve up`: preflight, start, cold-start progress, early failure detection, contract check, supervision.

Exit codes (docs/up.md): 0 the server exited with status 0; 1 contract check failed; 3 never ready; 4 the server
exited, crashed or logged a failure (or a requested stop did not end cleanly); 5 preflight failed; 130 stopped on
request (SIGINT/SIGTERM/SIGHUP) and the server stopped cleanly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kimi_serve.check.launch import plan_deployment
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.host.preflight import preflight
from kimi_serve.profile.deployment import Deployment
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.member import Member, Role
from kimi_serve.up.console import Console
from kimi_serve.up.logfiles import default_log_file, prune
from kimi_serve.up.options import UpOptions
from kimi_serve.up.phases import PhaseClock, start_clock
from kimi_serve.up.replicas import member_logs, part_glob, port_preflight
from kimi_serve.up.supervisor import Supervisor
from kimi_serve.up.watch import Signals


def serve(launch: Launch, opts: UpOptions, log_path: Path, console: Console, clock: PhaseClock | None = None) -> int:
    """Start one server from ``launch`` (a deployment of one member), watch it to readiness and the contract check,
    supervise; the exit code (:func:`supervise`)."""
    member = Member(Role.SINGLE, 0, launch.endpoint, True)
    return supervise({member: launch}, {member: log_path}, opts, console, f"log {log_path}", clock)


def serve_deployment(
    deployment: Deployment, opts: UpOptions, base_log: Path, console: Console, clock: PhaseClock | None = None
) -> int:
    """Start and supervise ``deployment``: its one server (logging to ``base_log``, its start timed by ``clock``), or
    its replicas and router (each logging next to ``base_log``). The exit code as :func:`supervise` returns it."""
    if deployment.router is None:
        logs = {deployment.members[0]: base_log}
        return supervise(deployment.launches, logs, opts, console, f"log {base_log}", clock)
    logs = member_logs(deployment, base_log)
    port_preflight(deployment.launches, console)
    return supervise(deployment.launches, logs, opts, console, f"logs {part_glob(base_log)}")


def supervise(
    launches: Mapping[Member, Launch],
    logs: Mapping[Member, Path],
    opts: UpOptions,
    console: Console,
    where: str,
    clock: PhaseClock | None = None,
) -> int:
    """`up`'s one body: create the log files, start the server members, supervise them (and the router) until they
    end; return 0 (the one server exited with status 0) or 130 (stopped on request), raise :class:`KimiServeError`
    with the exit code of every other outcome (docs/up.md), ``where`` naming the logs. Nothing started outlives it."""
    for log in logs.values():
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.touch()
        except OSError as exc:
            raise KimiServeError(
                f"cannot write the log file {log}: {exc.strerror or exc}",
                hint="pass --log-file PATH or set KIMI_SERVE_STATE_DIR",
                exit_code=ExitCode.ENVIRONMENT,
            ) from None
    key, source = None, ""
    router = next((m for m in launches if m.role is Role.ROUTER), None)
    if router is not None:  # the contract check through the router (one server's watch reads its own key)
        from kimi_serve.verify import resolve_key

        resolved = resolve_key(key_file=launches[router].api_key_file, file_label="profile key file")
        key, source = resolved.value, resolved.source
    supervisor = Supervisor(launches, logs, opts, console, key, source, clock)
    outcome = None
    with Signals() as signals:  # from the first start to the last stop: SIGINT/SIGTERM/SIGHUP is a requested stop
        try:
            supervisor.start_members()
            outcome = supervisor.run(signals)
        finally:
            console.end_progress()
            supervisor.cleanup()
            if clock is not None:
                clock.settled(outcome.code.name.lower() if outcome else "up_error")
    if outcome.code in (ExitCode.OK, ExitCode.INTERRUPTED):
        console.info(outcome.message)
        return int(outcome.code)
    raise KimiServeError(outcome.message, where=where, hint=outcome.hint or None, exit_code=outcome.code)


def run_up(
    profile_ref: str,
    *,
    dry_run: bool = False,
    verify: bool = True,
    log_file: Path | None = None,
    console: Console | None = None,
    host: Any = None,
    wait_lock: bool = False,
    sets: Sequence[str] = (),
    listen: tuple[str | None, int | None] = (None, None),
    **overrides: Any,
) -> int:
    """The `up` command: load and validate the profile, preflight, then :func:`serve_deployment` (or print, with
    dry_run). ``listen``: `up --host/--port`, applied as the ``--set`` overrides they stand for (:func:`front_sets`).

    A real run holds the locks of what its server takes (kimi_serve.up.locks) from before the preflight until the
    server is stopped: the GPUs and the port are only taken minutes into a cold start, so a second `up` on them (or a
    `patches apply` under it) would pass every check meanwhile. The host lock is not taken.
    """
    from kimi_serve.profile.loader import load_profile, with_sets
    from kimi_serve.profile.topology import front_sets
    from kimi_serve.up.locks import up_locks

    console = console or Console()
    loaded = load_profile(profile_ref, sets)
    if listen != (None, None):  # --host/--port: the --set overrides of the front door (profile/topology.py)
        loaded = with_sets(loaded, *front_sets(loaded, *listen))
    deployment = plan_deployment(loaded)  # once: one server, or the replicas and the router
    profile = deployment.profile
    with contextlib.nullcontext() if dry_run else up_locks(deployment, wait=wait_lock):
        if host is None:  # the real host, the collective self-test included (docs/up.md)
            from kimi_serve.host.doctor import Host
            from kimi_serve.up.selftest import selftest

            host = Host(coldstart_probe="if-unknown", allreduce_selftest=selftest)
        preflight(profile, deployment.launch, console.info, host)
        log_path = log_file or default_log_file(profile.name)
        if log_file is None and not dry_run:
            prune(profile.name)  # at most KEEP_LOGS files per profile
        opts = UpOptions.from_profile(profile, verify=verify, **overrides)
        if dry_run:
            from kimi_serve.up.replicas import dry_run as dry_run_deployment

            return dry_run_deployment(deployment, opts, log_path, console)
        from kimi_serve.core.runs import run_record
        from kimi_serve.core.settings import state_root
        from kimi_serve.up.locks import run_fields

        with run_record(run_fields(deployment, log_path)):  # what runs now, for `status`: removed when `up` ends
            # the one server's start is timed against the prediction (docs/coldstart.md)
            clock = start_clock(profile, state_root(), console.info) if deployment.router is None else None
            return serve_deployment(deployment, opts, log_path, console, clock)
