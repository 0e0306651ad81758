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
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kimi_serve.check.launch import validated_launch
from kimi_serve.core.errors import ExitCode
from kimi_serve.core.proc import Completed
from kimi_serve.host.doctor import DoctorReport, Host, run_doctor
from kimi_serve.host.sandbox_probe import PROBE
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


def p2p(n: int = 8, bad: dict[tuple[int, int], str] | None = None) -> str:
    """``nvidia-smi topo -p2p r`` as driver 580 prints it (OK everywhere but the ``bad`` pairs)."""
    bad = bad or {}
    head = " \t" + "\t".join(f"GPU{i}" for i in range(n)) + "\t\n"
    rows = "".join(
        f" GPU{i}\t" + "\t".join("X" if i == j else bad.get((i, j), "OK") for j in range(n)) + "\t\n" for i in range(n)
    )
    return head + rows + "\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n  CNS  = Chipset not supported\n"


LSPCI_ACS_OFF = (
    "00:01.1 PCI bridge: Advanced Micro Devices, Inc. [AMD] Starship/Matisse GPP Bridge\n"
    "\tCapabilities: [2a0 v1] Access Control Services\n"
    "\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans+\n"
    "\t\tACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-\n"
)
LSPCI_ACS_ON = LSPCI_ACS_OFF.replace(
    "ACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir-", "ACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+"
)


def smi(
    rows: str | None,
    topology: str = topo(),
    header: str = SMI_HEADER,
    p2p_matrix: str | None = None,
    lspci: str | None = LSPCI_ACS_OFF,
) -> Callable[[list[str]], Completed | None]:
    def run(argv: list[str]) -> Completed | None:
        if argv[0] == "lspci":
            return None if lspci is None else Completed(tuple(argv), 0, lspci, "")
        if rows is None:
            return None  # nvidia-smi not installed
        if "--query-gpu" in " ".join(argv):
            return Completed(tuple(argv), 0, rows, "")
        if argv[1:] == ["topo", "-m"]:
            return Completed(tuple(argv), 0, topology, "")
        if argv[1:] == ["topo", "-p2p", "r"]:
            return Completed(tuple(argv), 0, p2p_matrix if p2p_matrix is not None else p2p(rows.count("\n")), "")
        return Completed(tuple(argv), 0, header, "")

    return run


PROC_DEVICES = (
    "Character devices:\n  1 mem\n  4 tty\n195 nvidia-frontend\n234 nvidia-caps\n510 nvidia-uvm\n"
    "\nBlock devices:\n  7 loop\n  8 sd\n"
)


def stand_in_gpu_host(
    root: Path,
    devices: str = PROC_DEVICES,
    uvm: bool = True,
    modprobe: bool = True,
    iommu_groups: int = 0,
    cmdline: str = "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro quiet",
    compilers: tuple[str, ...] = ("nvcc", "c++"),
) -> Path:
    """A GPU host's files under ``root``: /proc/devices, /proc/cmdline, /sys/kernel/iommu_groups, /dev/nvidia*,
    nvidia-modprobe and the compilers (nvcc in /usr/local/cuda/bin, c++/g++ in /usr/bin)."""
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "devices").write_text(devices)
    (root / "proc" / "cmdline").write_text(cmdline + "\n")
    for i in range(iommu_groups):
        (root / "sys" / "kernel" / "iommu_groups" / str(i)).mkdir(parents=True)
    (root / "dev").mkdir(exist_ok=True)
    for name in ["nvidiactl", "nvidia0"] + (["nvidia-uvm"] if uvm else []):
        (root / "dev" / name).write_text("")
    tools = [("usr/bin", "nvidia-modprobe")] if modprobe else []
    tools += [("usr/local/cuda/bin" if c == "nvcc" else "usr/bin", c) for c in compilers]
    for folder, name in tools:
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / name).write_text("#!/bin/sh\n")
        (root / folder / name).chmod(0o755)
    return root


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
    """doctor on a stand-in host: ``host``'s files are a stand-in GPU host's unless the test gave its own root."""
    if host.fs_root == Path("/"):
        root = stand_in_gpu_host(profile.parent / "gpu-host")
        host = replace(host, fs_root=root, dev_root=root / "dev", environ={"PATH": "/usr/bin:/bin"})
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
    assert checks["driver"][1] == "driver 580.65.06, CUDA 13.0 (CUDA 13.0 needs 580+)"
    for name in ("devices", "nvidia_uvm", "iommu", "acs", "p2p", "nvcc", "cxx"):
        assert checks[name][0] == "pass", (name, checks[name])
    assert checks["nvcc"][1].endswith("/usr/local/cuda/bin/nvcc (found through /usr/local/cuda)")
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
    assert f"hf download moonshotai/Kimi-K2.5 --local-dir {model}" in checks["model"][2]
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
    assert checks["sglang"][2].startswith("kimi-serve engine install --profile ")  # the README's fix, one spelling
    assert checks["memlock"] == (
        "warn",
        "locked-memory limit 64 KiB (NCCL and CUDA pin host memory)",
        "ulimit -l unlimited (the systemd unit sets LimitMEMLOCK=infinity)",
    )
    assert checks["nofile"][0] == "warn" and "1024/4096" in checks["nofile"][1]


def test_a_profile_without_gpus_is_not_warned_about_gpu_limits(write_profile, tmp_path: Path, loopback_port) -> None:
    """The same small limits: a simulator profile pins no GPU memory and serves no GPU server's files, so memlock and
    nofile are skipped with the reason, not warnings it cannot act on (up's preflight runs the same checks)."""

    def small(which: int) -> tuple[int, int]:
        return (65536, 65536) if which == resource.RLIMIT_MEMLOCK else (1024, 4096)

    profile = write_profile(f"extends: sim\nserver:\n  port: {loopback_port()}\n")
    checks = by_name(doctor(profile, scratch_host(tmp_path, sglang_site=sglang_site(tmp_path), rlimit=small)))
    assert checks["memlock"][:2] == ("skip", "engine: simulator: no GPU memory is pinned"), checks["memlock"]
    assert checks["nofile"][0] == "skip" and checks["nofile"][1].startswith("engine: simulator: "), checks["nofile"]


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
    profile = gpu_profile(patch_set="sglang-0.5.23-sm120")
    checks = by_name(
        doctor(
            profile,
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
    # the one spelling: the profile, whose python: `patches --profile` resolves as doctor does
    assert fix == f"kimi-serve patches apply --profile {profile}"


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


def gpu_host_doctor(
    gpu_profile: Callable[..., Path],
    tmp_path: Path,
    *,
    run: Callable[[list[str]], Completed | None] | None = None,
    environ: dict[str, str] | None = None,
    **files: object,
) -> dict[str, tuple[str, str, str]]:
    root = stand_in_gpu_host(tmp_path / "host", **files)  # type: ignore[arg-type]
    host = Host(
        run=run or smi(gpu_rows()),
        sglang_site=sglang_site(tmp_path),
        rlimit=unlimited,
        fs_root=root,
        dev_root=root / "dev",
        environ=environ if environ is not None else {"PATH": "/usr/bin:/bin"},
    )
    profile = gpu_profile(model=model_dir(tmp_path / "model"), draft=model_dir(tmp_path / "draft", 1, 1, False))
    return by_name(doctor(profile, host))


@pytest.mark.parametrize(
    ("driver", "cuda", "status"),
    [
        ("570.133.07", "12.8", "fail"),  # passed before: Blackwell's floor, not the lock's
        ("575.57.08", "12.9", "fail"),
        ("580.65.06", "12.9", "fail"),  # an R580 driver that reports CUDA 12.9 cannot run cu130 either
        ("580.65.06", "13.0", "pass"),
        ("590.44.01", "13.1", "pass"),
    ],
)
def test_driver_floor_is_the_locks_cuda(
    gpu_profile: Callable[..., Path], tmp_path: Path, driver: str, cuda: str, status: str
) -> None:
    run = smi(gpu_rows(driver=driver), header=SMI_HEADER.replace("580.65.06", driver).replace("13.0", cuda))
    checks = gpu_host_doctor(gpu_profile, tmp_path, run=run)
    assert checks["driver"][0] == status, checks["driver"]
    if status == "fail":
        assert "the GPU lock is built for CUDA 13.0, which needs driver 580+" in checks["driver"][1]
        assert checks["driver"][2] == "install NVIDIA driver 580 or newer (the R580 branch)"


def test_driver_floor_follows_the_installed_engines_cuda(gpu_profile: Callable[..., Path], tmp_path: Path) -> None:
    # an engine installed from a CUDA 12.8 lock: its dist-info says so, and R570 is enough for it
    site = tmp_path / "site-packages"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "_version.py").write_text('__version__ = "0.5.23"\n')
    (site / "nvidia_cuda_runtime_cu12-12.8.90.dist-info").mkdir()
    (site / "torch-2.9.1+cu128.dist-info").mkdir()
    root = stand_in_gpu_host(tmp_path / "host")
    host = Host(
        run=smi(
            gpu_rows(driver="570.133.07"), header=SMI_HEADER.replace("580.65.06", "570.133.07").replace("13.0", "12.8")
        ),
        sglang_site=lambda _p: site,
        rlimit=unlimited,
        fs_root=root,
        dev_root=root / "dev",
        environ={"PATH": "/usr/bin"},
    )
    status, message, _fix = by_name(doctor(gpu_profile(), host))["driver"]
    assert status == "pass" and message.endswith("(CUDA 12.8 needs 570+)")


def test_cuda_table_and_the_locks_cuda() -> None:
    from kimi_serve.engine import locks
    from kimi_serve.sglang.toolchain import cuda_of, lock_pins, min_driver, shipped_lock_cuda

    gpu = locks.load("gpu")
    assert cuda_of({name: pin.version for name, pin in gpu.pins.items()}) == shipped_lock_cuda() == (13, 0)
    assert lock_pins(gpu.path.read_text())["nvidia-cuda-nvcc"] == gpu.pins["nvidia-cuda-nvcc"].version
    assert [min_driver(c) for c in [(12, 4), (12, 8), (12, 9), (13, 0), (13, 2)]] == [525, 570, 570, 580, 580]
    assert cuda_of({"torch": "2.14.1+cu130"}) == (13, 0) and cuda_of({"torch": "2.9.1+cu128"}) == (12, 8)
    assert cuda_of({"nvidia-nccl-cu13": "2.30.7"}) == (13, 0) and cuda_of({"numpy": "2.0"}) is None


@pytest.mark.parametrize(
    ("devices", "status", "says"),
    [
        (PROC_DEVICES, "pass", "nvidia-frontend, nvidia-caps, nvidia-uvm"),
        (PROC_DEVICES.replace("nvidia-frontend", "nvidia"), "pass", "registers nvidia, nvidia-caps"),  # other spelling
        (PROC_DEVICES + "Character devices:\n241 nvidia-nvswitch\n", "warn", "nvidia-nvswitch, which the unit's"),
        ("Character devices:\n  1 mem\n510 nvidia-uvm\n", "fail", "no NVIDIA GPU device group"),
    ],
)
def test_device_groups_the_driver_registers_against_the_units_device_allow(
    gpu_profile: Callable[..., Path], tmp_path: Path, devices: str, status: str, says: str
) -> None:
    checks = gpu_host_doctor(gpu_profile, tmp_path, devices=devices)
    assert checks["devices"][0] == status and says in checks["devices"][1], checks["devices"]
    if status != "pass":
        assert checks["devices"][2]


def test_nvidia_uvm_missing_is_made_by_the_unit_or_named(gpu_profile: Callable[..., Path], tmp_path: Path) -> None:
    made = gpu_host_doctor(gpu_profile, tmp_path / "a", uvm=False)["nvidia_uvm"]
    assert made[0] == "warn" and "ExecStartPre=-+/usr/bin/nvidia-modprobe -u -c=0" in made[1]
    lost = gpu_host_doctor(gpu_profile, tmp_path / "b", uvm=False, modprobe=False)["nvidia_uvm"]
    assert lost[0] == "fail" and "/usr/bin/nvidia-modprobe is not installed" in lost[1]
    assert "modules-load.d/nvidia-uvm.conf" in lost[2]


@pytest.mark.parametrize(
    ("groups", "cmdline", "status"),
    [
        (0, "ro quiet", "pass"),
        (40, "ro iommu=pt amd_iommu=on", "pass"),
        (40, "ro intel_iommu=on", "fail"),  # prod forces NCCL_P2P_LEVEL=SYS
        (40, "ro", "fail"),  # on by the kernel's default
    ],
)
def test_iommu_translation_fails_with_p2p_forced(
    gpu_profile: Callable[..., Path], tmp_path: Path, groups: int, cmdline: str, status: str
) -> None:
    iommu = gpu_host_doctor(gpu_profile, tmp_path, iommu_groups=groups, cmdline=cmdline)["iommu"]
    assert iommu[0] == status, iommu
    if status == "fail":
        assert "NCCL_P2P_LEVEL=SYS" in iommu[1] and "iommu=pt" in iommu[2]


def test_acs_redirection_and_the_p2p_matrix(gpu_profile: Callable[..., Path], tmp_path: Path) -> None:
    acs = gpu_host_doctor(gpu_profile, tmp_path / "a", run=smi(gpu_rows(), lspci=LSPCI_ACS_ON))["acs"]
    # a warning: lspci cannot tell a GPU's bridge from a NIC's; the p2p check judges the GPUs' own paths
    assert acs[0] == "warn" and "ACS redirection on at 1 PCIe bridge port(s)" in acs[1] and "setpci" in acs[2]
    assert "NCCL_P2P_LEVEL=SYS" in acs[1]
    gone = gpu_host_doctor(gpu_profile, tmp_path / "b", run=smi(gpu_rows(), lspci=None))["acs"]
    assert gone[0] == "skip"
    hidden = "00:01.1 PCI bridge: AMD GPP Bridge\n\tCapabilities: <access denied>\n"  # lspci -vvv as a user
    denied = gpu_host_doctor(gpu_profile, tmp_path / "d", run=smi(gpu_rows(), lspci=hidden))["acs"]
    assert denied[0] == "skip" and "only to root" in denied[1]
    matrix = p2p(8, {(0, 4): "CNS", (4, 0): "CNS", (3, 7): "TNS"})
    found = gpu_host_doctor(gpu_profile, tmp_path / "c", run=smi(gpu_rows(), p2p_matrix=matrix))["p2p"]
    assert found[0] == "fail" and "3 GPU pair(s) without P2P reads, e.g. GPU0->GPU4: CNS" in found[1]
    assert "allreduce.pcie_ipc: false" in found[2]


def test_p2p_matrix_parses_what_nvidia_smi_prints() -> None:
    from kimi_serve.host.gpu_host import p2p_matrix

    matrix = p2p_matrix(p2p(4, {(1, 2): "NS"}))
    assert len(matrix) == 12 and matrix[(1, 2)] == "NS" and matrix[(2, 1)] == "OK"
    assert p2p_matrix("garbage\n\x00\nGPU0\n") == {}


def test_compilers_are_found_as_the_jit_finds_them(gpu_profile: Callable[..., Path], tmp_path: Path) -> None:
    none = gpu_host_doctor(gpu_profile, tmp_path / "a", compilers=())
    assert none["nvcc"][0] == "fail" and "no CUDA_HOME, PATH, /usr/local/cuda" in none["nvcc"][1]
    assert "engine install" in none["nvcc"][2]
    assert none["cxx"][0] == "fail" and "apt-get install g++" in none["cxx"][2]
    gxx = gpu_host_doctor(gpu_profile, tmp_path / "b", compilers=("g++",))
    assert gxx["cxx"] == ("pass", "host C++ compiler under up's environment: /usr/bin/g++", "")
    wrong = gpu_host_doctor(gpu_profile, tmp_path / "c", environ={"PATH": "/usr/bin", "CXX": "/opt/gcc/bin/g++"})
    assert wrong["cxx"][0] == "fail"  # $CXX wins and is not there
    home = gpu_host_doctor(gpu_profile, tmp_path / "d", compilers=("c++",), environ={"CUDA_HOME": "/nope"})
    assert home["nvcc"][0] == "fail" and "CUDA_HOME=/nope" in home["nvcc"][1]


def _unit_gpu(tmp_path: Path, write_profile: Callable[..., Path], answer: Completed | None, *, as_root: bool = True):  # type: ignore[no-untyped-def]
    """unit_gpu_findings for prod served by /opt/engine/bin/python, an engine that carries nvcc, on a stand-in host
    (its root has c++ but no /usr/local/cuda: only the engine's nvcc), and on a second root without the engine."""
    from kimi_serve.service.unit import UnitContext
    from kimi_serve.service.unit_gpu import unit_gpu_findings

    root = stand_in_gpu_host(tmp_path / "host", compilers=("c++",))
    nvcc = root / "opt/engine/lib/python3.11/site-packages/nvidia/cu13/bin/nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    p = load_profile(str(write_profile("extends: prod\npython: /opt/engine/bin/python\n", name="unit-gpu")))
    launch = validated_launch(p)
    ctx = UnitContext(kimi_serve="/opt/kimi-serve/bin/kimi-serve", package_root="/opt/kimi-serve/src")
    seen: list[list[str]] = []

    def run_probe(argv: list[str]) -> Completed | None:
        seen.append(argv)
        return answer

    found = unit_gpu_findings(p, launch, ctx, Host(fs_root=root, run_probe=run_probe), gpus_found=True, as_root=as_root)
    bare = stand_in_gpu_host(tmp_path / "bare", compilers=())
    elsewhere = unit_gpu_findings(p, launch, ctx, Host(fs_root=bare), gpus_found=False, as_root=True)
    return {f.code: (f.status, f.message, f.fix) for f in found}, seen, {f.code: f.status for f in elsewhere}


def _answer(**fields: object) -> Completed:
    return Completed(("systemd-run",), 0, "Running as unit: kimi-serve-doctor-cuda.service\n" + json.dumps(fields), "")


def test_unit_cuda_probe_runs_with_the_units_own_sandbox(tmp_path: Path, write_profile: Callable[..., Path]) -> None:
    ok = _answer(cuda=True, devices=8, copy="ok", peer=True)
    checks, seen, elsewhere = _unit_gpu(tmp_path, write_profile, ok)
    assert checks["unit.cuda"] == (
        "pass",
        "CUDA init and a GPU0->GPU1 copy work inside the unit's sandbox (8 GPU(s), peer access on)",
        "",
    )
    home = "/opt/engine/lib/python3.11/site-packages/nvidia/cu13"
    assert checks["unit.nvcc"] == (
        "pass",
        f"nvcc for the JIT kernels under the unit: {home}/bin/nvcc (found through CUDA_HOME)",
        "",
    )
    assert checks["unit.cxx"] == ("pass", "host C++ compiler under the unit: /usr/bin/c++", "")
    assert elsewhere == {"unit.nvcc": "fail", "unit.cxx": "fail", "unit.cuda": "skip"}  # a root without them
    (argv,) = seen
    assert argv[:2] == ["systemd-run", "--unit=kimi-serve-doctor-cuda"] and "--uid=kimi-serve" in argv
    for prop in (
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=",
        "DevicePolicy=closed",
        "DeviceAllow=char-nvidia-frontend rw",
        "DeviceAllow=char-nvidia rw",
        "DeviceAllow=char-nvidia-uvm rw",
        "SystemCallFilter=@system-service pidfd_getfd",
        "CacheDirectory=kimi-serve",
        "LimitMEMLOCK=infinity",
    ):
        assert f"--property={prop}" in argv, prop
    assert f"--setenv=CUDA_HOME={home}" in argv and f"--setenv=PATH={home}/bin:/usr/local/sbin:" in " ".join(argv)
    assert (
        "--setenv=NCCL_P2P_LEVEL=SYS" in argv
        and "--setenv=SGLANG_JIT_CACHE_DIR=/var/cache/kimi-serve/sglang/jit" in argv
    )
    cut = argv.index("--")
    assert argv[cut + 1 :] == ["/opt/engine/bin/python", "-P", "-c", PROBE]


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (_answer(cuda=False, devices=0, error="RuntimeError: No CUDA GPUs are available"), "does not initialise"),
        (_answer(cuda=True, devices=4, copy="ok"), "CUDA sees 4 GPU(s), the profile needs 8"),
        (_answer(cuda=True, devices=8, copy="mismatch"), "GPU0->GPU1 copy inside the unit's sandbox failed"),
        (_answer(cuda=True, devices=8, copy="skipped", error="RuntimeError: CUDA error: peer mapping"), "peer mapping"),
        (Completed(("systemd-run",), 1, "", "Failed to start transient service unit: Access denied"), "Access denied"),
        (Completed(("systemd-run",), 0, "[1, 2]\nnot json {", ""), "gave no answer"),
    ],
)
def test_unit_cuda_probe_failures_are_named_with_the_fix(
    tmp_path: Path, write_profile: Callable[..., Path], answer: Completed, says: str
) -> None:
    checks, _seen, _elsewhere = _unit_gpu(tmp_path, write_profile, answer)
    status, message, fix = checks["unit.cuda"]
    assert status == "fail" and says in message, message
    assert "service.hardening: relaxed" in fix


def test_unit_cuda_probe_is_skipped_without_root_or_systemd_run(
    tmp_path: Path, write_profile: Callable[..., Path]
) -> None:
    checks, seen, _elsewhere = _unit_gpu(tmp_path / "a", write_profile, None, as_root=False)
    assert checks["unit.cuda"][0] == "skip" and "not running as root" in checks["unit.cuda"][1] and not seen
    checks, seen, _elsewhere = _unit_gpu(tmp_path / "b", write_profile, None)
    assert checks["unit.cuda"][0] == "skip" and "systemd-run is not installed" in checks["unit.cuda"][1] and seen


def test_the_probe_script_answers_one_json_line_even_without_cuda() -> None:
    import subprocess
    import sys

    from kimi_serve.host.sandbox_probe import parse_probe

    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=False)
    answer = parse_probe(Completed(("python",), done.returncode, done.stdout, done.stderr))
    assert done.returncode == 0 and answer is not None and answer["cuda"] is False and answer["error"], done


def test_one_gpu_has_no_p2p_to_check() -> None:
    from kimi_serve.host.gpu_host import check_p2p

    def never(argv: list[str]) -> Completed | None:
        raise AssertionError(argv)

    found = check_p2p(never, 1, {"NCCL_P2P_LEVEL": "SYS"})
    assert (found.status, found.message) == ("skip", "the profile uses one GPU: no peer traffic")


def test_preflight_stops_a_start_on_the_new_gpu_host_checks(gpu_profile: Callable[..., Path], tmp_path: Path) -> None:
    """up's preflight is doctor as the invoking user: a host that cannot make /dev/nvidia-uvm and has no nvcc stops
    the start (exit 5) naming the first, every failure said with its fix."""
    from kimi_serve.core.errors import KimiServeError
    from kimi_serve.host.preflight import preflight

    root = stand_in_gpu_host(tmp_path / "host", uvm=False, modprobe=False, compilers=("c++",))
    host = Host(
        run=smi(gpu_rows()),
        sglang_site=sglang_site(tmp_path),
        rlimit=unlimited,
        fs_root=root,
        dev_root=root / "dev",
        environ={"PATH": "/usr/bin"},
        coldstart_probe="never",
    )
    p = load_profile(str(gpu_profile()))
    said: list[str] = []
    with pytest.raises(KimiServeError) as err:
        preflight(p, validated_launch(p), said.append, host)
    assert err.value.exit_code == ExitCode.ENVIRONMENT and str(err.value.message).startswith("preflight: nvidia_uvm: ")
    assert any(line.startswith("preflight fail: nvcc: no nvcc under up's environment") for line in said), said
    assert not any(": devices:" in line or ": p2p:" in line for line in said)  # those pass on this host


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
