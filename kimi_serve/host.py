"""Host facts a profile depends on (skipped by `check --offline`): model files, draft, API-key file, interpreter."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kimi_serve.findings import FAIL, PASS, WARN, Finding
from kimi_serve.profile import Profile


def _dir_with_config(p: Profile, key: str, path: str | None, what: str) -> Finding:
    if path is None:
        return Finding("host", key, PASS, f"no {what} configured")
    d = Path(path)
    if p.engine == "simulator" and not (d / "config.json").is_file():
        return Finding("host", key, PASS, f"simulator engine: {what} {path} absent here, its config-only stand-in "
                       "serves")
    if not d.is_dir():
        return Finding("host", key, FAIL, f"{what} directory {path} does not exist",
                       "download the checkpoint there or fix the path", p.where(key))
    if not (d / "config.json").is_file():
        return Finding("host", key, FAIL, f"{path} has no config.json", "point at the checkpoint's top directory",
                       p.where(key))
    shards = len(list(d.glob("*.safetensors")))
    return Finding("host", key, PASS, f"{what} at {path} ({shards} safetensors shards)")


def check_api_key_file(path: str | None, p: Profile) -> Finding:
    key = "server.api_key_file"
    if path is None:
        return Finding("host", key, PASS, "no API-key file configured")
    f = Path(path)
    try:
        st = f.stat()
    except OSError:
        return Finding("host", key, FAIL, f"API-key file {path} does not exist",
                       f"create it: install -m 600 /dev/null {path} && echo 'api-key: YOUR-KEY' > {path}",
                       p.where(key))
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        return Finding("host", key, FAIL, f"API-key file {path} is readable by others "
                       f"(mode {stat.S_IMODE(st.st_mode):o})", f"chmod 600 {path}", p.where(key))
    if not f.name.endswith((".yaml", ".yml")):
        return Finding("host", key, FAIL, f"{path}: SGLang's --config accepts only .yaml/.yml files",
                       "rename it to end in .yaml", p.where(key))
    return Finding("host", key, PASS, f"API-key file {path} is private (0600)")


def check_host(p: Profile) -> list[Finding]:
    findings = [
        _dir_with_config(p, "model.path", p.model.path, "model"),
        _dir_with_config(p, "speculative.draft_model_path",
                         p.speculative.draft_model_path if p.speculative.enabled else None, "EAGLE-3 draft"),
        check_api_key_file(p.server.api_key_file, p),
    ]
    if p.python and not os.access(p.python, os.X_OK):
        findings.append(Finding("host", "python", FAIL, f"interpreter {p.python} is missing or not executable",
                                "install SGLang there (pip install 'kimi-serve[serve]') or fix python:",
                                p.where("python")))
    elif p.engine == "sglang" and not p.python:
        findings.append(Finding("host", "python", WARN, "no python: set; the unit will use kimi-serve's own "
                                "interpreter", "set python: to the venv that has SGLang", p.where("python")))
    return findings
