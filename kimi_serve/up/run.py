"""`kimi-serve up`: preflight, start, cold-start progress, early failure detection, contract check, supervision.

Exit codes (docs/up.md): 0 the server exited on its own with status 0; 1 contract check failed (server stopped);
3 never ready (startup.timeout, or distributed init hung); 4 the server exited or crashed, or a failure was seen in its
log (it is stopped); 5 preflight failed (nothing started); 130 stopped on request (SIGINT/SIGTERM) and the server
stopped cleanly. "Exit with the server's status": a requested stop whose server did not end cleanly (it needed SIGKILL
or exited with another status) is 4, not 130.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kimi_serve.check.deployment import Deployment, plan_deployment
from kimi_serve.check.launch import server_env
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.host.preflight import preflight
from kimi_serve.process.child import Server
from kimi_serve.profile.launch import Launch
from kimi_serve.up.console import Console
from kimi_serve.up.logfiles import default_log_file, prune
from kimi_serve.up.options import UpOptions
from kimi_serve.up.phases import PhaseClock, start_clock
from kimi_serve.up.watch import Signals, Watch


def serve(launch: Launch, opts: UpOptions, log_path: Path, console: Console, clock: PhaseClock | None = None) -> int:
    """Start ``launch``, watch it to readiness and the contract check, supervise; return the exit code.

    Raises :class:`KimiServeError` for every non-zero outcome but an interrupt (which returns 130).
    """
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.touch()
    except OSError as exc:
        raise KimiServeError(
            f"cannot write the log file {log_path}: {exc.strerror or exc}",
            hint="pass --log-file PATH or set KIMI_SERVE_STATE_DIR",
            exit_code=ExitCode.ENVIRONMENT,
        ) from None
    console.info(f"starting {launch.engine} (log: {log_path})")
    console.info("$ " + launch.shell())
    try:
        server = Server.start(list(launch.argv), server_env(launch), log_path)
    except OSError as exc:
        raise KimiServeError(
            f"cannot start {launch.argv[0]}: {exc.strerror or exc}",
            hint="check the profile's python",
            exit_code=ExitCode.ENVIRONMENT,
        ) from None
    console.info(f"server pid {server.pid} (own session and process group)")
    watch = Watch(server, launch, opts, console, log_path)
    if clock is not None:  # the prediction and the record (docs/coldstart.md)
        clock.started = clock.at["launch"] = watch.started
        watch.phases = clock
    outcome = None
    try:
        with Signals() as signals:
            outcome = watch.run(signals)
    finally:
        console.end_progress()
        if server.poll() is None:  # an error in `up` itself: never leave the server behind
            server.stop(opts.stop_grace_s)
        server.close()
        watch.phases.settled(outcome.code.name.lower() if outcome else "up_error")
    if outcome.code in (ExitCode.OK, ExitCode.INTERRUPTED):
        console.info(outcome.message)
        return int(outcome.code)
    raise KimiServeError(outcome.message, where=f"log {log_path}", hint=outcome.hint or None, exit_code=outcome.code)


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
    **overrides: Any,
) -> int:
    """The `up` command: load and validate the profile, preflight, then :func:`serve` (or print, with dry_run).

    A real run holds the locks of what its server takes (kimi_serve.up.locks: its ports, an SGLang server's GPUs and,
    shared, its venv) from before the preflight until the server is stopped: the GPUs and the port are only taken
    minutes into a cold start, so a second `up` on them (or a `patches apply` under the running server) started
    meanwhile would pass every check; it exits 75 instead (or waits, with ``wait_lock``). The host lock is not taken:
    a service change, or a change of another venv, runs beside it.
    """
    from kimi_serve.profile.loader import load_profile
    from kimi_serve.up.locks import up_locks

    console = console or Console()
    deployment = plan_deployment(load_profile(profile_ref, sets))  # once: one server, or the replicas and the router
    if dry_run:
        return _up(deployment, console, host, dry_run, verify, log_file, overrides)
    with up_locks(deployment, wait=wait_lock):
        return _up(deployment, console, host, dry_run, verify, log_file, overrides)


def _up(
    deployment: Deployment,
    console: Console,
    host: Any,
    dry_run: bool,
    verify: bool,
    log_file: Path | None,
    overrides: dict[str, Any],
) -> int:
    profile = deployment.profile
    preflight(profile, deployment.launch, console.info, host)
    log_path = log_file or default_log_file(profile.name)
    if log_file is None and not dry_run:
        prune(profile.name)  # at most KEEP_LOGS files per profile
    opts = UpOptions.from_profile(profile, verify=verify, **overrides)
    if dry_run:
        from kimi_serve.up.replicas import dry_run as dry_run_deployment

        return dry_run_deployment(deployment, opts, log_path, console)
    from kimi_serve.core.runs import run_record
    from kimi_serve.up.locks import run_fields

    with run_record(run_fields(deployment, log_path)):  # what runs now, for `status`: removed when `up` ends
        return _serve(deployment, console, opts, log_path)


def _serve(deployment: Deployment, console: Console, opts: UpOptions, log_path: Path) -> int:
    """`up`'s one body: a deployment of one member is the one server's watch; replicas are supervised behind SGLang's
    router (up/supervisor.py)."""
    from kimi_serve.core.settings import state_root

    if deployment.router is not None:
        from kimi_serve.up.supervisor import serve_deployment

        return serve_deployment(deployment, opts, log_path, console)
    clock = start_clock(deployment.profile, state_root(), console.info)
    return serve(deployment.launch, opts, log_path, console, clock)
