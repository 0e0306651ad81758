"""`kimi-serve chat`: a smoke client: one prompt, or a line-by-line conversation, streamed (docs/verify.md, "chat")."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from kimi_serve.commands.numbers import seconds_option
from kimi_serve.commands.options import PROFILE_HELP, ApiKeyFileOpt, ApiKeyOpt, ModelOpt, SetOpt, set_needs_profile
from kimi_serve.core.errors import ExitCode, KimiServeError


def chat(
    prompt: str | None = typer.Argument(
        None, help="The prompt. Without it: read one prompt from stdin, or on a terminal talk line by line."
    ),
    host: str | None = typer.Option(
        None,
        "--host",
        help="HOST:PORT, [V6]:PORT or http(s)://URL (default 127.0.0.1:30000, or the --profile's front door: "
        "the router of a replicated profile).",
    ),
    profile: str | None = typer.Option(None, "--profile", "-p", help=PROFILE_HELP),
    sets: list[str] | None = SetOpt,
    api_key: str | None = ApiKeyOpt,
    api_key_file: str | None = ApiKeyFileOpt,
    model: str | None = ModelOpt,
    max_tokens: int | None = typer.Option(None, "--max-tokens", min=1, help="Cap the answer's tokens."),
    tools: Path | None = typer.Option(
        None,
        "--tools",
        metavar="FILE",
        help="A JSON file with the tools to offer: a list of OpenAI tool objects "
        '({"type": "function", "function": {"name": ..., "parameters": {...}}}).',
    ),
    timeout: float = seconds_option(300.0, "--timeout", lo=1.0, help="Seconds allowed for each answer."),
) -> int:
    """Send a prompt and stream the answer: the reasoning apart (on stderr: dim on a terminal, else headed
    [reasoning]), tool calls as name and JSON arguments. Says so when the server returns raw Kimi markup (exit 1)."""
    from kimi_serve.core.output import colour
    from kimi_serve.verify.chat import Display, chat_turn, served_model

    target, key = front_door(host, profile, sets or (), api_key, api_key_file)
    interactive = prompt is None and sys.stdin.isatty()
    if prompt is None and not interactive:
        prompt = sys.stdin.read(1 << 20).strip()  # one prompt from a pipe (1 MiB at most)
    if prompt is not None and not prompt.strip():
        raise KimiServeError("the prompt is empty", where="PROMPT", hint="pass a prompt", exit_code=ExitCode.USAGE)
    offered = _tools(tools) if tools is not None else None
    chosen = model or served_model(target, key, min(timeout, 30.0))
    display = Display(sys.stdout, sys.stderr, colour=colour(sys.stderr))
    history: list[dict[str, Any]] = []
    raw = False
    for text in [prompt] if prompt is not None else _lines(chosen, target.base_url):
        history.append({"role": "user", "content": text})
        turn = chat_turn(
            target,
            history,
            model=chosen,
            api_key=key,
            timeout=timeout,
            display=display,
            max_tokens=max_tokens,
            tools=offered,
        )
        history.append(turn.message())
        raw = raw or turn.raw_markup
    return int(ExitCode.FAILED if raw else ExitCode.OK)


def _lines(model: str, url: str) -> Any:
    """The prompts of an interactive session, one a line, until EOF (Ctrl-D) or /exit."""
    typer.echo(f"chat: {model} at {url}; one prompt a line, Ctrl-D or /exit to end", err=True)
    while True:
        try:
            line = input("> ")
        except EOFError:
            typer.echo("", err=True)
            return
        if line.strip() in ("/exit", "/quit"):
            return
        if line.strip():
            yield line


def front_door(host: str | None, profile: str | None, sets: Any, api_key: str | None, key_file: str | None) -> Any:
    """The server's address and the API key: --host, else the profile's front door, else 127.0.0.1:30000; the key
    as verify resolves it (--api-key, the key file, $KIMI_SERVE_API_KEY). --host and --profile together, or --set
    without --profile, are refused (exit 2)."""
    from kimi_serve.verify import parse_target, resolve_key

    if host is not None and profile:
        raise KimiServeError(
            "--host and --profile both name the server", hint="pass one of them", exit_code=ExitCode.USAGE
        )
    set_needs_profile(sets, profile)

    if profile:
        from kimi_serve.profile.deployment import client_urls
        from kimi_serve.profile.loader import load_profile

        p = load_profile(profile, sets)
        url = next(iter(client_urls(p).values()))  # the router when routed, else the one server
        return parse_target(url), resolve_key(api_key, key_file or p.server.api_key_file).value
    return parse_target(host or "127.0.0.1:30000"), resolve_key(api_key, key_file).value


def _tools(path: Path) -> list[dict[str, Any]]:
    """The --tools file: a JSON list of tool objects, each with a function name (else exit 2 naming the file)."""
    from kimi_serve.core.inputs import read_json

    try:
        data = read_json(path)
    except (OSError, ValueError) as exc:
        raise KimiServeError(
            f"{path}: {exc}", where="--tools", hint="pass a readable JSON file", exit_code=ExitCode.USAGE
        ) from None
    named = isinstance(data, list) and all(
        isinstance(t, dict) and isinstance(t.get("function"), dict) and isinstance(t["function"].get("name"), str)
        for t in data
    )
    if not named or not data:
        raise KimiServeError(
            f"{path} is not a list of tools",
            where="--tools",
            hint='write a JSON list such as [{"type": "function", "function": {"name": "get_weather", '
            '"parameters": {"type": "object", "properties": {}}}}]',
            exit_code=ExitCode.USAGE,
        )
    return [{"type": "function", **t} for t in data]


def register(app: typer.Typer) -> None:
    app.command("chat")(chat)
