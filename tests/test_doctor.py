"""`kimi-serve doctor`: each host check with an injected :class:`Host` (nvidia-smi answers are a STAND-IN in the
format nvidia-smi 580 prints, since this machine has no GPU), plus the real host where it can answer."""

from __future__ import annotations

import json
import os
import resource
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kimi_serve.check.launch import validated_launch
from kimi_serve.core.errors import ExitCode
from kimi_serve.core.proc import Completed
from kimi_serve.host.doctor import DoctorReport, Host, run_doctor
from kimi_serve.profile.loader import load_profile

# its servers (or the code under test's port probes) bind loopback sockets: the listener tier
pytestmark = pytest.mark.usefixtures("loopback_port")

RTX = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
SMI_HEADER = "| NVIDIA-SMI 580.65.06    Driver Version: 580.65.06    CUDA Version: 13.0     |\n"


def gpu_rows(n: int = 8, cc: str = "12.0", free: int = 97000, name: str = RTX, driver: str = "580.65.06") -> str:
    return "".join(f"{i}, {name}, {cc}, 97887, {free}, {driver}\n" for i in range(n))


def topo(n: int = 8, link: str = "SYS") -> str:
    head = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tCPU Affinity\tNUMA Affinity\n"
    rows = "".join(f"GPU{i}\t" + "\t".join("X" if i == j else link for j in range(n)) + "\t0-63\t0\n" for i in range(n))
    return head + rows


def smi(rows: str | None, topology: str = topo(), header: str = SMI_HEADER) -> Callable[[list[str]], Completed | None]:
    def run(argv: list[str]) -> Completed | None:
        if rows is None:
            return None  # nvidia-smi not installed
        if "--query-gpu" in " ".join(argv):
            return Completed(tuple(argv), 0, rows, "")
        if argv[1:] == ["topo", "-m"]:
            return Completed(tuple(argv), 0, topology, "")
        return Completed(tuple(argv), 0, header, "")

    return run


def sglang_site(tmp_path: Path, version: str = "0.5.23") -> Callable[[str], Path]:
    site = tmp_path / "site-packages"
    (site / "sglang").mkdir(parents=True, exist_ok=True)
    (site / "sglang" / "_version.py").write_text(f'__version__ = "{version}"\n')
    return lambda _python: site


def model_dir(root: Path, shards: int = 3, present: int = 3, tokenizer: bool = True) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"model_type": "kimi_k25"}))
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    (root / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {f"w{i}": n for i, n in enumerate(names)}})
    )
    for n in names[:present]:
        (root / n).write_bytes(b"")
    if tokenizer:
        (root / "tokenizer_config.json").write_text("{}")
        (root / "tiktoken.model").write_text("")
    return root


@pytest.fixture
def gpu_profile(write_profile: Callable[..., Path], tmp_path: Path) -> Callable[..., Path]:
    """prod with the model, draft, port and patch set moved to places the test controls."""

    def make(model: Path | None = None, draft: Path | None = None, port: int = 30000, patch_set: str = "null") -> Path:
        model = model or model_dir(tmp_path / "Kimi-K2.5")
        draft = draft or model_dir(tmp_path / "draft", shards=1, present=1, tokenizer=False)
        return write_profile(f"""\
            extends: prod
            python: /usr/bin/python3
            patch_set: {patch_set}
            allreduce: {{flashinfer_fusion_backend: null, torch_symm_mem: false}}
            model: {{path: {model}}}
            speculative: {{draft_model_path: {draft}}}
            server: {{port: {port}, host: 127.0.0.1, api_key_file: null}}
            """)

    return make


def doctor(profile: Path, host: Host) -> DoctorReport:
    p = load_profile(str(profile))
    return run_doctor(p, validated_launch(p), host)


def by_name(report: DoctorReport) -> dict[str, tuple[str, str, str]]:
    return {c.code: (c.status, c.message, c.fix) for c in report.checks}


def scratch_host(tmp_path: Path, *, users: str = "", **parts: Any) -> Host:
    """A Host whose user database, /dev and state root are scratch folders (never the machine's: a real kimi-serve
    account there must not change a result); ``users``: passwd lines of that database."""
    accounts = tmp_path / "accounts"
    (accounts / "etc").mkdir(parents=True, exist_ok=True)
    (accounts / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/bash\n" + users)
    (accounts / "etc/group").write_text("root:x:0:\nvideo:x:44:\n")
    (tmp_path / "dev").mkdir(exist_ok=True)
    roots = {"accounts_root": accounts, "dev_root": tmp_path / "dev", "state_dir": tmp_path / "state"}
    return Host(**{**roots, **parts})


def unlimited(_which: int) -> tuple[int, int]:
    return resource.RLIM_INFINITY, resource.RLIM_INFINITY


def test_no_gpu_is_reported_not_a_crash(gpu_profile: Callable[..., Path], tmp_path: Path) -> None:
    report = doctor(
        gpu_profile(), scratch_host(tmp_path, run=smi(None), sglang_site=sglang_site(tmp_path), rlimit=unlimited)
    )
    checks = by_name(report)
    assert checks["gpus"][0] == "fail" and "no NVIDIA GPU: nvidia-smi is not installed" in checks["gpus"][1]
    assert "engine: simulator" in checks["gpus"][2]
    assert [checks[n][0] for n in ("driver", "topology", "gpu_memory")] == ["skip"] * 3
    assert checks["model"][0] == "pass" and checks["sglang"][0] == "pass"
    assert report.exit_code == ExitCode.ENVIRONMENT


def test_driver_without_devices_is_reported(gpu_profile: Callable[..., Path], tmp_path: Path) -> None:
    def broken(argv: list[str]) -> Completed:
        return Completed(
            tuple(argv), 9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", ""
        )

    checks = by_name(
        doctor(gpu_profile(), scratch_host(tmp_path, run=broken, sglang_site=sglang_site(tmp_path), rlimit=unlimited))
    )
    assert checks["gpus"][0] == "fail" and "couldn't communicate with the NVIDIA driver" in checks["gpus"][1]


def test_eight_sm120_gpus_on_pcie_pass(gpu_profile: Callable[..., Path], tmp_path: Path) -> None:
    report = doctor(
        gpu_profile(), scratch_host(tmp_path, run=smi(gpu_rows()), sglang_site=sglang_site(tmp_path), rlimit=unlimited)
    )
    checks = by_name(report)
    assert checks["gpus"] == ("pass", f"8 GPU(s): {RTX} (profile uses 8)", "")
    assert checks["compute_capability"][0] == "pass"
    assert checks["driver"][1] == "driver 580.65.06, CUDA 13.0"
    assert checks["topology"][0] == "pass" and "PCIe only, no NVLink (SYS x28 GPU pairs)" in checks["topology"][1]
    assert checks["gpu_memory"][0] == "pass"
    assert checks["model"][1].endswith("all 3 shards present") and checks["draft"][0] == "pass"
    assert checks["memlock"][0] == checks["nofile"][0] == "pass"
    assert report.exit_code == ExitCode.OK, [c for c in report.checks if c.status == "fail"]


def test_wrong_gpus_old_driver_nvlink_and_busy_memory_fail_or_warn(
    gpu_profile: Callable[..., Path], tmp_path: Path
) -> None:
    rows = gpu_rows(4, cc="9.0", free=20000, name="NVIDIA H100 80GB HBM3", driver="550.54.15")
    host = scratch_host(
        tmp_path,
        run=smi(rows, topo(4, "NV18"), SMI_HEADER.replace("13.0", "12.4")),
        sglang_site=sglang_site(tmp_path),
        rlimit=unlimited,
    )
    checks = by_name(doctor(gpu_profile(), host))
    assert checks["gpus"][0] == "fail" and "4 GPU(s) visible, the profile needs 8" in checks["gpus"][1]
    assert checks["compute_capability"][0] == "fail" and "9.0, expected 12.0" in checks["compute_capability"][1]
    assert checks["driver"][0] == "fail" and "driver 550.54.15, CUDA 12.4" in checks["driver"][1]
    assert checks["topology"][0] == "warn" and "NVLink present" in checks["topology"][1]
    assert checks["gpu_memory"][0] == "fail" and "GPU 0 has 19.5 of 95.6 GiB free" in checks["gpu_memory"][1]


def test_incomplete_model_and_missing_tokenizer_fail_with_download_fix(
    gpu_profile: Callable[..., Path], tmp_path: Path
) -> None:
    model = model_dir(tmp_path / "partial", shards=64, present=60, tokenizer=False)
    checks = by_name(
        doctor(
            gpu_profile(model=model, draft=tmp_path / "nope"),
            scratch_host(tmp_path, run=smi(gpu_rows()), sglang_site=sglang_site(tmp_path), rlimit=unlimited),
        )
    )
    assert checks["model"][0] == "fail" and "4 of 64 shards missing (first: model-00061-of-00064" in checks["model"][1]
    assert f"huggingface-cli download moonshotai/Kimi-K2.5 --local-dir {model}" in checks["model"][2]
    assert checks["model.tokenizer"][0] == "fail"
    assert checks["draft"][0] == "fail" and "lightseekorg/kimi-k2.5-eagle3-mla" in checks["draft"][2]


def test_wrong_sglang_version_and_limits(gpu_profile: Callable[..., Path], tmp_path: Path) -> None:
    def small(which: int) -> tuple[int, int]:
        return (65536, 65536) if which == resource.RLIMIT_MEMLOCK else (1024, 4096)

    checks = by_name(
        doctor(
            gpu_profile(),
            scratch_host(tmp_path, run=smi(gpu_rows()), sglang_site=sglang_site(tmp_path, "0.5.22"), rlimit=small),
        )
    )
    assert checks["sglang"][0] == "fail" and "sglang 0.5.22" in checks["sglang"][1]
    assert "pip install sglang==0.5.23" in checks["sglang"][2]
    assert checks["memlock"] == (
        "warn",
        "locked-memory limit 64 KiB (NCCL and CUDA pin host memory)",
        "ulimit -l unlimited (the systemd unit sets LimitMEMLOCK=infinity)",
    )
    assert checks["nofile"][0] == "warn" and "1024/4096" in checks["nofile"][1]


def test_port_in_use_fails(gpu_profile: Callable[..., Path], tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        checks = by_name(
            doctor(
                gpu_profile(port=port),
                scratch_host(tmp_path, run=smi(gpu_rows()), sglang_site=sglang_site(tmp_path), rlimit=unlimited),
            )
        )
    assert checks["port"][0] == "fail" and f"port {port} on 127.0.0.1 is already in use" in checks["port"][1]
    assert "~2 min later" in checks["port"][1]


def test_unapplied_patch_set_is_refused_naming_the_apply_command(
    gpu_profile: Callable[..., Path], tmp_path: Path, sglang_python: str
) -> None:
    # the CPU venv's real SGLang 0.5.23, its files the patch set touches copied unpatched into a scratch site (the
    # venv itself is patched when scripts/build-cpu-venv.sh built it; an older one is not)
    from kimi_serve.patches import load_patch_set, revert
    from kimi_serve.sglang.site import site_packages_of

    real = site_packages_of(sglang_python)
    site = tmp_path / "site"
    patch_set = load_patch_set("sglang-0.5.23-sm120")
    for rel in {"sglang/_version.py", *(f for p in patch_set.patches for f in p.files)}:
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(real / rel, site / rel)
    revert(site, patch_set, state_dir=tmp_path / "scratch-state")  # a no-op on an unpatched venv's files
    checks = by_name(
        doctor(
            gpu_profile(patch_set="sglang-0.5.23-sm120"),
            scratch_host(
                tmp_path,
                run=smi(gpu_rows()),
                sglang_site=lambda _p: site,
                rlimit=unlimited,
                state_dir=tmp_path / "state",
            ),
        )
    )
    status, message, fix = checks["patch_set"]
    assert status == "fail" and "patch set sglang-0.5.23-sm120 is not applied" in message
    assert fix == "kimi-serve patches apply --python /usr/bin/python3 --set sglang-0.5.23-sm120"


def test_cli_doctor_on_this_gpu_less_host(cli: Callable[..., object], tmp_path: Path) -> None:
    if any(Path(d, "nvidia-smi").exists() for d in os.environ.get("PATH", "").split(os.pathsep)):
        pytest.skip("this host has nvidia-smi")
    result = cli("doctor", "--profile", "prod", "--json")
    assert result.code == 5
    data = json.loads(result.out)
    assert data["kind"] == "kimi-serve-doctor" and data["exit_code"] == 5
    gpus = next(c for c in data["checks"] if c["code"] == "gpus")
    assert gpus["status"] == "fail" and "no NVIDIA GPU" in gpus["message"]
    text = cli("doctor")
    assert text.code == 5 and "FAIL  gpus" in text.out and "doctor: " in text.out


def test_simulator_profile_needs_no_gpu(cli: Callable[..., object], sglang_python: str) -> None:
    result = cli("doctor", "--profile", "sim", "--json")
    checks = {c["code"]: c["status"] for c in json.loads(result.out)["checks"]}
    assert checks["gpus"] == "skip" and checks["sglang"] == "pass" and "model" not in checks


def test_service_user_is_judged_from_the_injected_user_database_only(
    gpu_profile: Callable[..., Path], tmp_path: Path
) -> None:
    """doctor's service user comes from the accounts root it is given (core/accounts.py), never from NSS: the scratch
    database without kimi-serve is a skip however the machine's /etc/passwd reads, and one with it is judged."""
    profile = gpu_profile()
    parts = {"run": smi(gpu_rows()), "sglang_site": sglang_site(tmp_path), "rlimit": unlimited}
    absent = by_name(doctor(profile, scratch_host(tmp_path / "a", **parts)))
    assert absent["service_user"][0] == "skip" and "does not exist yet" in absent["service_user"][1]
    user = "kimi-serve:x:4242:4242::/var/lib/kimi-serve/server:/usr/sbin/nologin\n"
    present = by_name(doctor(profile, scratch_host(tmp_path / "b", users=user, **parts)))
    assert present["service_user"] == ("pass", "service user kimi-serve (uid 4242) exists", "")


def test_default_host_reads_the_accounts_root_of_the_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real Host (the doctor command's) reads $KIMI_SERVE_ACCOUNTS_ROOT's database, as install-service does."""
    monkeypatch.setenv("KIMI_SERVE_ACCOUNTS_ROOT", str(tmp_path))
    assert Host.real().accounts_root == tmp_path and Host().accounts_root == tmp_path


def test_doctor_tests_pass_where_a_real_kimi_serve_account_exists(tmp_path: Path) -> None:
    """This file's tests, run in a private mount namespace whose /etc/passwd and /etc/group hold a kimi-serve account
    (files of the test's own, bind-mounted there: the machine's are never read or changed), pass as they do on a clean
    machine."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare(1)")
    argv = [unshare, "-m"] if os.geteuid() == 0 else [unshare, "-rm"]
    if subprocess.run([*argv, "true"], capture_output=True, check=False).returncode != 0:
        pytest.skip("no mount namespace here (unshare -m refused)")
    uid, gid = os.getuid(), os.getgid()  # a database of its own (the machine's is neither read nor changed)
    users = [
        "root:x:0:0:root:/root:/bin/sh",
        f"tester:x:{uid}:{gid}::/tmp:/bin/sh" if uid else "",
        "kimi-serve:x:4242:4242::/var/lib/kimi-serve:/usr/sbin/nologin",
    ]
    groups = ["root:x:0:", "video:x:44:kimi-serve", "kimi-serve:x:4242:"]
    mounts = []
    for name, lines in (("passwd", users), ("group", groups)):
        (tmp_path / name).write_text("".join(f"{line}\n" for line in lines if line))
        mounts.append(f"mount --bind {tmp_path / name} /etc/{name}")
    pytest_argv = [
        sys.executable,
        "-m",
        "pytest",
        __file__,
        "-q",
        "-p",
        "no:cacheprovider",
        "-k",
        "not real_kimi_serve",
    ]
    script = " && ".join([*mounts, "getent passwd kimi-serve", shlex.join(pytest_argv)])
    env = {**os.environ, "KIMI_SERVE_TEST_WORKERS": "0"}
    done = subprocess.run(
        [*argv, "sh", "-c", script], capture_output=True, text=True, env=env, timeout=600, check=False
    )
    assert done.returncode == 0 and "kimi-serve:x:4242" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
