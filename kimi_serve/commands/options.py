"""The options several commands share, defined once (their --help says the same everywhere): the profile, --set,
--json, the unit name. A command with a different meaning for one of these words keeps its own option."""

from __future__ import annotations

from typing import Annotated

import typer

PROFILE_HELP = "Profile name (configs/NAME.yaml, or a directory on $KIMI_SERVE_PROFILE_PATH) or a YAML file path."
SET_HELP = "Override one profile key for this run: --set server.port=31000 (dotted key, YAML value; repeatable)."
JSON_HELP = "Print a JSON report."
UNIT_HELP = "Unit name (default: the profile's service.unit_name)."
UNIT_OR_DEFAULT_HELP = "Unit name (default: sglang-kimi)."
UNIT_PROFILE_HELP = "Take the unit name from this profile."

ProfileOpt = typer.Option(..., "--profile", "-p", help=PROFILE_HELP)
UnitProfileOpt = typer.Option(None, "--profile", "-p", help=UNIT_PROFILE_HELP)
SetOpt = typer.Option(None, "--set", metavar="KEY=VALUE", help=SET_HELP)
JsonOpt = typer.Option(False, "--json", help=JSON_HELP)
UnitOpt = typer.Option(None, "--unit-name", help=UNIT_HELP)
UnitOrDefaultOpt = typer.Option(None, "--unit-name", help=UNIT_OR_DEFAULT_HELP)
AsJson = Annotated[bool, typer.Option("--json", help=JSON_HELP)]  # the same --json, for Annotated signatures
