"""No Python child of kimi-serve imports from the folder kimi-serve is run in: a ``kimi_serve/`` or ``sglang/``
package (or a ``json.py``) planted there, e.g. in /tmp by another user, never runs (it would run as root under sudo).
Every child is started as ``PYTHON -P ...`` (core/proc.py python_argv); these tests start the real children from a
folder holding such plants, whose import leaves a marker file, and find no marker."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from kimi_serve.bench import loadgen
from kimi_serve.bench.workload import prepare
from kimi_serve.core import proc
from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.resources import package_root
from kimi_serve.profile.launch import build_launch
from kimi_serve.profile.loader import load_profile
from kimi_serve.profile.router import build_router_launch
from kimi_serve.simulator import launcher

PLANTS = ("kimi_serve/__init__.py", "sglang/__init__.py", "json.py")


@pytest.fixture
def hostile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory whose planted modules leave ``imported-<name>`` behind when a child imports them."""
    folder = tmp_path / "shared"
    for plant in PLANTS:
        path = folder / plant
        path.parent.mkdir(parents=True, exist_ok=True)
        marker = folder / f"imported-{plant.split('/')[0].removesuffix('.py')}"
        path.write_text(f"open({str(marker)!r}, 'a').close()\n")
    monkeypatch.chdir(folder)
    done = proc.run([sys.executable, "-c", "import json, kimi_serve, sglang"], timeout=60)  # the unsafe form
    assert done.ok and _markers(folder) == ["imported-json", "imported-kimi_serve", "imported-sglang"]
    for marker in folder.glob("imported-*"):
        marker.unlink()
    return folder


def _markers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("imported-*"))


def test_every_python_argv_kimi_serve_builds_starts_with_the_safe_path_flag():
    prod, sim = load_profile("prod"), load_profile("sim-dp2")
    workload = prepare("random", 1, Path("/nowhere"))
    endpoint = loadgen.BenchEndpoint("http://127.0.0.1:1", "m", None, None)
    argvs = [
        build_launch(prod, "/py").argv,
        build_launch(sim, "/py").argv,
        build_router_launch(sim, "/py").argv,
        launcher.command("/py", ["--port", "1"]),
        loadgen.command("/py", endpoint, workload, 1, 1, Path("/o.jsonl"), 1),
    ]
    assert all(list(argv[:3]) == ["/py", "-P", "-m"] for argv in argvs), argvs


def test_the_sglang_lookups_and_the_probe_import_nothing_from_the_working_directory(hostile, monkeypatch):
    from kimi_serve.check.sglang_tier import run_probe
    from kimi_serve.sglang.site import SGLangPython, has_sglang, site_packages_of

    monkeypatch.delenv("KIMI_SERVE_PROBE_SOCKET", raising=False)  # a fresh interpreter, not the shared probe server
    assert not has_sglang(sys.executable)  # the planted sglang/ is not this interpreter's
    with pytest.raises(KimiServeError, match="sglang is not installed"):
        site_packages_of(sys.executable)
    verdict = run_probe(SGLangPython(sys.executable, "test"), ["--model-path", "m"])
    assert "error" in verdict  # this interpreter has no sglang: the real probe ran and said so
    assert _markers(hostile) == []


def test_ups_server_child_imports_nothing_from_the_working_directory(hostile, tmp_path, loopback_port):
    from kimi_serve.up.console import Console
    from kimi_serve.up.options import UpOptions
    from kimi_serve.up.run import serve

    launch = build_launch(
        load_profile("baseline"), sys.executable, pythonpath=str(package_root()), port=loopback_port()
    )
    with pytest.raises(KimiServeError) as exc:  # no sglang in this interpreter: the real child exits at once
        serve(
            launch,
            UpOptions(verify=False, stop_grace_s=1.0, failure_grace_s=0.5),
            tmp_path / "up.log",
            Console(io.StringIO(), io.StringIO(), tty=False),
        )
    assert exc.value.exit_code == 4
    assert "No module named 'sglang'" in (tmp_path / "up.log").read_text() and _markers(hostile) == []


def test_the_simulator_of_the_contract_dry_run_imports_nothing_from_the_working_directory(
    hostile, tmp_path, loopback_port
):
    port = loopback_port()
    argv = launcher.command(sys.executable, ["--port", str(port)])
    sim = launcher.Simulator.start(argv, launcher.environment(), f"http://127.0.0.1:{port}", tmp_path / "sim.log")
    with pytest.raises(KimiServeError) as exc:  # no sglang here: the real simulator module runs and exits at once
        sim.wait_ready(timeout=60)
    sim.stop()
    assert exc.value.exit_code == 4 and "No module named 'sglang'" in sim.log_tail()
    assert _markers(hostile) == []


def test_check_fails_an_interpreter_older_than_the_safe_path_flag(tmp_path):
    """-P came with Python 3.11: an older python: would not start at all, so check says why, naming the key."""
    from kimi_serve.check.host import check_host

    old = tmp_path / "python3.10"  # answers the version question as a 3.10 does
    old.write_text("#!/bin/sh\necho 3.10\n")
    old.chmod(0o755)
    (finding,) = [f for f in check_host(load_profile("baseline", [f"python={old}"])) if f.code == "python"]
    assert finding.status == "fail" and "is Python 3.10" in finding.message and "-P" in finding.message
    current = [f for f in check_host(load_profile("baseline", [f"python={sys.executable}"])) if f.code == "python"]
    assert current == []
