"""The options several commands share, defined once (their --help says the same everywhere): the profile, --set,
--json, the unit name. A command with a different meaning for one of these words keeps its own option. And what
--json chooses between, in one place: :func:`emit` prints a command's result as the JSON envelope or as its text."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Annotated, Any

import typer

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.report import to_json

PROFILE_HELP = "Profile name (configs/NAME.yaml, or a directory on $KIMI_SERVE_PROFILE_PATH) or a YAML file path."
SET_HELP = "Override one profile key for this run: --set server.port=31000 (dotted key, YAML value; repeatable)."
JSON_HELP = "Print a JSON report."

ProfileOpt = typer.Option(..., "--profile", "-p", help=PROFILE_HELP)
UnitProfileOpt = typer.Option(None, "--profile", "-p", help="Take the unit name from this profile.")
SetOpt = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_HELP)
JsonOpt = typer.Option(False, "--json", help=JSON_HELP)
UnitOpt = typer.Option(None, "--unit-name", help="Unit name (default: the profile's service.unit_name).")
UnitOrDefaultOpt = typer.Option(None, "--unit-name", help="Unit name (default: sglang-kimi).")
AsJson = Annotated[bool, typer.Option("--json", help=JSON_HELP)]  # the same --json, for Annotated signatures
# chat's and capture's key and model (verify's --api-key help differs: it reads no profile's key file)
ApiKeyOpt = typer.Option(
    None, "--api-key", help="API key (else --api-key-file, else the profile's key file, else $KIMI_SERVE_API_KEY)."
)
ApiKeyFileOpt = typer.Option(None, "--api-key-file", help="File with `api-key: KEY` or the bare key; must be mode 600.")
ModelOpt = typer.Option(None, "--model", help="Model id; default: the first one /v1/models lists.")


def set_needs_profile(sets: Any, profile: str | None) -> None:
    """``--set`` overrides a profile's key: refused (exit 2) without ``--profile``."""
    if sets and not profile:
        raise KimiServeError("--set without --profile", hint="pass --profile P with --set", exit_code=ExitCode.USAGE)


def emit(
    as_json: bool,
    exit_code: int,
    text: Callable[[], str | None],
    *,
    command: str = "",
    data: Any = None,
    findings: Iterable[Any] | None = None,
    document: Callable[[], str] | None = None,
) -> int:
    """The one place a command's result is printed, so no command branches on --json: with it, the envelope
    (core/output.py, docs/json.md) of ``command`` around ``data`` (a result dataclass, derived by core/report.py's
    ``to_json``; a mapping; or a function that returns one, called only for JSON) and its ``findings`` (default:
    ``data``'s), or the ``document`` a result writes itself (verify's); else ``text()``, printed unless it printed
    itself (None). Returns ``exit_code``, what the command exits with."""
    if as_json:
        if document is not None:
            typer.echo(document())
        else:
            from kimi_serve.core.output import dumps, envelope

            body = to_json(data() if callable(data) else data)
            typer.echo(dumps(envelope(command, exit_code, body, findings)))
    else:
        out = text()
        if out is not None:
            typer.echo(out)
    return int(exit_code)
