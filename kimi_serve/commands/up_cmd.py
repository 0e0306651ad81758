"""`kimi-serve up` and `kimi-serve doctor` (docs/up.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from kimi_serve.commands.options import SetOpt, emit
from kimi_serve.core.settings import process_environ


def up(
    profile: str = typer.Option(
        ..., "--profile", "-p", help="Profile NAME (configs/NAME.yaml) or PATH to a YAML file."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Run the preflight and print the launch; start nothing."),
    no_verify: bool = typer.Option(False, "--no-verify", help="Skip the contract check once the server is ready."),
    log_file: Path | None = typer.Option(
        None,
        "--log-file",
        help="Server log (default: "
        "$KIMI_SERVE_STATE_DIR/logs/up-PROFILE-TIME.log, state dir default "
        "/var/lib/kimi-serve).",
    ),
    wait_lock: bool = typer.Option(
        False,
        "--wait-lock",
        help="When another kimi-serve command holds a port, GPU or the venv this server takes, wait for it instead "
        "of exiting 75.",
    ),
    sets: list[str] | None = SetOpt,
    host: str | None = typer.Option(
        None,
        "--host",
        metavar="ADDR",
        help="Listen on ADDR: --set server.host=ADDR (a replicated profile: router.host, the router being where "
        "clients connect; the replicas keep server.host).",
    ),
    port: int | None = typer.Option(
        None,
        "--port",
        min=1,
        max=65535,
        help="Listen on PORT: --set server.port=PORT (a replicated profile: router.port; the replicas keep "
        "server.port + i).",
    ),
    quiet: bool = typer.Option(
        False,
        "--quiet",
        "-q",
        help="Do not echo SGLang's own lines (they stay in the log "
        "file): only kimi-serve's phases, progress and verdict.",
    ),
) -> int:
    """Start the server in the foreground: preflight, start, progress, contract check, supervise (Ctrl-C stops it).

    `up` holds its ports, an SGLang server's GPUs and (shared) its venv until its server is stopped."""
    from kimi_serve.up.console import Console
    from kimi_serve.up.run import run_up

    return run_up(
        profile,
        dry_run=dry_run,
        verify=not no_verify,
        log_file=log_file,
        sets=sets or (),
        console=Console(echo_server=not quiet),
        wait_lock=wait_lock,
        listen=(host, port),
    )


def doctor(
    profile: str = typer.Option("prod", "--profile", "-p", help="Profile NAME or PATH whose host needs are checked."),
    as_json: bool = typer.Option(False, "--json", help="Write the JSON report to stdout."),
    sets: list[str] | None = SetOpt,
) -> int:
    """Check this host for the profile: GPUs (SM120), the driver the engine's CUDA needs, topology, P2P, IOMMU and
    ACS, the GPU device nodes and nvidia-uvm, nvcc and a C++ compiler, GPU memory, disk, model files, draft, SGLang
    version and patch set, API-key file, port, memlock and open-file limits, the collective self-test (each enabled
    all-reduce path against NCCL on the GPUs), the service user, whether that user can start the unit inside its
    sandbox (unit.reach), and, as root on a GPU host, CUDA inside that sandbox."""
    import os

    from kimi_serve.core.output import colour, paint_statuses
    from kimi_serve.host.doctor import Host, render
    from kimi_serve.profile.loader import load_profile
    from kimi_serve.service.preflight import doctor as run_doctor
    from kimi_serve.up.selftest import selftest

    host = Host(allreduce_selftest=selftest)
    report = run_doctor(load_profile(profile, sets or ()), host, process_environ(), as_root=os.geteuid() == 0)
    return emit(
        as_json,
        report.exit_code,
        lambda: paint_statuses(render(report), colour(sys.stdout)),
        command="doctor",
        data=report,
        findings=report.checks,
    )


def register(app: typer.Typer) -> None:
    app.command("up")(up)
    app.command("doctor")(doctor)
