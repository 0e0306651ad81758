"""Command modules. Each module defines ``register(app)`` and keeps its heavy imports inside the command bodies."""

from __future__ import annotations

import importlib

import typer

# Order is the order in `kimi-serve --help`.
_MODULES = [
    "up_cmd",
    "verify_cmd",
    "chat_cmd",
    "profile_cmds",
    "service_cmds",
    "gate_cmds",
    "prewarm_cmd",
    "bench_cmd",
    "capture_cmd",
    "simulate_cmd",
    "patches_cmd",
    "engine_cmd",
    "logs_cmd",
    "clients_cmd",
]


def register_all(app: typer.Typer) -> None:
    for name in _MODULES:
        importlib.import_module(f"kimi_serve.commands.{name}").register(app)
    from kimi_serve.commands.exit_codes import add_to_help

    add_to_help(app)
