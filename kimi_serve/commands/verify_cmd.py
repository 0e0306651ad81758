"""`kimi-serve verify`: check that a running server keeps the Kimi API contract (docs/verify.md)."""

from __future__ import annotations

import sys
from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from kimi_serve.commands.numbers import number_option, seconds_option
from kimi_serve.commands.options import ModelOpt, SetOpt, emit
from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.report import to_json
from kimi_serve.core.suites import QUICK, SUITES

if TYPE_CHECKING:
    from kimi_serve.verify import VerifyOptions

Suite = Enum("Suite", {name: name for name in SUITES}, type=str)  # type: ignore[misc]  # quick, full, raw


def _progress_printer(target: str) -> Any:
    last: list[str] = []

    def show(phase: str, waited: float, detail: str) -> None:
        if last and last[-1] == phase:
            return
        last.append(phase)
        from kimi_serve.verify.wire import printable

        typer.echo(printable(f"verify: {target}: {detail} [{waited:.0f}s]"), err=True)  # detail: server text too

    return show


def verify(
    host: str | None = typer.Option(
        None,
        "--host",
        help="HOST:PORT, [V6]:PORT or http(s)://URL; 0.0.0.0 and "
        "[::] mean this machine (default 127.0.0.1:30000, or the --profile's "
        "deployment).",
    ),
    api_key: str | None = typer.Option(
        None, "--api-key", help="API key (else --api-key-file, else $KIMI_SERVE_API_KEY)."
    ),
    api_key_file: str | None = typer.Option(
        None,
        "--api-key-file",
        help="File with `api-key: KEY` (SGLang --config form) or the bare key; must be mode 600.",
    ),
    model: str | None = ModelOpt,
    wait: float = seconds_option(0.0, "--wait", help="Seconds to wait for /health to turn 200 (0: check once)."),
    timeout: float = seconds_option(
        180.0,
        "--timeout",
        lo=1.0,
        help="Seconds allowed for the whole check after readiness (the probes, then a few seconds of "
        "least-privilege checks).",
    ),
    suite: Suite = typer.Option(
        Suite(QUICK),
        "--suite",
        help="quick: tool, reasoning, thinking off, strict tools, the tool loop, the budget; full adds "
        "parallel, tool-result, 8 KB argument, more loops, load, raw + lossless; raw: /generate only.",
    ),
    expect_listener: list[int] = typer.Option(
        [],
        "--expect-listener",
        min=1,
        max=65535,
        help="A port besides the "
        "API port the server may listen on beyond loopback (repeatable; "
        "e.g. a separate metrics or multi-node port).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Write the JSON report (docs/verify.md) to stdout."),
    concurrency: int | None = typer.Option(
        None,
        "--concurrency",
        min=0,
        max=64,
        help="The load probe's concurrent streamed tool calls (default 8 in full, off in quick; 0: off).",
    ),
    max_tokens: int | None = typer.Option(
        None, "--max-tokens", min=16, help="Cap each probe's max_tokens (monitoring keeps checks light)."
    ),
    accept_floor: float | None = number_option(
        None,
        "--accept-floor",
        lo=1.0,
        hi=17.0,
        help="With speculative decoding on: warn when the draft's mean accept length is below this (default: the "
        "profile's speculative.accept_floor with --profile, else 2.3); 1.2 or less always fails (draft_dead).",
    ),
    metrics_file: Path | None = typer.Option(
        None,
        "--metrics-file",
        help="Also write the result as node_exporter "
        "textfile metrics to PATH, atomically (docs/monitoring.md); a run "
        "that finds another still writing PATH exits 75.",
    ),
    profile: str = typer.Option(
        "",
        "--profile",
        help="Without --host: check this profile's server (where a foreground `up` of it runs and no --set is "
        "given: that run's real endpoints, from its run record), and for a "
        "replicated one its router and then each replica (the key: the profile's key file "
        "unless --api-key/--api-key-file). With --host: only the profile label of the "
        "metrics and history lines.",
    ),
    unit_name: str | None = typer.Option(
        None, "--unit-name", help="Append the result to this unit's monitoring history (shown by `kimi-serve status`)."
    ),
    root: Path = typer.Option(
        Path("/"),
        "--root",
        help="With --unit-name: the root whose var/lib/kimi-serve holds the history (as status --root).",
    ),
    sets: list[str] | None = SetOpt,
) -> int:
    """Check that the server answers tool prompts with structured tool_calls and reasoning in reasoning_content.

    Then the least-privilege checks: the API key must not open SGLang's admin endpoints (admin_open_to_clients fails
    verify), and the server's processes should not listen beyond loopback except on the API port (stray_listener warns).
    """
    from kimi_serve.core.faults import checkpoint
    from kimi_serve.verify import VerifyOptions, parse_target, resolve_key, run_verify
    from kimi_serve.verify.draft import DEFAULT_FLOOR

    checkpoint("verify.run")  # test hook: raise-at=verify.run is a kimi-serve bug in verify (exit 70)
    if sets and (host is not None or not profile):
        raise KimiServeError("--set changes a profile: it needs --profile and no --host", where="--set")
    options = VerifyOptions(
        model=model,
        wait=wait,
        timeout=timeout,
        suite=suite.value,
        max_tokens=max_tokens,
        expected_ports=tuple(expect_listener),
        concurrency=concurrency,
        accept_floor=DEFAULT_FLOOR if accept_floor is None else accept_floor,
    )
    if host is None and profile:
        if metrics_file is not None or unit_name is not None:
            raise KimiServeError(
                "--metrics-file/--unit-name check one server",
                where="--profile",
                hint="pass --host HOST:PORT too (the monitoring units do)",
            )
        report = _verify_profile(
            profile, sets or (), api_key, api_key_file, options, floor_given=accept_floor is not None
        )
        return _print(report, as_json)
    host = host or "127.0.0.1:30000"
    target = parse_target(host)
    key = resolve_key(api_key, api_key_file)
    progress = _progress_printer(target.base_url) if sys.stderr.isatty() else None
    options = replace(options, api_key=key.value, key_source=key.source, progress=progress)
    if metrics_file is not None or unit_name is not None:
        from kimi_serve.service.monitor import Monitoring, run_monitored
        from kimi_serve.service.unit import unit_file_name

        unit = unit_file_name(unit_name, "--unit-name") if unit_name is not None else None
        report = run_monitored(host, Monitoring(metrics_file, unit, profile, root), options)
    else:
        report = run_verify(target, options)
    return _print(report, as_json)


def _verify_profile(
    ref: str, sets: Any, api_key: str | None, api_key_file: str | None, options: VerifyOptions, *, floor_given: bool
) -> Any:
    """`verify --profile P [--set K=V]`: the profile's own server, or its router and then each replica; without
    --set, where a foreground `up` of P runs, its real endpoints from its run record (docs/verify.md)."""
    from kimi_serve.core.runs import read_runs
    from kimi_serve.profile.deployment import client_urls, running_urls
    from kimi_serve.profile.loader import load_profile
    from kimi_serve.profile.member import Role
    from kimi_serve.router.client import admin_key_of, router_health
    from kimi_serve.verify import resolve_key
    from kimi_serve.verify.members import verify_deployment

    p = load_profile(ref, sets)
    urls, run = (client_urls(p), None) if sets else running_urls(p, read_runs())
    if run is not None:
        typer.echo(f"verify: {p.name}: the running `up` (pid {run.record.get('pid')}): {run.path}", err=True)
    key_file = api_key_file or p.server.api_key_file
    key = resolve_key(api_key, key_file, file_label="--api-key-file" if api_key_file else "profile key file")
    return verify_deployment(
        urls,
        replace(
            options,
            api_key=key.value,
            key_source=key.source,
            accept_floor=options.accept_floor if floor_given else p.speculative.accept_floor,
            spec_expected=p.speculative.enabled,
            family=p.model.family,
            preserve_thinking=p.model.preserve_thinking,
        ),
        routed=any(m.role is Role.ROUTER for m in urls),
        # /workers takes the control plane's admin key only (the key file's admin-api-key), never the clients'
        router_view=lambda url: to_json(router_health(url, admin_key_of(key_file))),
    )


def _print(report: Any, as_json: bool) -> int:
    """The report as JSON, a table on a terminal, else lines; a deployment's parts each under their name."""
    from kimi_serve.core.output import colour, paint_statuses
    from kimi_serve.verify.members import DeploymentReport, render_deployment
    from kimi_serve.verify.render import render_lines, render_table

    render = render_table if sys.stdout.isatty() else render_lines

    def text() -> str:
        out = render_deployment(report, render) if isinstance(report, DeploymentReport) else render(report)
        return paint_statuses(out, colour(sys.stdout))

    return emit(as_json, report.exit_code, text, document=report.to_json)


def register(app: typer.Typer) -> None:
    app.command("verify")(verify)
