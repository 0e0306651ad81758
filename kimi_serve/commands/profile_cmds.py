"""`show`, `render` and `check`: a profile as merged YAML, as a validated launch, and through every validation layer."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from kimi_serve.check.report import CheckReport

from kimi_serve.commands.options import JsonOpt, ProfileOpt, SetOpt, emit
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.report import finding_lines


def show(profile: str = ProfileOpt, sets: list[str] | None = SetOpt) -> int:
    """Print the fully merged profile as standalone YAML (no extends)."""
    from kimi_serve.profile.loader import dump_profile, load_profile

    typer.echo(dump_profile(load_profile(profile, sets or ())), nl=False)
    return 0


def render(
    profile: str = ProfileOpt,
    as_json: bool = typer.Option(
        False,
        "--json",
        help='Print the JSON envelope with "argv": [...] and "env": {...} '
        '(with a router also "launches", multi-node also "node"; --format k8s: "manifests": docs/json.md).',
    ),
    node_rank: int | None = typer.Option(
        None,
        "--node-rank",
        min=0,
        metavar="R",
        help="Render host R's launch of a multi-node profile (overrides "
        "nodes.rank; 0 serves the API, R >= 1 only joins rank 0).",
    ),
    fmt: str = typer.Option(
        "launch",
        "--format",
        metavar="launch|k8s",
        help="launch: the command line(s); k8s: Kubernetes manifests (YAML) for every pod of the deployment "
        "(docs/kubernetes.md).",
    ),
    namespace: str = typer.Option("default", "--namespace", metavar="NS", help="--format k8s: the namespace."),
    image: str | None = typer.Option(
        None,
        "--image",
        metavar="IMG",
        help="--format k8s: the container image (kimi-serve in the engine venv, docs/kubernetes.md); "
        "default kimi-serve:VERSION.",
    ),
    sets: list[str] | None = SetOpt,
) -> int:
    """Print the validated launch command and environment (fast checks only; `check` runs them all). A replicated
    profile prints the router's launch and each replica's, each under a # comment naming it. --format k8s prints
    the Kubernetes manifests instead (the same validated launch in every pod)."""
    from kimi_serve.profile.loader import load_profile

    if fmt not in ("launch", "k8s"):
        raise KimiServeError(
            f"--format {fmt!r}: not a format", hint="pass --format launch or --format k8s", exit_code=ExitCode.USAGE
        )
    if fmt == "k8s":
        if node_rank is not None:
            raise KimiServeError(
                "--node-rank with --format k8s: the manifests hold every rank (LeaderWorkerSet's worker index)",
                hint="drop --node-rank",
                exit_code=ExitCode.USAGE,
            )
        from kimi_serve import __version__
        from kimi_serve.k8s.manifests import render_manifests, to_yaml

        p = load_profile(profile, sets or ())
        docs = render_manifests(p, namespace=namespace, image=image or f"kimi-serve:{__version__}")
        return emit(as_json, 0, lambda: typer.echo(to_yaml(docs), nl=False), command="render", data={"manifests": docs})
    from kimi_serve.check.launch import plan_deployment

    plan = plan_deployment(load_profile(profile, sets or ()), node_rank)
    return emit(as_json, 0, plan.text, command="render", data=plan.to_json)


def check(
    profile: str = ProfileOpt,
    offline: bool = typer.Option(False, "--offline", help="Skip host facts (model files, GPUs, API-key file): for CI."),
    contract: bool = typer.Option(
        False,
        "--contract",
        help="Also start the simulator with the profile's exact flags "
        "and run the verify suite against it (the smoke test before a restart).",
    ),
    as_json: bool = JsonOpt,
    sets: list[str] | None = SetOpt,
) -> int:
    """Run every validation that needs no GPU; exit 0 only if nothing fails (1 host/contract, 2 invalid profile)."""
    from kimi_serve.check.report import run_check
    from kimi_serve.profile.loader import load_profile

    tty = sys.stderr.isatty() and not as_json
    progress = (lambda m: typer.echo(m, err=True)) if tty else None
    report = run_check(load_profile(profile, sets or ()), offline=offline, contract=contract, progress=progress)
    return emit(as_json, report.exit_code, lambda: _check_text(report), command="check", data=report)


def _check_text(report: CheckReport) -> str:
    """Each finding on its line (`ok   [rules] ...`, coloured on a terminal), then the verdict and the counts."""
    from kimi_serve.core.output import colour, paint_statuses

    counts = {s: sum(f.status == s for f in report.findings) for s in ("pass", "warn", "fail", "skip")}
    verdict = "PASSED" if report.exit_code == 0 else "FAILED"
    on = colour(sys.stdout)
    lines = [paint_statuses(line, on) for line in finding_lines(report.findings)]
    return "\n".join(
        [
            *lines,
            f"check {verdict}: {counts['pass']} passed, {counts['warn']} warning{'' if counts['warn'] == 1 else 's'}, "
            f"{counts['fail']} failed, "
            f"{counts['skip']} skipped ({report.source})",
        ]
    )


def register(app: typer.Typer) -> None:
    app.command()(show)
    app.command()(render)
    app.command()(check)
