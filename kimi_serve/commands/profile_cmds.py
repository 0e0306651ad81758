"""`show`, `render` and `check`: a profile as merged YAML, as a validated launch, and through every validation layer."""

from __future__ import annotations

import sys

import typer

PROFILE_HELP = "Profile name (configs/NAME.yaml, or a directory on $KIMI_SERVE_PROFILE_PATH) or a YAML file path."

SET_HELP = "Override one profile key for this run: --set server.port=31000 (dotted key, YAML value; repeatable)."
SetOpt = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_HELP)

_MARK = {"pass": "ok  ", "warn": "WARN", "fail": "FAIL", "skip": "skip"}


def show(
    profile: str = typer.Option(..., "--profile", "-p", help=PROFILE_HELP), sets: list[str] | None = SetOpt
) -> int:
    """Print the fully merged profile as standalone YAML (no extends)."""
    from kimi_serve.profile.loader import dump_profile, load_profile

    typer.echo(dump_profile(load_profile(profile, sets or ())), nl=False)
    return 0


def render(
    profile: str = typer.Option(..., "--profile", "-p", help=PROFILE_HELP),
    as_json: bool = typer.Option(
        False,
        "--json",
        help='Print the JSON envelope with "argv": [...] and "env": {...} '
        '(with a router also "launches", multi-node also "node": docs/json.md).',
    ),
    node_rank: int | None = typer.Option(
        None,
        "--node-rank",
        min=0,
        metavar="R",
        help="Render host R's launch of a multi-node profile (overrides "
        "nodes.rank; 0 serves the API, R >= 1 only joins rank 0).",
    ),
    sets: list[str] | None = SetOpt,
) -> int:
    """Print the validated launch command and environment (fast checks only; `check` runs them all). A replicated
    profile prints the router's launch and each replica's, each under a # comment naming it."""
    from kimi_serve.check.deployment import render_plan
    from kimi_serve.profile.loader import load_profile

    plan = render_plan(load_profile(profile, sets or ()), node_rank)
    if as_json:
        import json

        from kimi_serve.core.output import envelope

        typer.echo(json.dumps(envelope("render", 0, plan.to_json()), indent=2))
    else:
        typer.echo(plan.text())
    return 0


def check(
    profile: str = typer.Option(..., "--profile", "-p", help=PROFILE_HELP),
    offline: bool = typer.Option(False, "--offline", help="Skip host facts (model files, GPUs, API-key file): for CI."),
    contract: bool = typer.Option(
        False,
        "--contract",
        help="Also start the simulator with the profile's exact flags "
        "and run the verify suite against it (the smoke test before a restart).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON report."),
    sets: list[str] | None = SetOpt,
) -> int:
    """Run every validation that needs no GPU; exit 0 only if nothing fails (1 host/contract, 2 invalid profile)."""
    from kimi_serve.check.report import run_check
    from kimi_serve.profile.loader import display_path

    tty = sys.stderr.isatty() and not as_json
    progress = (lambda m: typer.echo(m, err=True)) if tty else None
    report = run_check(profile, offline=offline, contract=contract, progress=progress, sets=sets or ())
    if as_json:
        import json

        from kimi_serve.core.output import envelope

        typer.echo(json.dumps(envelope("check", report.exit_code, report.to_json()), indent=2))
        return int(report.exit_code)
    for f in report.findings:
        typer.echo(f"{_MARK[f.status]} [{f.layer}] {f.line()}")
    counts = {s: sum(f.status == s for f in report.findings) for s in _MARK}
    verdict = "PASSED" if report.exit_code == 0 else "FAILED"
    typer.echo(
        f"check {verdict}: {counts['pass']} passed, {counts['warn']} warnings, {counts['fail']} failed, "
        f"{counts['skip']} skipped ({display_path(report.profile.source)})"
    )
    return int(report.exit_code)


def register(app: typer.Typer) -> None:
    app.command()(show)
    app.command()(render)
    app.command()(check)
