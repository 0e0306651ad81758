"""The paths install-service hands to service.user (issue #29.4): never kimi-serve's state root, a systemd unit
directory, /etc, /usr, / or the model, whether the profile names them or a symlink under the install root leads
there. `check` fails on the profile key with the fix; install-service exits 2 before it writes or chowns anything."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kimi_serve.check.launch import fast_validate
from kimi_serve.check.owned_paths import owned_path_problem
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.files import resolve_in
from kimi_serve.core.findings import FAIL
from kimi_serve.profile.loader import load_profile
from kimi_serve.service.install import Plan, Result, write_unit
from kimi_serve.service.state import ServicePaths
from kimi_serve.service.systemctl import Systemd
from kimi_serve.service.unit import UnitContext, render_unit

WD = "service.working_directory"
BAD_WORKDIRS = [
    "/var/lib/kimi-serve",  # the state root itself
    "/var/lib/kimi-serve/service",  # the records rollback trusts
    "/var/lib/kimi-serve/service/sglang-kimi",
    "/var/lib/kimi-serve/patches",
    "/var/lib",  # contains the state root
    "/etc/systemd/system",
    "/etc/systemd/system/x.d",
    "/run/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd",
    "/etc",
    "/etc/kimi-serve",
    "/usr/local/kimi",
    "/",
    "/models/Kimi-K2.5",  # prod's model.path
    "/models/Kimi-K2.5/cache",
    "/models",  # contains it
]


def _failures(sets: list[str]) -> dict[str, str]:
    profile = load_profile("prod", sets)
    _, findings = fast_validate(profile)
    return {f.code: f"{f.where}: {f.message} (fix: {f.fix})" for f in findings if f.status == FAIL}


@pytest.mark.parametrize("workdir", BAD_WORKDIRS)
def test_check_refuses_a_working_directory_the_user_must_not_own(workdir: str) -> None:
    failed = _failures([f"{WD}={workdir}"])
    assert WD in failed, failed
    assert "--set: service.working_directory" in failed[WD] and "e.g. /var/lib/kimi-serve/server" in failed[WD]


@pytest.mark.parametrize("workdir", ["/var/lib/kimi-serve/server", "/var/lib/kimi-serve/server/r0", "/srv/kimi"])
def test_its_own_directories_pass(workdir: str) -> None:
    assert WD not in _failures([f"{WD}={workdir}"])


@pytest.mark.parametrize(
    ("key_file", "ok"),
    [
        ("/etc/kimi-serve/prod-secrets.yaml", True),
        ("/var/lib/kimi-serve/server/key.yaml", True),
        ("/etc/netplan/01-net.yaml", False),  # 0600 YAML under /etc: chowned, the server would rewrite the network
        ("/etc/systemd/system/k.yaml", False),
        ("/var/lib/kimi-serve/service/k.yaml", False),
        ("/models/Kimi-K2.5/k.yaml", False),
    ],
)
def test_the_key_file_is_checked_too(key_file: str, ok: bool) -> None:
    failed = _failures([f"server.api_key_file={key_file}"])
    assert ("server.api_key_file" not in failed) == ok, failed


def test_symlinks_resolve_inside_the_install_root(tmp_path: Path) -> None:
    (tmp_path / "etc/systemd/system").mkdir(parents=True)
    (tmp_path / "srv").mkdir()
    (tmp_path / "srv/wd").symlink_to("/etc/systemd/system")  # absolute: the target system's /etc, not the host's
    (tmp_path / "srv/up").symlink_to("../var/lib/kimi-serve/service")
    assert resolve_in(tmp_path, "/srv/wd/x") == "/etc/systemd/system/x"
    assert resolve_in(tmp_path, "/srv/up") == "/var/lib/kimi-serve/service"
    profile = load_profile("prod", [f"{WD}=/srv/wd"])
    problem = owned_path_problem(profile, WD, tmp_path)
    assert problem and "resolves to /etc/systemd/system" in problem and "unit directory" in problem


def _root_with_user(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "etc/systemd/system").mkdir(parents=True)
    (root / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\nkimi-serve:x:990:990::/x:/usr/sbin/nologin\n")
    (root / "etc/group").write_text("root:x:0:\nkimi-serve:x:990:\n")
    (root / "srv").mkdir()
    (root / "srv/wd").symlink_to("/etc/systemd/system")
    return root


def _owners(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.lstat().st_uid, p.lstat().st_gid) for p in [root, *root.rglob("*")]}


def test_install_service_refuses_before_writing_anything(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root = _root_with_user(tmp_path)
    before = _owners(root)
    for workdir in ("/srv/wd", "/var/lib/kimi-serve/service", "/etc/systemd/system"):
        result = cli("install-service", "--profile", "sim", "--root", str(root), "--set", f"{WD}={workdir}")
        assert result.code == 2, result.err
        line = result.err.strip()
        assert len(line.splitlines()) == 1 and "service.working_directory" in line and "fix:" in line, line
    assert _owners(root) == before  # nothing written, nothing chowned


def test_the_write_step_itself_refuses_the_chown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Even a plan that skipped the check (or a root changed since) never chowns a unit directory."""
    monkeypatch.setenv("KIMI_SERVE_SGLANG_PYTHON", "/opt/sglang/bin/python")
    root = _root_with_user(tmp_path)
    before = _owners(root)
    profile = load_profile("sim", [f"{WD}=/srv/wd"])
    launch, _ = fast_validate(profile)
    unit = render_unit(profile, launch, UnitContext(kimi_serve="/bin/true", package_root="/opt"))
    plan = Plan(profile, unit, ServicePaths(root, unit.name), False, False)

    def no_process(argv, timeout):  # type: ignore[no-untyped-def]
        raise AssertionError(f"ran {argv}")

    with pytest.raises(KimiServeError) as err:
        write_unit(plan, Systemd(no_process, root), Result(unit.name), dict(os.environ))
    assert err.value.exit_code == ExitCode.USAGE and "unit directory" in err.value.one_line()
    assert _owners(root) == before
