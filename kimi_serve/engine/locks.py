"""The committed dependency locks: what they are resolved from, their headers, and parsing them.

Requirements-style files with exact versions and sha256 hashes (``uv pip compile --generate-hashes``): the engine
locks ``gpu`` (the GPU serving host) and ``cpu`` (tests, quickstart), shipped in ``kimi_serve/engine/lockfiles/``; and,
in the checkout only (``requirements/``), ``dev`` (kimi-serve's own ``.venv``), ``clients`` and ``kimi-cli`` (CPython
3.12+) for the test suite's client tier (scripts/build-client-env.sh installs them).

Each lock starts with a kimi-serve header that records the sha256 of its inputs (the input files and the resolver
options, see :func:`input_sha256`); ``tests/test_engine_locks.py`` recomputes it, so editing an input without
regenerating the lock (``scripts/lock.py``) fails the tests.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.pin import SGLANG_VERSION

LOCK_DIR = Path(__file__).resolve().parent / "lockfiles"
ENGINE_LOCKS = ("gpu", "cpu")
PYTHON_VERSION = "3.11"
PLATFORM = "x86_64-manylinux_2_34"  # sglang 0.5.23's Linux wheel is manylinux_2_34
# Resolution ignores anything uploaded after this instant, so re-resolving gives the same lock until an input changes.
EXCLUDE_NEWER = "2026-12-01T00:00:00Z"
UV_VERSION = "0.13.9"
# uv stops at the first index that has a package unless told otherwise; with extra indexes configured that loses
# versions, so the locks are always resolved (and installed) with the best match across indexes.
INDEX_OPTIONS = ("--index-strategy", "unsafe-best-match")
# every lock's resolver options after its --python-version
RESOLVE_OPTIONS = ("--python-platform", PLATFORM, "--generate-hashes", *INDEX_OPTIONS, "--exclude-newer", EXCLUDE_NEWER)
HEADER_PREFIX = "# kimi-serve lock:"
_HEADER_KEY = re.compile(r"^# ([a-z0-9-]+): (.*)$")
_REQ = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


@dataclass(frozen=True)
class LockSpec:
    name: str
    target: Path  # the lock file
    requirements: tuple[Path, ...]  # inputs passed to uv pip compile
    overrides: tuple[Path, ...] = ()
    extras: tuple[str, ...] = ()
    description: str = ""
    python: str = PYTHON_VERSION  # the interpreter version resolved for

    @property
    def options(self) -> tuple[str, ...]:
        """The resolver options: this lock's Python version, then RESOLVE_OPTIONS."""
        return ("--python-version", self.python, *RESOLVE_OPTIONS)

    def command(self, uv: str, output: Path, cwd: Path) -> list[str]:
        """The uv command that resolves this lock; run it in ``cwd`` (paths are relative to it, so the lock's
        ``# via`` annotations name no machine's absolute paths)."""

        def rel(p: Path) -> str:
            return str(p.resolve().relative_to(cwd.resolve()))

        cmd = [
            uv,
            "pip",
            "compile",
            *map(rel, self.requirements),
            *self.options,
            "--no-header",
            "--quiet",
            "-o",
            str(output),
        ]
        for extra in self.extras:
            cmd += ["--extra", extra]
        for o in self.overrides:
            cmd += ["--override", rel(o)]
        return cmd


def specs(repo: Path | None = None) -> dict[str, LockSpec]:
    """Every lock; the ``dev`` lock only when ``repo`` (a checkout) is given."""
    out = {
        "gpu": LockSpec(
            "gpu",
            LOCK_DIR / "gpu.txt",
            (LOCK_DIR / "gpu.in",),
            description=f"sglang {SGLANG_VERSION}, all its dependencies, CUDA 13 torch: the GPU host",
        ),
        "cpu": LockSpec(
            "cpu",
            LOCK_DIR / "cpu.txt",
            (LOCK_DIR / "cpu.in",),
            (LOCK_DIR / "cpu-drop.txt",),
            description=f"sglang {SGLANG_VERSION} minus GPU-only kernels: tests, quickstart",
        ),
    }
    if repo is not None:
        out["dev"] = LockSpec(
            "dev",
            repo / "requirements" / "dev.txt",
            (repo / "pyproject.toml", repo / "requirements" / "dev.in"),
            extras=("test",),
            description="kimi-serve's dev/test venv (.venv): runtime deps, [test] extra, uv",
        )
        out["clients"] = LockSpec(
            "clients",
            repo / "requirements" / "clients.txt",
            (repo / "requirements" / "clients.in",),
            description="the Python agent clients of the client tier (scripts/build-client-env.sh)",
        )
        out["kimi-cli"] = LockSpec(
            "kimi-cli",
            repo / "requirements" / "kimi-cli.txt",
            (repo / "requirements" / "kimi-cli.in",),
            description="Moonshot's kimi-cli for the client tier, Python 3.12+ (scripts/build-client-env.sh)",
            python="3.12",
        )
    return out


def _input_text(path: Path, extras: tuple[str, ...]) -> str:
    if path.name == "pyproject.toml":  # only what the resolver reads: the dependency lists
        project = tomllib.loads(path.read_text(encoding="utf-8"))["project"]
        optional = project.get("optional-dependencies", {})
        return json.dumps(
            {"dependencies": project.get("dependencies", []), "extras": {e: optional.get(e, []) for e in extras}},
            sort_keys=True,
        )
    return path.read_text(encoding="utf-8")


def input_sha256(spec: LockSpec) -> str:
    """sha256 over what a lock is resolved from: its input files (by name) and the resolver options."""
    doc = {
        "lock": spec.name,
        "options": list(spec.options),
        "extras": list(spec.extras),
        "requirements": {p.name: _input_text(p, spec.extras) for p in spec.requirements},
        "overrides": {p.name: p.read_text(encoding="utf-8") for p in spec.overrides},
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def header(spec: LockSpec) -> str:
    lines = [
        f"{HEADER_PREFIX} {spec.name}",
        f"# description: {spec.description}",
        f"# target: CPython {spec.python}, Linux x86_64 ({PLATFORM.split('-', 1)[1]})",
        f"# input-sha256: {input_sha256(spec)}",
        f"# inputs: {', '.join(p.name for p in spec.requirements + spec.overrides)}"
        + (f" (extras: {', '.join(spec.extras)})" if spec.extras else ""),
        f"# resolver: uv {UV_VERSION} pip compile {' '.join(spec.options)}",
        "# regenerate: scripts/lock.py   (never edit by hand; tests fail when this file drifts from its inputs)",
    ]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Pin:
    name: str  # normalized (PEP 503)
    version: str
    hashes: tuple[str, ...]


@dataclass(frozen=True)
class Lock:
    name: str
    path: Path
    sha256: str  # of the whole file
    meta: dict[str, str] = field(default_factory=dict)  # the header's key: value lines
    pins: dict[str, Pin] = field(default_factory=dict)

    @property
    def input_sha256(self) -> str | None:
        return self.meta.get("input-sha256")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse(text: str, *, name: str = "?", path: Path = Path("?")) -> Lock:
    meta: dict[str, str] = {}
    pins: dict[str, Pin] = {}
    # a requirement spans its line and the backslash-continued --hash lines after it
    for block in re.split(r"(?<!\\)\n", text):
        line = block.strip()
        if line.startswith("#"):
            m = _HEADER_KEY.match(line)
            if m and not pins:
                meta[m.group(1)] = m.group(2).strip()
            continue
        m = _REQ.match(line)
        if m:
            pin = Pin(normalize(m.group(1)), m.group(3), tuple(_HASH.findall(line)))
            pins[pin.name] = pin
    if text.startswith(HEADER_PREFIX):
        meta["lock"] = text.splitlines()[0][len(HEADER_PREFIX) :].strip()
    return Lock(name, path, hashlib.sha256(text.encode()).hexdigest(), meta, pins)


def lock_path(name_or_path: str) -> Path:
    """A shipped engine lock by name (``gpu``, ``cpu``) or a lock file's path."""
    if name_or_path in ENGINE_LOCKS:
        return LOCK_DIR / f"{name_or_path}.txt"
    path = Path(name_or_path)
    if path.is_file():
        return path
    raise KimiServeError(
        f"unknown lock {name_or_path!r}",
        hint=f"pass --lock {' or '.join(ENGINE_LOCKS)}, or the path of a lock file",
        exit_code=ExitCode.USAGE,
    )


def load(name_or_path: str) -> Lock:
    path = lock_path(name_or_path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise KimiServeError(
            f"lock file {path} is not UTF-8 text (byte {exc.start}: {exc.object[exc.start : exc.start + 1]!r})",
            where="--lock",
            hint="pass a requirements-style lock (--lock gpu|cpu, or a file from scripts/lock.py)",
            exit_code=ExitCode.USAGE,
        ) from None
    except OSError as exc:
        raise KimiServeError(
            f"cannot read lock {path}: {exc.strerror}", hint="reinstall kimi-serve", exit_code=ExitCode.ENVIRONMENT
        ) from exc
    name = name_or_path if name_or_path in ENGINE_LOCKS else path.stem
    lock = parse(text, name=name, path=path)
    if not lock.pins:
        raise KimiServeError(
            f"{path} holds no pinned requirements", hint="regenerate it with scripts/lock.py", exit_code=ExitCode.USAGE
        )
    unhashed = [p.name for p in lock.pins.values() if not p.hashes]
    if unhashed:
        raise KimiServeError(
            f"{path}: {', '.join(unhashed[:5])} carry no --hash",
            hint="regenerate it with scripts/lock.py (uv pip compile --generate-hashes)",
            exit_code=ExitCode.USAGE,
        )
    return lock


def omitted_from_cpu() -> set[str]:
    """The sglang dependencies the CPU lock leaves out on purpose (cpu-drop.txt)."""
    lines = (line.split("#", 1)[0].strip() for line in (LOCK_DIR / "cpu-drop.txt").read_text("utf-8").splitlines())
    return {normalize(req_name(line)) for line in lines if line}


def req_name(requirement: str) -> str:
    """The distribution a requirement line names (before its extras, markers or version specifier)."""
    return re.split(r"[\s\[;=<>!~(]", requirement, maxsplit=1)[0]
