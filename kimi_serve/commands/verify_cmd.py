"""`kimi-serve verify`: check that a running server keeps the Kimi API contract (docs/verify.md)."""

from __future__ import annotations

import sys
from enum import Enum
from typing import Any

import typer


class Suite(str, Enum):
    quick = "quick"
    full = "full"


def _progress_printer(target: str) -> Any:
    last: list[str] = []

    def show(phase: str, waited: float, detail: str) -> None:
        if last and last[-1] == phase:
            return
        last.append(phase)
        typer.echo(f"verify: {target}: {detail} [{waited:.0f}s]", err=True)

    return show


def verify(
    host: str = typer.Option("127.0.0.1:30000", "--host", help="HOST:PORT, [V6]:PORT or http(s)://URL; 0.0.0.0 and "
                             "[::] mean this machine."),
    api_key: str | None = typer.Option(None, "--api-key", help="API key (also: $KIMI_SERVE_API_KEY, --api-key-file)."),
    api_key_file: str | None = typer.Option(None, "--api-key-file", help="File with `api-key: KEY` (SGLang --config"
                                            " form) or the bare key; must be mode 600."),
    model: str | None = typer.Option(None, "--model", help="Model id; default: the first one /v1/models lists."),
    wait: float = typer.Option(0.0, "--wait", min=0.0, help="Seconds to wait for /health to turn 200 (0: check once)."),
    timeout: float = typer.Option(180.0, "--timeout", min=1.0, help="Seconds allowed for all probes together."),
    suite: Suite = typer.Option(Suite.quick, "--suite", help="quick: tool + reasoning; full adds instant, parallel, "
                                "tool-result, 8 KB argument."),
    expect_listener: list[int] = typer.Option([], "--expect-listener", min=1, max=65535, help="A port besides the "
                                              "API port the server may listen on beyond loopback (repeatable; "
                                              "e.g. a separate metrics or multi-node port)."),
    as_json: bool = typer.Option(False, "--json", help="Write the JSON report (docs/verify.md) to stdout."),
) -> int:
    """Check that the server answers tool prompts with structured tool_calls and reasoning in reasoning_content.

    Then the least-privilege checks: the API key must not open SGLang's admin endpoints (admin_open_to_clients fails
    verify), and the server's processes should not listen beyond loopback except on the API port (stray_listener warns).

    Exit codes: 0 contract holds, 1 contract violated, 2 usage, 3 unreachable or not ready.
    """
    from kimi_serve.verify import parse_target, resolve_api_key, run_verify
    from kimi_serve.verify.render import render_lines, render_table

    target = parse_target(host)
    key = resolve_api_key(api_key, api_key_file)
    progress = _progress_printer(target.base_url) if sys.stderr.isatty() else None
    report = run_verify(target, api_key=key, model=model, wait=wait, timeout=timeout, suite=suite.value,
                        progress=progress, expected_ports=tuple(expect_listener))
    if as_json:
        typer.echo(report.to_json())
    else:
        typer.echo(render_table(report) if sys.stdout.isatty() else render_lines(report))
    return report.exit_code


def register(app: typer.Typer) -> None:
    app.command("verify")(verify)
