"""Shared fixtures and the suite's tiers. Tests never touch the real /etc, site-packages or state dirs: roots are
injected here.

Tiers (docs/testing.md): a test's tier markers come from the fixtures it requests, never by hand
(:func:`pytest_itemcollected`):

- ``sglang``: the CPU SGLang interpreter (``sglang_python`` / ``sglang_session``); the interpreter reaches a test
  only through these fixtures, so a test that needs it and does not say so fails instead of slowing the fast tier;
- ``systemd``: the real systemd in a container (``sandbox``, tests/systemd/conftest.py);
- ``engine``: a real ``engine install`` (``cpu_engine``) or a resolution against the package index
  (``package_index``);
- ``listener``: a network listener of its own beyond a socketpair (``loopback_port``);
- ``systemd_tools``: the host's own systemctl / systemd-analyze binaries, no container (``systemd_tools``): fast;
- ``crash``: a loop that SIGKILLs a command at every one of its checkpoints and runs it again (``kill_points``):
  hundreds of runs each, no server, no container.

``./scripts/test.sh --fast`` runs ``not sglang and not systemd and not engine and not crash``; ``./scripts/test.sh``
all of it.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

# Bytecode for the suite's own tree even where the environment sets PYTHONDONTWRITEBYTECODE (this project's machines
# do): while pytest collects, the test processes write the caches of what they import (pytest's rewritten test
# modules among them, which every xdist worker otherwise rewrites again, ~2 s of CPU each); scripts/test.sh compiles
# kimi_serve/ before, so the CLI subprocesses read caches instead of compiling kimi-serve from source each time.
# From the first test on nothing writes caches any more (pytest_collection_finish): not the test processes, and not
# their children, which keep the variable: nothing appears in what the tests compare, and nothing changes under the
# systemd container's overlay (whose lower layer is this machine's /) while it runs.
_WROTE_BYTECODE = sys.dont_write_bytecode
sys.dont_write_bytecode = False

import pytest  # noqa: E402
from sim_pool import SGLangSession, SimulatorPool, stock_sglang_site, wait_probe_server  # noqa: E402

from kimi_serve.cli import main  # noqa: E402
from kimi_serve.core.proc import python_argv  # noqa: E402
from kimi_serve.core.resources import package_root  # noqa: E402
from kimi_serve.core.settings import PROBE_SOCKET_ENV, SGLANG_PYTHON_ENV, with_pythonpath  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "configs"

# Read once and taken out of the environment: the code under test sees the interpreter only inside a test that
# requests the sglang fixtures (so it is in the sglang tier). Kept under a name no code reads, for xdist's workers.
_STASH = "KIMI_SERVE_TESTS_SGLANG_PYTHON"
SGLANG_PYTHON = os.environ.pop(SGLANG_PYTHON_ENV, None) or os.environ.get(_STASH) or None
if SGLANG_PYTHON:
    os.environ[_STASH] = SGLANG_PYTHON

# tier marker -> the fixtures that put a test in it (anywhere in its fixture closure)
TIER_FIXTURES: dict[str, frozenset[str]] = {
    "sglang": frozenset({"sglang_session", "sglang_python", "agent_clients"}),
    "systemd": frozenset({"sandbox"}),
    "engine": frozenset({"cpu_engine", "package_index"}),
    "listener": frozenset({"loopback_port"}),
    "systemd_tools": frozenset({"systemd_tools"}),
    "crash": frozenset({"kill_points"}),
}
SLOW_TIERS = ("sglang", "systemd", "engine", "crash")  # what --fast leaves out
# How xdist spreads the tests (scripts/test.sh: -n N): by module, so a module-scoped fixture is built once, and two
# groups across modules. The systemd sandbox is one per host (tests/systemd/sandbox.sh holds a lock for the
# container's life, which is the worker's session): all its tests on one worker. The pooled simulators start once
# per worker: every module that uses the pool on one worker. (xdist's own --dist loadgroup cannot be used: with
# pytest 9 the xdist_group marks do not reach its scheduler.)
SANDBOX_GROUP, POOL_GROUP = "systemd-sandbox", "simulator-pool"
TESTS = Path(__file__).resolve().parent


def _pool_modules() -> frozenset[str]:
    """The test modules that use the simulator pool (by their text: the controller sees node ids, not fixtures)."""
    return frozenset(
        f"tests/{p.name}" for p in TESTS.glob("test_*.py") if "simulator_pool" in p.read_text(encoding="utf-8")
    )


_OWN_SCOPE = re.compile(r"""scope\s*=\s*["'](module|class|package)["']""")
SPREAD_FLAG = "SPREAD_ACROSS_WORKERS = True"  # a module whose module fixtures are cheap enough to build per worker


def _spread_modules() -> frozenset[str]:
    """Test modules whose tests go out one by one, each to the next free worker, instead of as one unit: those that
    define no fixture of module, class or package scope (nothing to build once), and those that say
    ``SPREAD_ACROSS_WORKERS = True`` (their module fixtures cost less than the wait). A long module as one unit was
    the fast tier's tail: the kill-point modules (90 s each) held one worker while the others were done."""
    out = set()
    for p in TESTS.glob("test_*.py"):
        text = p.read_text(encoding="utf-8")
        if SPREAD_FLAG in text or not _OWN_SCOPE.search(text):
            out.add(f"tests/{p.name}")
    return frozenset(out)


def _scope(nodeid: str, pool_modules: frozenset[str], spread: frozenset[str] = frozenset()) -> str:
    module = nodeid.split("::", 1)[0]
    if module.startswith("tests/systemd/"):
        return SANDBOX_GROUP
    if module in pool_modules:
        return POOL_GROUP
    if module in spread:
        return nodeid
    return module


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    from xdist.scheduler import LoadScopeScheduling

    pool_modules, spread = _pool_modules(), _spread_modules()

    class TierScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid, pool_modules, spread)

    return TierScheduling(config, log)


def pytest_itemcollected(item: pytest.Item) -> None:
    """Tier markers, as each test is collected: before any pytest_collection_modifyitems (-m deselection)."""
    names = set(getattr(item, "fixturenames", ()))
    by_hand = {m.name for m in item.iter_markers() if m.name in TIER_FIXTURES}
    if by_hand:
        item.stash[_BY_HAND] = sorted(by_hand)
    for tier, fixtures in TIER_FIXTURES.items():
        if names & fixtures:
            item.add_marker(tier)
    if names & (TIER_FIXTURES["sglang"] | TIER_FIXTURES["systemd"]):
        item.add_marker("listener")  # their servers listen (loopback)


_BY_HAND = pytest.StashKey[list[str]]()


def pytest_collection_finish(session: pytest.Session) -> None:
    sys.dont_write_bytecode = _WROTE_BYTECODE  # the top of this file: caches are written while collecting only


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    bad = [f"{item.nodeid}: marked {item.stash[_BY_HAND]} by hand" for item in items if _BY_HAND in item.stash]
    if bad:
        raise pytest.UsageError(
            "tier markers come from the fixtures a test requests (tests/conftest.py TIER_FIXTURES), not by hand:\n  "
            + "\n  ".join(bad[:20])
        )


# --------------------------------------------------------------------------------------- the SGLang probe server


def _probe_wanted(config: pytest.Config) -> bool:
    expr = (config.getoption("markexpr", "") or "").replace(" ", "")
    # not for a run that excludes the sglang tier, nor for one tier that probes nothing (engine: ~25 s of CPU saved)
    return (
        SGLANG_PYTHON is not None
        and "notsglang" not in expr
        and expr not in ("engine", "systemd")
        and not hasattr(config, "workerinput")
    )


def pytest_configure(config: pytest.Config) -> None:
    """One SGLang interpreter answers every parser/resolution probe of the run (all xdist workers): started here, in
    the controlling process, before the workers exist (they inherit ``$KIMI_SERVE_PROBE_SOCKET``), and warming up
    while they collect. It ends when this process does (its stdin closes)."""
    if not _probe_wanted(config):
        return
    import tempfile

    directory = tempfile.mkdtemp(prefix="kimi-serve-probe-")
    sock = os.path.join(directory, "probe.sock")
    log = open(os.path.join(directory, "probe.log"), "wb")  # noqa: SIM115 - the server's, for its life
    server = subprocess.Popen(
        [*python_argv(str(SGLANG_PYTHON), "-m", "kimi_serve.sglang.probe"), "--serve", sock],
        stdin=subprocess.PIPE,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=with_pythonpath(os.environ, package_root()),
    )
    config.stash[_PROBE_KEY] = (server, directory)
    os.environ[PROBE_SOCKET_ENV] = sock


def pytest_unconfigure(config: pytest.Config) -> None:
    started = config.stash.get(_PROBE_KEY, None)
    if started is None:
        return
    server, directory = started
    if server.stdin:
        server.stdin.close()
    try:
        server.wait(10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
    shutil.rmtree(directory, ignore_errors=True)
    os.environ.pop(PROBE_SOCKET_ENV, None)


_PROBE_KEY = pytest.StashKey[tuple[subprocess.Popen[bytes], str]]()


@pytest.fixture(scope="session")
def sglang_session() -> SGLangSession:
    """The SGLang interpreter of this run, and its probe server (waited for once per worker)."""
    if SGLANG_PYTHON is None:
        pytest.skip(f"{SGLANG_PYTHON_ENV} is not set (scripts/test.sh sets it; CI always does)")
    sock = os.environ.get(PROBE_SOCKET_ENV)
    return SGLangSession(SGLANG_PYTHON, sock if sock and wait_probe_server(sock) else None)


@pytest.fixture
def sglang_python(sglang_session: SGLangSession, monkeypatch: pytest.MonkeyPatch) -> str:
    """The SGLang interpreter, also as ``$KIMI_SERVE_SGLANG_PYTHON`` for the code under test."""
    monkeypatch.setenv(SGLANG_PYTHON_ENV, sglang_session.python)
    return sglang_session.python


@pytest.fixture(scope="session")
def simulator_pool(sglang_session: SGLangSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimulatorPool]:
    pool = SimulatorPool(sglang_session.python, tmp_path_factory.mktemp("simulators"))
    try:
        yield pool
    finally:
        pool.stop_all()


@pytest.fixture(scope="session")
def stock_sglang(sglang_session: SGLangSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site folder with SGLang 0.5.23's own kimi_k2 parsers (the engine's sglang, the Kimi set reverted): first on
    a child's PYTHONPATH where a test needs the unpatched faults (the engine carries prod's patch sets)."""
    return stock_sglang_site(sglang_session.python, tmp_path_factory.mktemp("stock-sglang"))


@pytest.fixture(scope="session")
def stock_simulator_pool(
    sglang_session: SGLangSession, stock_sglang: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SimulatorPool]:
    """Like ``simulator_pool``, on the stock sglang of ``stock_sglang``."""
    pool = SimulatorPool(sglang_session.python, tmp_path_factory.mktemp("stock-simulators"), stock_sglang)
    try:
        yield pool
    finally:
        pool.stop_all()


# ------------------------------------------------------------------------------------------------ host isolation


@pytest.fixture(autouse=True)
def _isolated_host(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("KIMI_SERVE_STATE_DIR", str(state))
    # never the real /etc/passwd: a user database-less root, so installs on the "running system" change no account
    monkeypatch.setenv("KIMI_SERVE_ACCOUNTS_ROOT", str(tmp_path_factory.mktemp("accounts")))
    monkeypatch.delenv("KIMI_SERVE_PROFILE_PATH", raising=False)
    monkeypatch.delenv("KIMI_SERVE_API_KEY", raising=False)


# ------------------------------------------------------------------------------------------------------ listeners


@pytest.fixture
def loopback_port() -> Callable[[], int]:
    """Free loopback ports for a server the test starts (puts it in the listener tier)."""

    def pick() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    return pick


@pytest.fixture
def systemd_tools() -> None:
    """The test runs the host's systemctl / systemd-analyze (unit checks, offline security scores); skipped with the
    fix where they are missing (a failure under KIMI_SERVE_NO_SKIP=1, as in CI)."""
    missing = [tool for tool in ("systemctl", "systemd-analyze") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (apt-get install systemd)")


CLIENTS_DIR_ENV = "KIMI_SERVE_CLIENTS_DIR"  # scripts/build-client-env.sh's folder (scripts/test.sh sets it)


@pytest.fixture(scope="session")
def agent_clients() -> Path:
    """The real agent clients of the client tier (scripts/build-client-env.sh: the Python clients' venv and the npm
    clients, from their locks); skipped with the fix where they are not built (a failure under KIMI_SERVE_NO_SKIP=1)."""
    folder = os.environ.get(CLIENTS_DIR_ENV)
    if not folder or not (Path(folder) / ".complete").is_file():
        pytest.skip(f"{CLIENTS_DIR_ENV} is not set (scripts/test.sh sets it from scripts/build-client-env.sh)")
    if shutil.which("node") is None:
        pytest.skip("node not installed (apt-get install nodejs npm; Node 20+)")
    return Path(folder)


@pytest.fixture
def package_index() -> None:
    """The test resolves or downloads from the package index (PyPI): the engine tier, out of --fast."""


@pytest.fixture
def kill_points() -> None:
    """The test SIGKILLs a command at every one of its checkpoints (kimi_serve/core/faults.py) and runs it again: the
    crash tier, out of --fast (each such loop starts dozens to hundreds of runs through tests/zygote.py). A single
    kill at one chosen point stays in the fast tier."""


@pytest.fixture
def profile_dir(tmp_path: Path) -> Path:
    """A directory with copies of the shipped profiles, for writing variants next to them."""
    d = tmp_path / "profiles"
    shutil.copytree(CONFIGS, d)
    return d


@pytest.fixture
def write_profile(profile_dir: Path) -> Callable[..., Path]:
    def write(text: str, name: str = "test") -> Path:
        path = profile_dir / f"{name}.yaml"
        path.write_text(textwrap.dedent(text))
        return path

    return write


class CliResult:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., CliResult]:
    def run(*args: str) -> CliResult:
        code = main(list(args))
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """With KIMI_SERVE_NO_SKIP=1 (CI), a skipped test fails: every tier (SGLang on CPU, real systemd, the pinned
    wheel) must actually run, so a missing install step cannot hide behind a green run."""
    if call.when == "teardown" and _CPU_AT_START in item.stash:  # before the report copies the properties
        item.user_properties.append(("cpu_s", round(_cpu_seconds() - item.stash[_CPU_AT_START], 2)))
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if os.environ.get("KIMI_SERVE_NO_SKIP") == "1" and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped, but KIMI_SERVE_NO_SKIP=1 requires every tier to run: {reason}"
    if call.when == "call" and report.passed and item.get_closest_marker("listener") is None:
        bound = _BINDS.get(item.nodeid)
        if bound:
            report.outcome = "failed"
            report.longrepr = (
                f"the test bound an inet socket ({bound}) without being in the listener tier: request the "
                "`loopback_port` fixture (or add pytest.mark.usefixtures('loopback_port') to its module)"
            )
    if call.when == "teardown":
        _BINDS.pop(item.nodeid, None)


# The listener tier, checked: an AF_INET/AF_INET6 bind in this process (a server, a port probe) during a test that
# did not request a listener fixture fails that test (Python's audit hook "socket.bind"; children are other tiers').
_BINDS: dict[str, str] = {}
_RUNNING: list[str] = []


def _audit(event: str, args: tuple[object, ...]) -> None:
    if event == "socket.bind" and _RUNNING:
        sock, address = args[0], args[1]
        if getattr(sock, "family", None) in (socket.AF_INET, socket.AF_INET6):
            _BINDS.setdefault(_RUNNING[-1], repr(address))


sys.addaudithook(_audit)


def _cpu_seconds() -> float:
    """CPU time of this process and of its children it has waited for (a server is counted once it is stopped)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Each test's CPU seconds (setup, call, teardown, and the processes it waited for) go into its report as the
    ``cpu_s`` property (JUnit XML): the suite is CPU-bound on 2 cores, so CPU, not wall time, is what a test costs
    (benchmarks/bench_test_tiers.py ranks them)."""
    _RUNNING.append(item.nodeid)
    item.stash[_CPU_AT_START] = _cpu_seconds()
    try:
        yield
    finally:
        _RUNNING.pop()


_CPU_AT_START = pytest.StashKey[float]()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An install root with a user database: install-service creates service.user (kimi-serve) there for real
    (useradd --prefix ROOT) when run as root; otherwise the account is pre-seeded with this user's uid."""
    r = tmp_path / "root"
    (r / "etc").mkdir(parents=True)
    users = "root:x:0:0:root:/root:/bin/bash\n"
    if os.geteuid() != 0:
        users += f"kimi-serve:x:{os.getuid()}:{os.getgid()}::/var/lib/kimi-serve:/usr/sbin/nologin\n"
    (r / "etc/passwd").write_text(users)
    (r / "etc/group").write_text("root:x:0:\nvideo:x:44:\n")
    return r
