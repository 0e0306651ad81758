"""Continuous contract monitoring without a running systemd: `verify --metrics-file` against the contract STAND-IN
(tests/contract_server.py) as it breaks and recovers, the textfile read back by prometheus_client's own parser, the
run lock, the bounded history and what `status` makes of it, and the timer units install-service writes under
--root (real systemd-analyze verify, real `systemctl --root` enable/disable). Under a real systemd: tests/systemd/.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from contract_server import ContractServer
from prometheus_client.parser import text_string_to_metric_families

from kimi_serve.core.proc import run as proc_run
from kimi_serve.service.history import KEEP, append_history, read_history, summary
from kimi_serve.service.monitor_units import analyze_together
from kimi_serve.service.state import ServicePaths
from kimi_serve.service.systemctl import Systemd
from kimi_serve.service.unit import RenderedUnit
from kimi_serve.verify.metrics import run_lock

# its servers (or the code under test's port probes) bind loopback sockets: the listener tier
pytestmark = pytest.mark.usefixtures("loopback_port")

needs_systemd = pytest.mark.usefixtures("systemd_tools")
UNIT = "mon-test.service"


def _samples(path: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the file, parsed by prometheus_client (fails on anything it cannot read)."""
    out = {}
    for family in text_string_to_metric_families(path.read_text()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    hits = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls)]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def test_metrics_follow_the_contract_as_it_breaks_and_recovers(cli, tmp_path: Path) -> None:
    metrics, root = tmp_path / "textfile" / "kimi.prom", tmp_path / "root"
    seen = []
    with ContractServer("correct") as srv:
        for mode in ("correct", "no-tool-parser", "no-tool-parser", "correct"):
            srv.mode = mode
            r = cli(
                "verify",
                "--host",
                srv.host,
                "--metrics-file",
                str(metrics),
                "--profile",
                "p1",
                "--unit-name",
                UNIT,
                "--root",
                str(root),
                "--max-tokens",
                "512",
            )
            assert r.code == (0 if mode == "correct" else 1), r.out + r.err
            s = _samples(metrics)
            labels = {"profile": "p1", "endpoint": f"http://{srv.host}"}
            seen.append(
                (
                    _value(s, "kimi_serve_contract_ok", **labels),
                    _value(s, "kimi_serve_contract_consecutive_failures", **labels),
                    _value(s, "kimi_serve_contract_last_success_timestamp_seconds", **labels),
                    _value(s, "kimi_serve_contract_probe_pass", probe="tool", mode="stream", **labels),
                    _value(s, "kimi_serve_contract_readiness_phase", phase="ready", **labels),
                )
            )
        assert srv.requests and all(r["max_tokens"] <= 512 for r in srv.requests)
    assert [(ok, fails, tool, phase) for ok, fails, _, tool, phase in seen] == [
        (1, 0, 1, 1),
        (0, 1, 0, 1),
        (0, 2, 0, 1),
        (1, 0, 1, 1),
    ]
    first_ok, _, _, last_ok = (t for _, _, t, _, _ in seen)
    assert first_ok > 0 and seen[1][2] == seen[2][2] == first_ok < last_ok  # carried over while broken
    assert sorted(p.name for p in metrics.parent.iterdir()) == ["kimi.prom", "kimi.prom.lock"]  # no temp files left
    history = read_history(ServicePaths(root, UNIT))
    assert [h["status"] for h in history] == ["pass", "fail", "fail", "pass"]
    assert history[1]["failed"] and history[1]["failed"][0].startswith("tool/")
    assert all(a["finished"] <= b["started"] for a, b in zip(history, history[1:], strict=False))


def test_a_run_that_finds_the_previous_one_still_going_is_skipped(cli, tmp_path: Path) -> None:
    metrics = tmp_path / "kimi.prom"
    with ContractServer("correct") as srv, run_lock(metrics):
        r = cli("verify", "--host", srv.host, "--metrics-file", str(metrics))
        assert not srv.requests  # skipped before any request: no doubled load
    assert r.code == 75, r.err
    assert r.err.startswith("kimi-serve: error: --metrics-file: skipped: the verify run of pid ")
    assert not metrics.exists()


def test_history_is_bounded_and_status_says_how_long_the_contract_is_broken(cli, tmp_path: Path) -> None:
    paths = ServicePaths(tmp_path, UNIT)
    now = time.time()
    for i in range(KEEP + 5):
        status = "pass" if i < KEEP else "fail"
        append_history(
            paths,
            {"status": status, "started": now - 600 + i, "finished": now - 599 + i, "time": f"t{i}", "detail": status},
        )
    records = read_history(paths)
    assert len(records) == KEEP and records[-1]["time"] == f"t{KEEP + 4}"
    s = summary(records, now)
    assert s is not None and s["contract_held_last"] == f"t{KEEP - 1}"
    assert s["broken_since_unix"] == pytest.approx(now - 600 + KEEP)
    assert s["broken_for_s"] == pytest.approx(600 - KEEP, abs=1)
    r = cli("status", "--unit-name", UNIT, "--root", str(tmp_path), "--json")
    monitor = json.loads(r.out)["monitor"]
    assert monitor["broken_for_s"] > 0 and len(monitor["last"]) == 10 and monitor["last"][-1]["status"] == "fail"
    text = cli("status", "--unit-name", UNIT, "--root", str(tmp_path)).out
    assert "contract:     BROKEN since" in text and f"last held t{KEEP - 1}" in text
    append_history(paths, {"status": "pass", "started": now, "finished": now + 1, "time": "back"})
    s = summary(read_history(paths), now + 2)
    assert s is not None and s["broken_since"] is None and s["contract_held_last"] == "back"


@needs_systemd
def test_systemd_analyze_rejects_a_bad_timer() -> None:
    timer = RenderedUnit("x-verify.timer", "[Timer]\nOnUnitActiveSec=soon\nUnit=x-verify.service\n", "")
    service = RenderedUnit("x-verify.service", "[Service]\nType=oneshot\nExecStart=/bin/true\n", "")
    with pytest.raises(Exception, match="rejects the rendered units: x-verify.timer:2: Failed to parse timer value"):
        analyze_together(Systemd(proc_run, Path("/nonexistent")), [service, timer])


@needs_systemd
def test_install_writes_the_timer_units_and_uninstall_removes_them(
    cli, tmp_path: Path, write_profile: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KIMI_SERVE_SGLANG_PYTHON", raising=False)  # the parser tier is the check tests' business
    root = tmp_path / "root"
    root.mkdir()
    on = write_profile(
        "extends: sim\nmonitor:\n  interval: 7\n  randomized_delay: 0\n  metrics_file: /m/k.prom\n"
        "service:\n  unit_name: mon-test\n",
        name="mon-on",
    )
    off = write_profile("extends: mon-on\nmonitor:\n  enabled: false\n", name="mon-off")
    units = root / "etc/systemd/system"
    r = cli("install-service", "-p", str(on), "--root", str(root))
    assert r.code == 0, r.out + r.err
    timer, service = (units / "mon-test-verify.timer").read_text(), (units / "mon-test-verify.service").read_text()
    assert "OnUnitActiveSec=7\n" in timer and "RandomizedDelaySec=0\n" in timer
    assert "Unit=mon-test-verify.service" in timer
    assert "Type=oneshot" in service and "OnFailure=kimi-serve-alert@%n.service" in service
    assert '"--metrics-file" "/m/k.prom" "--profile" "mon-on" "--unit-name" "mon-test.service"' in service
    assert '"--suite" "quick" "--max-tokens" "2048"' in service and "SuccessExitStatus=75" in service
    assert (units / "timers.target.wants/mon-test-verify.timer").is_symlink()
    assert (units / "kimi-serve-alert@.service").exists()
    # the check's only writable paths (ProtectSystem=strict: it cannot create them): made by install, root's, 0755
    for made in (root / "m", root / "var/lib/kimi-serve/service/mon-test"):
        st = made.stat()
        assert (st.st_uid, oct(st.st_mode & 0o777)) == (os.getuid(), "0o755"), made
        assert f'ReadWritePaths="-/{made.relative_to(root)}"' in service
    # the profile opts out: the next install removes what the last one installed
    again = cli("install-service", "-p", str(off), "--root", str(root), "--replace")
    assert again.code == 0, again.err
    assert not (units / "mon-test-verify.timer").exists() and not (units / "mon-test-verify.service").exists()
    assert not (units / "timers.target.wants/mon-test-verify.timer").exists()
    assert cli("install-service", "-p", str(on), "--root", str(root), "--replace").code == 0
    r = cli("uninstall-service", "--unit-name", "mon-test", "--root", str(root))
    assert r.code == 0, r.out + r.err
    left = sorted(str(p.relative_to(units)) for p in units.rglob("*") if not p.is_dir())
    assert left == [], left
