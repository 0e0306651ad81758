"""`kimi-serve capture`: the served model's exact tokens for a prompts file, as SpecForge training records
(docs/capture.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from kimi_serve.commands.numbers import seconds_option
from kimi_serve.commands.options import PROFILE_HELP, ApiKeyFileOpt, ApiKeyOpt, ModelOpt, SetOpt, emit
from kimi_serve.core.errors import ExitCode
from kimi_serve.core.findings import FAIL, Finding
from kimi_serve.core.report import to_json

MAX_CONCURRENCY = 256


def capture(
    prompts: Path = typer.Option(
        ...,
        "--prompts",
        metavar="FILE",
        help="JSONL of chat requests (messages, optional tools, thinking, sampling fields, id) or ShareGPT rows.",
    ),
    out: Path = typer.Option(
        ..., "--out", metavar="DIR", help="Output folder: records.jsonl, rejects.jsonl (resumable: rerun to finish)."
    ),
    host: str | None = typer.Option(
        None,
        "--host",
        help="HOST:PORT, [V6]:PORT or http(s)://URL (default 127.0.0.1:30000, or the --profile's front door).",
    ),
    profile: str | None = typer.Option(None, "--profile", "-p", help=PROFILE_HELP),
    sets: list[str] | None = SetOpt,
    concurrency: int = typer.Option(4, "--concurrency", min=1, max=MAX_CONCURRENCY, help="Requests in flight."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Only the file's first N prompts."),
    api_key: str | None = ApiKeyOpt,
    api_key_file: str | None = ApiKeyFileOpt,
    model: str | None = ModelOpt,
    timeout: float = seconds_option(600.0, "--timeout", lo=1.0, help="Seconds allowed for each prompt's answer."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary in the JSON envelope (docs/json.md)."),
) -> int:
    """Send each prompt through the server's chat endpoint with SGLang's id options and write one record per prompt:
    input_ids (prompt then output, as served), loss_mask (0 prompt, 1 output), meta. The parsed fields must rebuild
    the output ids (lossless check), else the prompt goes to rejects.jsonl with the reason."""
    from kimi_serve.capture.run import CaptureOptions, run_capture
    from kimi_serve.commands.chat_cmd import front_door
    from kimi_serve.verify.chat import served_model

    target, key = front_door(host, profile, sets or (), api_key, api_key_file)
    opts = CaptureOptions(target, key, prompts, out, concurrency, limit, model, profile, timeout)

    def say(line: str) -> None:
        typer.echo(f"capture: {line}", err=True)

    books, stopped = run_capture(
        opts, lambda: served_model(target, key, min(timeout, 30.0)), say if sys.stderr.isatty() else None
    )
    failed = sum(books.failures.values())
    code = ExitCode.UNREACHABLE if stopped else ExitCode.FAILED if failed else ExitCode.OK

    def findings() -> list[Finding]:
        fix = f"read {out / 'rejects.jsonl'} (each reject's reason); the same command retries them"
        found = [
            Finding("capture", cause, FAIL, f"{n} prompt(s) failed: {cause}", fix)
            for cause, n in sorted(books.failures.items())
        ]
        if stopped:
            found.append(Finding("capture", "unreachable", FAIL, stopped, "start the server, then rerun"))
        return found

    def text() -> str:
        if stopped:
            say(f"stopped: {stopped}; the same command resumes")
        return "\n".join([*books.lines(), f"output: {out / 'records.jsonl'}"])

    return emit(
        as_json,
        code,
        text,
        command="capture",
        data=lambda: {"out": str(out), "server": target.base_url, **to_json(books.summary())},
        findings=findings(),
    )


def register(app: typer.Typer) -> None:
    app.command("capture")(capture)
