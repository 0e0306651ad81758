"""Host facts a profile depends on (skipped by `check --offline`): model files, draft, API-key file, interpreter."""

from __future__ import annotations

import os
from pathlib import Path

from kimi_serve.check.auth_rules import admin_key_required
from kimi_serve.core.findings import FAIL, PASS, WARN, Finding
from kimi_serve.core.keyfile import admin_key_problem, key_file_problem, keyfile_recipe
from kimi_serve.host.facts import model_findings
from kimi_serve.profile.loader import Profile
from kimi_serve.sglang.site import engine_install_hint, too_old


def _simulator_dir(key: str, path: str | None, what: str) -> Finding:
    """The simulator reads only config.json (and a tokenizer if present); absent, its stand-in serves."""
    if path is None:
        return Finding("host", key, PASS, f"no {what} configured")
    d = Path(path)
    if not (d / "config.json").is_file():
        return Finding(
            "host", key, PASS, f"simulator engine: {what} {path} absent here, its config-only stand-in serves"
        )
    shards = len(list(d.glob("*.safetensors")))
    return Finding("host", key, PASS, f"{what} at {path} ({shards} safetensors shards)")


def check_api_key_file(path: str | None, p: Profile, root: Path | None = None) -> Finding:
    """The key file at ``path`` (the profile's, inside install-service's ``root``) by core/keyfile.py's rules; a fix
    that makes or mends it is the one recipe, `kimi-serve keyfile` (:func:`keyfile_recipe`)."""
    key = "server.api_key_file"
    if path is None:
        return Finding("host", key, PASS, "no API-key file configured")
    recipe = keyfile_recipe(p.cli_args(), root)
    problem = key_file_problem(path, recipe)
    if problem:
        return Finding("host", key, FAIL, problem[0], problem[1], p.where(key))
    if admin_key_required(p):
        problem = admin_key_problem(path, recipe)
        if problem:
            return Finding("host", "server.admin_key", FAIL, problem[0], problem[1], p.where("server.admin_key"))
        return Finding("host", key, PASS, f"API-key file {path} is private (0600) and holds a distinct admin key")
    return Finding("host", key, PASS, f"API-key file {path} is private (0600)")


def check_host(p: Profile) -> list[Finding]:
    if p.engine == "simulator":
        findings = [
            _simulator_dir("model.path", p.model.path, "model"),
            _simulator_dir(
                "speculative.draft_model_path",
                p.speculative.draft_model_path if p.speculative.enabled else None,
                "EAGLE-3 draft",
            ),
        ]
    else:  # the same rule doctor and up's preflight apply
        findings = model_findings(p, layer="host", codes=("model.path", "speculative.draft_model_path"))
    findings.append(check_api_key_file(p.server.api_key_file, p))
    if p.python and not os.access(p.python, os.X_OK):
        findings.append(
            Finding(
                "host",
                "python",
                FAIL,
                f"interpreter {p.python} is missing or not executable",
                engine_install_hint(p.ref or p.name, p.python, bool(p.overrides)),
                p.where("python"),
            )
        )
    elif p.python and (old := too_old(p.python)):
        findings.append(Finding("host", "python", FAIL, old, "point python: at a Python 3.11 venv", p.where("python")))
    elif p.engine == "sglang" and not p.python:
        findings.append(
            Finding(
                "host",
                "python",
                WARN,
                "no python: set; the unit will use kimi-serve's own interpreter",
                "set python: to the venv that has SGLang",
                p.where("python"),
            )
        )
    return findings
