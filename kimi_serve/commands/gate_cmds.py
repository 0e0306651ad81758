"""`wait-router` and `wait-joined`: what a deployment member's unit waits on in its ExecStartPost when the member's
start is not gated on the contract alone (docs/scale-out.md, "As services"; kimi_serve/service/gates.py); and
`selftest-gate`, a GPU unit's ExecStartPre: the collective self-test before SGLang starts (docs/up.md)."""

from __future__ import annotations

from pathlib import Path

import typer

from kimi_serve.commands.numbers import seconds_option
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.findings import FAIL, WARN
from kimi_serve.core.settings import current, process_environ


def wait_router(
    host: str = typer.Option(..., "--host", help="The router, HOST:PORT."),
    minimum: int = typer.Option(1, "--min", min=1, help="Healthy workers to wait for."),
    wait: float = seconds_option(60.0, "--wait", help="Seconds to wait at most."),
    api_key_file: Path | None = typer.Option(
        None,
        "--api-key-file",
        help="The deployment's key file (SGLang's --config YAML): its admin-api-key opens the router's /workers.",
    ),
) -> int:
    """Wait until SGLang's router reports --min healthy workers (GET /workers): the router unit's first ExecStartPost,
    since the router's own /health answers 200 with no worker at all."""
    from kimi_serve.core.keyfile import read_admin_key
    from kimi_serve.service.gates import wait_router as wait_core

    key = read_admin_key(api_key_file) if api_key_file else None
    ok, state = wait_core(host, key, minimum=minimum, wait=wait)
    typer.echo(f"router {host}: {state}" + ("" if ok else f" (wanted {minimum} healthy within {wait:g}s)"))
    return 0 if ok else 1


def wait_joined(
    leader: str = typer.Option(..., "--leader", help="Rank 0's store, nodes.leader_host:nodes.leader_port."),
    host: str = typer.Option("127.0.0.1", "--host", help="This node's server.host."),
    port: int = typer.Option(..., "--port", min=1, max=65535, help="This node's server.port (its dummy /health)."),
    wait: float = seconds_option(600.0, "--wait", help="Seconds to wait at most."),
    pid: int | None = typer.Option(
        None,
        "--pid",
        min=1,
        max=4194304,  # Linux's PID_MAX_LIMIT: no process has a larger id
        help="The node's server process (default: $MAINPID, which systemd sets for ExecStartPost).",
    ),
) -> int:
    """Wait until this node (rank >= 1 of a multi-node server) has joined rank 0: its process tree holds a TCP
    connection to rank 0's store at --leader AND its port answers (SGLang opens it once its schedulers are ready)."""
    from kimi_serve.core.net import connect_host
    from kimi_serve.profile.topology import parse_worker
    from kimi_serve.service.gates import wait_joined as wait_core

    target = pid or current().main_pid
    if target is None:
        raise KimiServeError(
            "no server process to check",
            where="--pid",
            hint="pass --pid PID (inside a unit's ExecStartPost systemd sets $MAINPID)",
        )
    parsed = parse_worker(leader)
    if parsed is None:
        raise KimiServeError(f"invalid leader address {leader!r}", where="--leader", hint="use HOST:PORT")
    connect = connect_host(host.strip("[]"))
    ok, state = wait_core(target, parsed[0], parsed[1], connect, port, wait)
    typer.echo(state)
    return 0 if ok else 1


def selftest_gate(
    python: str = typer.Option(..., "--python", help="The engine interpreter (the unit's ExecStart's)."),
    tp_size: int = typer.Option(..., "--tp-size", min=1, max=64, help="Ranks: the profile's parallel.tp_size."),
    paths: list[str] = typer.Option(
        [], "--path", help="An enabled all-reduce path (flashinfer_fusion, torch_symm_mem, pcie_ipc); repeat it."
    ),
    deadline: float = seconds_option(300.0, "--deadline", help="Seconds for the whole test at most."),
) -> int:
    """The collective self-test (docs/up.md) as a GPU unit's ExecStartPre: each --path against NCCL at --tp-size
    ranks in --python, with this process's environment (the unit's). Prints the findings, one per line."""
    import os

    from kimi_serve.host.allreduce_selftest import CODE, LABELS, SelftestPlan, default_sizes
    from kimi_serve.up.selftest import run_plan

    for path in paths:
        if path not in LABELS or path == "nccl":
            known = ", ".join(p for p in LABELS if p != "nccl")
            raise KimiServeError(f"unknown all-reduce path {path!r}", where="--path", hint=f"use one of: {known}")
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise KimiServeError(
            f"the engine interpreter {python} is not an executable file",
            where="--python",
            hint="kimi-serve engine install, then kimi-serve install-service (the unit names the profile's python)",
            exit_code=ExitCode.ENVIRONMENT,
        )
    plan = SelftestPlan(tp_size, tuple(dict.fromkeys(paths)), default_sizes(), deadline)
    found = run_plan(plan, python, process_environ())
    for f in found:
        typer.echo(f"{f.status} {CODE}: {f.line()}")
    if any(f.status == FAIL for f in found):
        return int(ExitCode.FAILED)
    if any(f.status == WARN and f.message.startswith("not run") for f in found):
        return int(ExitCode.ENVIRONMENT)
    return 0


def register(app: typer.Typer) -> None:
    app.command("wait-router")(wait_router)
    app.command("wait-joined")(wait_joined)
    app.command("selftest-gate", hidden=True)(selftest_gate)
