"""`kimi-serve client-config`: a configuration that works for one agent client (docs/clients.md)."""

from __future__ import annotations

import typer

from kimi_serve.clients.configs import CLIENTS
from kimi_serve.commands.options import PROFILE_HELP, SetOpt, emit, set_needs_profile
from kimi_serve.core.report import to_json


def client_config(
    client: str = typer.Option(..., "--client", "-c", metavar="NAME", help=f"The client: {', '.join(CLIENTS)}."),
    profile: str | None = typer.Option(
        None,
        "--profile",
        "-p",
        help=PROFILE_HELP + " Default: the shipped prod profile's values, each one reported as assumed (then "
        "--host is required).",
    ),
    host: str | None = typer.Option(
        None,
        "--host",
        metavar="HOST[:PORT]|URL",
        help="Where clients reach the server (a name or address, never a wildcard such as 0.0.0.0, [::] or 0x0). "
        "Default: the profile's address "
        "(the router's for a replicated profile; a wildcard bind: this machine's loopback).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the JSON envelope (docs/json.md)."),
    sets: list[str] | None = SetOpt,
) -> int:
    """Print a configuration that works for one agent client: its file or snippet on stdout (the base URL, the served
    model, the key's environment variable NAME, the served limits), notes on stderr (the key, the limits, where
    reasoning comes back, how to turn thinking off with that client, what was assumed)."""
    from kimi_serve.check.launch import validated_launch
    from kimi_serve.clients import client_config as build
    from kimi_serve.profile.loader import load_profile

    set_needs_profile(sets, profile)
    loaded = load_profile(profile, sets or ()) if profile else None
    if loaded is not None:
        validated_launch(loaded)  # check's fast rules first: a profile check rejects gets no configuration (exit 2)
    endpoint, config = build(client, loaded, host)

    def text() -> None:
        typer.echo(config.text, nl=False)
        typer.echo(f"# {config.client}: {config.path}", err=True)
        for note in (*config.notes, f"thinking off: {config.thinking_off}"):
            typer.echo(f"# {note}", err=True)
        for item in endpoint.assumed:
            typer.echo(f"# assumed: {item}", err=True)

    return emit(as_json, 0, text, command="client-config", data={**to_json(endpoint), **config.to_json()})


def register(app: typer.Typer) -> None:
    app.command("client-config")(client_config)
