"""The CLI's fast paths import nothing heavy (speed itself is measured in benchmarks/bench_cli_startup.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ["sglang", "torch", "jinja2", "requests", "jsonschema", "openai", "uvicorn", "fastapi"]
PROBE = """
import contextlib, io, json, sys
from kimi_serve.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    code = main({args!r})
print(json.dumps({{"code": code, "heavy": sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r}))}}))
"""


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["render", "--profile", "prod", "--json"],
        ["show", "--profile", "prod"],
        ["verify", "--help"],
        ["render", "--profile", "prod"],
        ["render", "--profile", "prod-tp16", "--format", "k8s", "--image", "registry.example/kimi-serve:1"],
        ["client-config", "--client", "opencode", "--profile", "prod-dp2", "--json"],
    ],
)
def test_fast_paths_import_nothing_heavy(args):
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(args=args, heavy=HEAVY)], capture_output=True, text=True, check=True
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["code"] == 0
    assert result["heavy"] == [], f"{args} imported {result['heavy']}"


def test_version(cli):
    res = cli("--version")
    assert res.code == 0 and res.out.startswith("kimi-serve ")
