"""The layout's rules, checked on the source: which package may import which (module-level and lazy imports alike),
one home for environment variables, no module above the size a reader can hold (docs/architecture.md)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "kimi_serve"

# Each package and the packages it may import. Dependencies point one way: down this table.
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "profile": {"core"},
    "sglang": {"core"},
    "verify": {"core"},
    "router": {"core", "profile"},
    "simulator": {"core", "sglang", "verify"},
    "patches": {"core", "sglang"},
    "check": {"core", "profile", "sglang", "verify", "simulator", "patches"},
    "service": {"core", "profile", "sglang", "verify", "check", "router"},
    "up": {"core", "profile", "sglang", "verify", "simulator", "check", "router"},
    "engine": {"core", "profile", "sglang", "patches", "check"},
    "bench": {"core", "profile", "sglang", "verify", "simulator", "check", "up"},
    "commands": {
        "core",
        "profile",
        "sglang",
        "verify",
        "simulator",
        "patches",
        "check",
        "service",
        "up",
        "engine",
        "bench",
        "router",
    },
}
TOP_LEVEL = {"__init__", "__main__", "cli"}
MAX_LINES = 350


def _modules() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if "assets" not in p.parts)


def _package_of(path: Path) -> str:
    rel = path.relative_to(PKG)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every kimi_serve module a file imports, anywhere in it (lazy imports inside functions included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("kimi_serve")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kimi_serve"):
            if node.module == "kimi_serve":  # from kimi_serve import x
                found += [(node.lineno, f"kimi_serve.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, node.module))
    return found


def test_every_package_is_in_the_table():
    packages = {_package_of(p) for p in _modules()} - TOP_LEVEL
    assert packages == set(ALLOWED), "add the new package to ALLOWED and docs/architecture.md"


def test_dependencies_point_one_way():
    bad = []
    for path in _modules():
        pkg = _package_of(path)
        if pkg in TOP_LEVEL:
            continue
        for line, name in _imports(path):
            target = name.split(".")[1]
            if target in {"__version__"} or target == pkg:
                continue
            if target not in ALLOWED[pkg]:
                bad.append(f"{path.relative_to(PKG.parent)}:{line}: {pkg} imports {name}")
    assert not bad, "\n".join(bad)


def test_cli_is_thin():
    imported = {name for _line, name in _imports(PKG / "cli.py")}
    # the boundary: errors, the --json envelope (core.output), where a crash traceback goes (core.settings)
    assert imported <= {
        "kimi_serve.__version__",
        "kimi_serve.core.errors",
        "kimi_serve.core.output",
        "kimi_serve.core.settings",
        "kimi_serve.commands",
    }, imported


def test_the_environment_is_read_in_one_place():
    # kimi-serve's own settings come from core/settings.py; only the simulator's entry points (another process) and
    # code that hands the whole environment to a child process may touch os.environ.
    reads = re.compile(r"os\.environ(?:\.get|\[|\.copy)|os\.getenv")
    allowed = {"core/settings.py", "simulator/engine.py", "simulator/server.py"}
    bad = []
    for path in _modules():
        rel = str(path.relative_to(PKG))
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if reads.search(line) and rel not in allowed:
                bad.append(f"{rel}:{i}: {line.strip()}")
    assert not bad, "\n".join(bad)
    names = re.compile(r"[\"']KIMI_SERVE_[A-Z_]+[\"']")
    homes = [str(p.relative_to(PKG)) for p in _modules() if names.search(p.read_text(encoding="utf-8"))]
    assert homes == ["core/settings.py"], homes


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PKG)))
def test_no_module_is_too_long(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.name} has {lines} lines: split it by concern"


def test_the_service_deadlines_agree():
    # restart waits for the old server's stop plus everything systemd allows the new start: a healthy 30-minute cold
    # start (startup.timeout 1800) is never cut short by restart's own wait.
    from kimi_serve.profile.loader import load_profile
    from kimi_serve.service.timeouts import restart_wait_sec, start_timeout_sec

    p = load_profile("prod")
    assert p.startup.timeout >= 1800
    assert start_timeout_sec(p) >= p.startup.timeout + p.verify.timeout
    assert restart_wait_sec(p) > p.service.stop_timeout + start_timeout_sec(p)
