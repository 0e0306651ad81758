"""The service user: install's account changes (useradd/usermod through an injected runner, or for real with
--prefix into a scratch root) and doctor's check that the user can open the GPU nodes and read the model."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from kimi_serve.core.accounts import lookup
from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.findings import FAIL, PASS, SKIP, WARN
from kimi_serve.core.proc import Completed
from kimi_serve.host.service_user import service_user_findings
from kimi_serve.profile.loader import load_profile
from kimi_serve.service import account

UID = 4242


def _root(tmp_path: Path, *, user: bool, groups: str = "") -> Path:
    root = tmp_path / "accounts"
    (root / "etc").mkdir(parents=True)
    (root / "etc/passwd").write_text(
        "root:x:0:0:root:/root:/bin/bash\n"
        + (f"kimi-serve:x:{UID}:{UID}::/var/lib/kimi-serve/server:/usr/sbin/nologin\n" if user else "")
    )
    (root / "etc/group").write_text(f"root:x:0:\nvideo:x:44:{groups}\nkimi-serve:x:{UID}:\n")
    return root


class Recorder:
    def __init__(self, rc: int = 0) -> None:
        self.calls: list[list[str]] = []
        self.rc = rc

    def __call__(self, argv: Sequence[str], *, timeout: float) -> Completed:
        self.calls.append(list(argv))
        return Completed(list(argv), self.rc, "", "useradd: boom" if self.rc else "")


def _gpu_dev(tmp_path: Path) -> Path:
    """A /dev with one GPU-like node: /dev/null's device, group video, mode 0660 (needs CAP_MKNOD)."""
    dev = tmp_path / "dev"
    dev.mkdir()
    try:
        os.mknod(dev / "nvidia0", 0o660 | 0o020000, os.stat("/dev/null").st_rdev)
    except PermissionError:
        pytest.skip("mknod needs CAP_MKNOD")
    os.chown(dev / "nvidia0", 0, 44)
    (dev / "nvidia0").chmod(0o660)  # mknod applies the umask
    return dev


def test_existing_user_joins_the_device_groups_only(tmp_path: Path) -> None:
    root, dev = _root(tmp_path, user=True), _gpu_dev(tmp_path)
    run = Recorder()
    found, done = account.ensure(
        "kimi-serve", "/var/lib/kimi-serve/server", accounts_root=root, dev_root=dev, runner=run
    )
    assert found is not None and found.uid == UID
    assert run.calls == [["usermod", "--prefix", str(root), "--append", "--groups", "video", "kimi-serve"]]
    assert done == ["add kimi-serve to video"]
    assert account.planned("kimi-serve", root, dev)[:1] == ["add kimi-serve to video (the groups owning /dev/nvidia*)"]


def test_a_failing_useradd_is_one_line_exit_5(tmp_path: Path) -> None:
    with pytest.raises(KimiServeError) as err:
        account.ensure(
            "kimi-serve", "/x", accounts_root=_root(tmp_path, user=False), dev_root=tmp_path, runner=Recorder(rc=1)
        )
    assert err.value.exit_code == 5 and "useradd: boom" in str(err.value)


def test_root_is_left_alone(tmp_path: Path) -> None:
    run = Recorder()
    assert account.ensure("root", "/x", accounts_root=tmp_path, dev_root=tmp_path, runner=run) == (None, [])
    assert run.calls == []


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None, reason="real useradd needs root")
def test_real_useradd_into_a_scratch_root(tmp_path: Path) -> None:
    from kimi_serve.service.systemctl import run

    root = _root(tmp_path, user=False)
    found, done = account.ensure(
        "kimi-serve", "/var/lib/kimi-serve/server", accounts_root=root, dev_root=_gpu_dev(tmp_path), runner=run
    )
    assert found is not None and found.uid != 0 and "video" in found.groups
    assert lookup("kimi-serve", root) == found and done[0] == "create system user kimi-serve"
    assert (
        "kimi-serve:" in (root / "etc/passwd").read_text() and ":/usr/sbin/nologin" in (root / "etc/passwd").read_text()
    )


def _profile(write_profile, model: Path, user: str = "kimi-serve"):  # type: ignore[no-untyped-def]
    return load_profile(
        str(
            write_profile(
                f"extends: prod\nmodel:\n  path: {model}\nspeculative:\n  enabled: false\nservice:\n  user: {user}\n",
                name="su",
            )
        )
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_doctor_judges_devices_and_model_as_the_user(tmp_path: Path, write_profile) -> None:  # type: ignore[no-untyped-def]
    base = Path(tempfile.mkdtemp(prefix="kimi-serve-su-", dir="/tmp"))  # pytest's own tmp root is 0700
    base.chmod(0o755)
    try:
        _doctor_cases(tmp_path, base, write_profile)
    finally:
        shutil.rmtree(base)


def _doctor_cases(tmp_path: Path, base: Path, write_profile) -> None:  # type: ignore[no-untyped-def]
    model = base / "models" / "Kimi-K2.5"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "config.json").chmod(0o600)  # root's: the service user cannot read it
    dev = _gpu_dev(tmp_path)
    p = _profile(write_profile, model)

    def codes(root: Path) -> dict[str, str]:
        return {f.code: f.status for f in service_user_findings(p, accounts_root=root, dev_root=dev, gpus=True)}

    assert codes(_root(tmp_path / "a", user=True)) == {
        "service_user": PASS,
        "service_user.devices": FAIL,
        "service_user.model": FAIL,
    }
    (model / "config.json").chmod(0o644)
    assert codes(_root(tmp_path / "b", user=True, groups="kimi-serve")) == {
        "service_user": PASS,
        "service_user.devices": PASS,
        "service_user.model": PASS,
    }
    (base / "models").chmod(0o700)  # a directory above the model it cannot enter
    found = service_user_findings(
        p, accounts_root=_root(tmp_path / "c", user=True, groups="kimi-serve"), dev_root=dev, gpus=True
    )
    assert any(f.code == "service_user.model" and "cannot enter" in f.message for f in found)
    assert [
        f.status
        for f in service_user_findings(p, accounts_root=_root(tmp_path / "d", user=False), dev_root=dev, gpus=True)
    ] == [SKIP]
    root_p = _profile(write_profile, model, user="root")
    assert [f.status for f in service_user_findings(root_p, accounts_root=tmp_path, dev_root=dev, gpus=True)] == [WARN]
