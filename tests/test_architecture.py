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
    "process": {"core", "verify"},
    "simulator": {"core", "sglang", "verify", "process"},
    "patches": {"core", "sglang"},
    "host": {"core", "profile", "sglang", "patches"},
    "prewarm": {"core", "profile", "host"},
    "check": {"core", "profile", "sglang", "verify", "simulator", "patches", "host", "process"},
    "engine": {"core", "profile", "sglang", "patches", "check", "host"},
    "service": {"core", "profile", "sglang", "verify", "check", "router", "host", "engine"},
    "up": {"core", "profile", "sglang", "verify", "simulator", "check", "router", "host", "process"},
    "bench": {"core", "profile", "sglang", "verify", "simulator", "check", "host", "process", "capture"},
    "k8s": {"core", "profile", "check", "service"},
    "clients": {"core", "profile", "verify", "patches"},
    "capture": {"core", "profile", "verify"},
    "commands": {
        "core",
        "profile",
        "sglang",
        "verify",
        "simulator",
        "patches",
        "process",
        "host",
        "prewarm",
        "check",
        "service",
        "up",
        "engine",
        "bench",
        "router",
        "k8s",
        "clients",
        "capture",
    },
}
TOP_LEVEL = {"__init__", "__main__", "cli"}
# A module's size in statements (ast), which formatting does not change: 350 unformatted lines was the old budget,
# and the largest module within it has 259 statements.
MAX_STATEMENTS = 260


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
    # the boundary: errors, the --json envelope (core.output), the crash log (core.crashlog: where, redacted)
    assert imported <= {
        "kimi_serve.__version__",
        "kimi_serve.core.errors",
        "kimi_serve.core.output",
        "kimi_serve.core.crashlog",
        "kimi_serve.commands",
    }, imported


# The environment's only readers: kimi-serve's settings, and the simulator's entry points (another process).
ENVIRONMENT_READERS = {"core/settings.py", "simulator/engine.py", "simulator/server.py"}
_ENV_NAMES = {"environ", "environb", "getenv", "getenvb"}
_ENV_WRITES = {"clear", "update", "pop", "setdefault", "__setitem__", "__delitem__"}


def _environment_reads(source: str) -> list[int]:
    """The lines that read the environment: ``os.environ`` / ``os.environb`` in any use but a write (``clear``,
    ``update``, an item assigned or deleted), ``os.getenv``, or any of them imported from ``os``."""
    tree = ast.parse(source)
    writes = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in _ENV_WRITES
            or isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Store | ast.Del)
        ):
            writes.add(id(node.value))
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in _ENV_NAMES
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
            and id(node) not in writes
        ) or (isinstance(node, ast.ImportFrom) and node.module == "os" and {a.name for a in node.names} & _ENV_NAMES):
            found.append(node.lineno)
    return sorted(found)


def test_the_environment_is_read_in_one_place():
    # kimi-serve's own settings come from core/settings.py (current(); process_environ() for what a child inherits);
    # only the simulator's entry points (another process) read the environment themselves.
    bad = []
    for path in _modules():
        rel = str(path.relative_to(PKG))
        if rel not in ENVIRONMENT_READERS:
            bad += [f"{rel}:{line}" for line in _environment_reads(path.read_text(encoding="utf-8"))]
    assert not bad, bad
    names = re.compile(r"[\"']KIMI_SERVE_[A-Z_]+[\"']")
    homes = [str(p.relative_to(PKG)) for p in _modules() if names.search(p.read_text(encoding="utf-8"))]
    assert homes == ["core/settings.py"], homes


def test_the_environment_check_sees_every_read():
    reads = "import os\nfrom os import getenv\na = os.environ\nb = dict(os.environ)\nc = os.getenv('X')\n"
    writes = "import os\nos.environ.clear()\nos.environ.update({})\nos.environ['X'] = '1'\ndel os.environ['X']\n"
    assert _environment_reads(reads) == [2, 3, 4, 5]
    assert _environment_reads(writes) == []


def _module_graph() -> dict[str, set[str]]:
    """Module -> the kimi_serve modules it imports, anywhere in it (a function-local import is an edge too).
    ``from PKG import NAME`` points at PKG.NAME when that is a module, else at PKG's ``__init__``."""
    names = {}
    for path in _modules():
        parts = path.relative_to(PKG.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        edges = graph.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name in names}
            elif isinstance(node, ast.ImportFrom) and node.module in names and node.level == 0:
                edges |= {
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in names else node.module for a in node.names
                }
        edges.discard(name)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circles_also_not_through_function_local_imports():
    # An import inside a function hides a circle from Python's import machinery, not from the reader: each of these
    # modules needs the others to make sense. Move what they share into a module of its own (check/launch.py).
    graph = _module_graph()
    circles = _circles(graph)
    described = [" <-> ".join(c) + ": " + "; ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) for c in circles]
    assert not circles, "\n".join(described)


def test_the_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PKG)))
def test_no_module_is_too_long(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    statements = sum(isinstance(node, ast.stmt) for node in ast.walk(tree))
    assert statements <= MAX_STATEMENTS, f"{path.name} has {statements} statements: split it by concern"


def test_the_service_deadlines_agree():
    # restart waits for the old server's stop plus everything systemd allows the new start: a healthy 30-minute cold
    # start (startup.timeout 1800) is never cut short by restart's own wait.
    from kimi_serve.profile.loader import load_profile
    from kimi_serve.service.timeouts import restart_wait_sec, start_timeout_sec

    p = load_profile("prod")
    assert p.startup.timeout >= 1800
    assert start_timeout_sec(p) >= p.startup.timeout + p.verify.timeout
    assert restart_wait_sec(p) > p.service.stop_timeout + start_timeout_sec(p)


def _literal_homes(pattern: str) -> list[str]:
    """Modules whose source (comments and docstrings included) matches ``pattern``."""
    found = re.compile(pattern)
    return [str(p.relative_to(PKG)) for p in _modules() if found.search(p.read_text(encoding="utf-8"))]


def test_one_home_for_the_unit_directory():
    # etc/systemd/system under a root: service/state.py's UNIT_DIR and ServicePaths.unit_path.
    assert _literal_homes(r"etc/systemd/system") == ["service/state.py"]


def test_one_home_for_the_wildcard_to_loopback_map():
    # a wildcard (any spelling) -> 127.0.0.1 / ::1 for a local client: core/net.py's is_unspecified, connect_host and
    # client_url judge the address (ipaddress, inet_aton's forms); no module compares a spelling such as "0.0.0.0"
    assert _literal_homes(r"[\"']0\.0\.0\.0[\"']\s*:|==\s*[\"']0\.0\.0\.0[\"']|in \([\"']0\.0\.0\.0") == []
    assert _literal_homes(r"\.is_unspecified\b") == ["core/net.py"]


def _code_strings(path: Path) -> list[str]:
    """The string constants of a module that are not docstrings (prose may name the version it describes)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]


def test_one_home_for_the_sglang_pin():
    # the pinned version and the patch set made for it: core/pin.py (SGLANG_VERSION, PATCH_SET)
    pin = re.compile(r"^0\.5\.23$|sglang-0\.5\.23-sm120|sglang==0\.5\.23")
    homes = [str(p.relative_to(PKG)) for p in _modules() if any(pin.search(s) for s in _code_strings(p))]
    assert homes == ["core/pin.py"], homes


def test_one_home_for_the_verify_suite_names():
    # quick / full / raw: core/suites.py; a bare suite name in code elsewhere is the fact re-typed
    names = {"quick", "full", "raw"}
    allowed = {"core/suites.py", "service/hardening.py"}  # hardening: systemd's ProtectSystem=full, not a suite
    homes = [str(p.relative_to(PKG)) for p in _modules() if names & set(_code_strings(p))]
    assert sorted(set(homes) - allowed) == [], homes


def test_one_writer_of_key_files():
    # core/keyfile.py's write_key_file(_text): mode 0600 from the first byte, temp + fsync + rename. A key file's text
    # typed by hand ("api-key: ...\n") or rendered for a writer of its own is the writer written twice.
    bad = []
    for path in _modules():
        rel = str(path.relative_to(PKG))
        if rel == "core/keyfile.py":
            continue
        source = path.read_text(encoding="utf-8")
        formatted = [  # f"api-key: {key}\n": its first and last parts
            "".join(str(v.value) for v in (n.values[0], n.values[-1]) if isinstance(v, ast.Constant))
            for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.JoinedStr) and n.values
        ]
        texts = [*_code_strings(path), *formatted]
        if "render_key_file" in source or any(
            t.startswith(("api-key: ", "admin-api-key: ")) and t.endswith("\n") for t in texts
        ):
            bad.append(rel)
    assert not bad, bad


def test_one_journal_primitive():
    # an intent journal (NAME.intent.json) is written, read, removed and swept through core/journal.py's Journal; the
    # modules that own one (they name it) roll no temporary file, fsync or rename of their own
    hand_rolled = re.compile(r"\b(os\.fsync|fsync_dir|os\.replace|write_under|create_new|mkstemp)\(")
    owners = [p for p in _modules() if any(".intent.json" in s for s in _code_strings(p))]
    names = sorted(str(p.relative_to(PKG)) for p in owners)
    assert names == ["patches/journal.py", "service/journal.py"], names
    bad = [str(p.relative_to(PKG)) for p in owners if hand_rolled.search(p.read_text(encoding="utf-8"))]
    assert not bad, bad


def test_every_subprocess_goes_through_core_proc():
    # short-lived programs: core/proc.py (run, stream, run_to_log). The long-running children (a server under `up`,
    # bench, the contract dry run, the simulator launcher) all go through the one exception: process/child.py.
    exceptions = {"core/proc.py", "process/child.py"}
    bad = []
    for path in _modules():
        rel = str(path.relative_to(PKG))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(n.split(".")[0] in {"subprocess", "pty"} for n in names) and rel not in exceptions:
                bad.append(f"{rel}:{node.lineno}")
    assert not bad, bad


def _doc_name(path: Path) -> str:
    """How docs/architecture.md names a module: its path under kimi_serve/ (a package's ``__init__`` by ``pkg/``)."""
    rel = path.relative_to(PKG).as_posix()
    return rel.removesuffix("__init__.py") if rel.endswith("/__init__.py") else rel


def test_every_module_is_named_in_the_architecture_page():
    # a module named nowhere is a room no reader finds: name it in docs/architecture.md ("Every module")
    doc = (PKG.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`([\w/]+(?:\.py|/))`", doc))
    missing = [_doc_name(p) for p in _modules() if p != PKG / "__init__.py" and _doc_name(p) not in named]
    assert not missing, f"name these in docs/architecture.md: {missing}"


def test_findings_are_built_as_finding():
    # one type for every result line (core/findings.py Finding); a dict typed by hand with its keys is a second one.
    # core/output.py reads the envelope's findings, verify/report.py writes verify's own probe findings (docs/verify.md).
    allowed = {"core/findings.py", "core/output.py", "verify/report.py"}
    bad = []
    for path in _modules():
        rel = str(path.relative_to(PKG))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            keys = {k.value for k in getattr(node, "keys", []) if isinstance(k, ast.Constant)}
            hand_built = isinstance(node, ast.Dict) and {"code", "message"} <= keys and keys & {"fix", "status"}
            if hand_built and rel not in allowed:
                bad.append(f"{rel}:{node.lineno}")
    assert not bad, bad


def test_one_meaning_per_class_name():
    # Two classes of one name for different things (a Target to verify and a Target to install) make every import a
    # question; each class name in the package means one thing.
    where: dict[str, list[str]] = {}
    for path in _modules():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(str(path.relative_to(PKG)))
    twice = {name: places for name, places in where.items() if len(places) > 1}
    assert not twice, twice
