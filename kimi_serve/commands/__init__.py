"""Command modules. Each module defines ``register(app)`` and keeps its heavy imports inside the command bodies."""

from __future__ import annotations

import importlib

import typer

# Order is the order in `kimi-serve --help`.
_MODULES = ["profile_cmds", "verify_cmd", "simulate_cmd", "patches_cmd", "service_cmds", "up_cmd"]


def register_all(app: typer.Typer) -> None:
    for name in _MODULES:
        try:
            module = importlib.import_module(f"kimi_serve.commands.{name}")
        except ModuleNotFoundError as exc:  # a command module not written yet
            if exc.name == f"kimi_serve.commands.{name}":
                continue
            raise
        module.register(app)
