"""`doctor`'s checks of what a GPU start needs beyond the GPUs, read through ``root`` (a stand-in host in tests) and the
probe runner: the device groups the driver registers (``/proc/devices``) against the unit's ``DeviceAllow=``;
``/dev/nvidia-uvm`` (inside the sandbox CUDA's setuid ``nvidia-modprobe`` cannot make it: the unit's
``ExecStartPre=+`` step, :data:`UVM_STEP`, does); the IOMMU, ACS redirection on the PCIe bridges and the P2P matrix
(with either on, P2P traffic detours through the root complex and ``NCCL_P2P_LEVEL=SYS`` hangs or crawls); the JIT's
compilers (:mod:`kimi_serve.sglang.toolchain`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path

from kimi_serve.core.findings import FAIL, PASS, SKIP, WARN, Finding
from kimi_serve.core.proc import Completed
from kimi_serve.host.gpus import doctor_finding
from kimi_serve.sglang.toolchain import find_cxx, find_nvcc

Run = Callable[[list[str]], Completed | None]

FRONTEND_GROUPS = ("nvidia-frontend", "nvidia")  # the GPU and control nodes: the name differs between drivers
# The groups the hardened unit's DeviceAllow= lists (service/hardening.py renders them): both frontend spellings, the
# unified-memory driver, the capability nodes (MIG, fabric).
UNIT_DEVICE_GROUPS = (*FRONTEND_GROUPS, "nvidia-uvm", "nvidia-caps")
MODPROBE = "/usr/bin/nvidia-modprobe"
# Runs as root outside the sandbox ("+"), its failure ignored ("-"): loads nvidia-uvm and makes /dev/nvidia-uvm and
# /dev/nvidia-uvm-tools, which CUDA's setuid nvidia-modprobe cannot do under NoNewPrivileges= without capabilities.
UVM_STEP = (MODPROBE, "-u", "-c=0")
_ACS_ON = re.compile(r"ACSCtl:.*\b(SrcValid|ReqRedir|CmpltRedir|UpstreamFwd)\+")
_IOMMU_ARGS = re.compile(r"\b(intel_iommu|amd_iommu|iommu)=(\S+)")


def _read(root: Path, path: str) -> str | None:
    try:
        return (root / path.lstrip("/")).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def registered_groups(proc_devices: str) -> list[str]:
    """The NVIDIA character-device groups in ``/proc/devices`` text (its ``Character devices:`` section)."""
    names, section = [], ""
    for line in proc_devices.splitlines():
        if line.endswith(":"):
            section = line
            continue
        words = line.split()
        if section.startswith("Character") and len(words) == 2 and words[1].startswith("nvidia"):
            names.append(words[1])
    return list(dict.fromkeys(names))


def check_devices(root: Path, hardening: str) -> Finding:
    text = _read(root, "/proc/devices")
    if text is None:
        return doctor_finding("devices", SKIP, "cannot read /proc/devices")
    groups = registered_groups(text)
    shown = ", ".join(groups)
    if not any(g in FRONTEND_GROUPS for g in groups):
        message = f"/proc/devices lists no NVIDIA GPU device group ({shown or 'no nvidia* group'})"
        fix = "load the driver: modprobe nvidia (and check dmesg for why it did not load)"
        return doctor_finding("devices", FAIL, message, fix)
    unknown = [g for g in groups if g not in UNIT_DEVICE_GROUPS]
    if unknown and hardening == "strict":
        message = (
            f"the driver registers {', '.join(unknown)}, which the unit's DeviceAllow= does not list "
            f"(it lists {', '.join(UNIT_DEVICE_GROUPS)}): the unit cannot open those nodes"
        )
        fix = "if the server needs them (NVSwitch, NVLink fabric), set service.hardening: relaxed (no DevicePolicy=)"
        return doctor_finding("devices", WARN, message, fix)
    covered = "; the unit's DeviceAllow= covers them" if hardening == "strict" else ""
    return doctor_finding("devices", PASS, f"the driver registers {shown}{covered}")


def check_uvm(root: Path, dev_root: Path) -> Finding:
    node = dev_root / "nvidia-uvm"
    if node.exists():
        return doctor_finding("nvidia_uvm", PASS, f"{node} exists")
    at_boot = "echo nvidia-uvm > /etc/modules-load.d/nvidia-uvm.conf"
    if (root / MODPROBE.lstrip("/")).is_file():
        message = (
            f"{node} does not exist yet; the unit makes it before the start (ExecStartPre=-+{' '.join(UVM_STEP)}), "
            "outside the unit CUDA's own nvidia-modprobe does"
        )
        return doctor_finding("nvidia_uvm", WARN, message, f"to have it at boot: {at_boot}")
    message = (
        f"{node} does not exist and {MODPROBE} is not installed: CUDA cannot initialise (inside the unit's sandbox "
        "nothing can make the node)"
    )
    fix = f"install nvidia-modprobe (the driver's utilities), or load the module at boot: {at_boot}"
    return doctor_finding("nvidia_uvm", FAIL, message, f"{fix} && modprobe nvidia-uvm")


def _p2p_forced(env: Mapping[str, str]) -> bool:
    return env.get("NCCL_P2P_LEVEL", "").upper() in ("SYS", "5")


def check_iommu(root: Path, env: Mapping[str, str]) -> Finding:
    try:
        groups = sum(1 for _ in (root / "sys/kernel/iommu_groups").iterdir())
    except OSError:
        groups = 0
    args = {m.group(1): m.group(2) for m in _IOMMU_ARGS.finditer(_read(root, "/proc/cmdline") or "")}
    passthrough = args.get("iommu") == "pt"
    shown = " ".join(f"{k}={v}" for k, v in args.items()) or "no iommu= argument"
    if not groups or passthrough or args.get("iommu") == "off":
        why = "IOMMU off" if not groups else "IOMMU in passthrough (iommu=pt)"
        return doctor_finding("iommu", PASS, f"{why} ({shown}): GPU peer traffic is not remapped")
    forced = _p2p_forced(env)
    effect = ": with NCCL_P2P_LEVEL=SYS GPU peer traffic hangs or crawls" if forced else ": P2P may be slow"
    message = f"IOMMU translating DMA ({groups} IOMMU groups, {shown}){effect}"
    fix = "boot with iommu=pt (add it to GRUB_CMDLINE_LINUX, update-grub, reboot), or turn the IOMMU off in the BIOS"
    return doctor_finding("iommu", FAIL if forced else WARN, message, fix)


def check_acs(run: Run, env: Mapping[str, str]) -> Finding:
    res = run(["lspci", "-vvv"])
    if res is None or res.rc != 0:
        return doctor_finding("acs", SKIP, "lspci -vvv is not available: PCIe ACS not checked", "")
    on = [line.strip() for line in res.out.splitlines() if _ACS_ON.search(line)]
    if not on and "<access denied>" in res.out and "ACSCtl" not in res.out:
        return doctor_finding("acs", SKIP, "lspci -vvv shows PCIe capabilities only to root: ACS not checked", "")
    if not on:
        seen = "ACS redirection off" if "ACSCtl" in res.out else "no PCIe bridge reports ACS"
        return doctor_finding("acs", PASS, f"{seen} on the PCIe bridges")
    # a warning, never a failure: lspci lists every bridge, and one that carries no GPU's traffic (a NIC's, a disk's)
    # changes nothing; the GPUs' own paths are judged by the p2p check (nvidia-smi topo -p2p r)
    message = (
        f"ACS redirection on at {len(on)} PCIe bridge port(s): GPU peer traffic through them detours through the root "
        "complex" + ("; with NCCL_P2P_LEVEL=SYS that hangs or crawls" if _p2p_forced(env) else "")
    )
    fix = "disable ACS in the BIOS (or at boot: setpci -s BDF ECAP_ACS+0x6.w=0000 on each bridge), or drop "
    return doctor_finding("acs", WARN, message, fix + "NCCL_P2P_LEVEL from the profile's env")


def p2p_matrix(text: str) -> dict[tuple[int, int], str]:
    """``(i, j) -> status`` (OK, CNS, GNS, TNS, NS, U) from ``nvidia-smi topo -p2p r``."""
    out: dict[tuple[int, int], str] = {}
    heads: list[int] = []
    for line in text.splitlines():
        cells = line.split()
        if cells and all(re.fullmatch(r"GPU\d+", c) for c in cells):
            heads = [int(c[3:]) for c in cells]
        elif heads and cells and re.fullmatch(r"GPU\d+", cells[0]):
            row = int(cells[0][3:])
            for col, status in zip(heads, cells[1:], strict=False):
                if row != col and status != "X":
                    out[(row, col)] = status
    return out


def check_p2p(run: Run, gpus: int, env: Mapping[str, str]) -> Finding:
    if gpus < 2:
        return doctor_finding("p2p", SKIP, "the profile uses one GPU: no peer traffic")
    res = run(["nvidia-smi", "topo", "-p2p", "r"])
    matrix = p2p_matrix(res.out) if res is not None and res.rc == 0 else {}
    if not matrix:
        return doctor_finding("p2p", WARN, "nvidia-smi topo -p2p r gave no P2P matrix", "run it by hand")
    bad = {k: v for k, v in matrix.items() if v != "OK" and k[0] < gpus and k[1] < gpus}
    if not bad:
        return doctor_finding("p2p", PASS, f"P2P reads OK between all {gpus} GPUs the profile uses")
    (i, j), why = sorted(bad.items())[0]
    message = f"{len(bad)} GPU pair(s) without P2P reads, e.g. GPU{i}->GPU{j}: {why} "
    fix = (
        "enable P2P (BIOS: ACS off, IOMMU off or iommu=pt); else set allreduce.pcie_ipc: false and drop NCCL_P2P_LEVEL"
    )
    status = FAIL if _p2p_forced(env) else WARN
    return doctor_finding("p2p", status, message + "(the PCIe-IPC all-reduce and NCCL_P2P_LEVEL=SYS need it)", fix)


def check_toolchain(env: Mapping[str, str], root: Path, under: str) -> list[Finding]:
    """``nvcc`` and ``cxx``: the compilers the JIT finds under ``env`` (``under``: whose environment, for the
    message: ``the unit`` or ``this shell``)."""
    nvcc, how = find_nvcc(env, root)
    cxx = find_cxx(env, root)
    no_nvcc = f"no nvcc under {under} ({how}): SGLang's and FlashInfer's SM120 kernels are compiled at start"
    nvcc_fix = (
        "kimi-serve engine install (the GPU lock installs nvcc; the unit and up point CUDA_HOME at it), "
        "or install the CUDA 13 toolkit in /usr/local/cuda"
    )
    no_cxx = f"no host C++ compiler under {under} (CXX, c++ or g++ on PATH): nvcc cannot build the JIT kernels"
    return [
        doctor_finding("nvcc", PASS, f"nvcc for the JIT kernels under {under}: {nvcc} (found through {how})")
        if nvcc
        else doctor_finding("nvcc", FAIL, no_nvcc, nvcc_fix),
        doctor_finding("cxx", PASS, f"host C++ compiler under {under}: {cxx}")
        if cxx
        else doctor_finding("cxx", FAIL, no_cxx, "install one: apt-get install g++ (dnf install gcc-c++)"),
    ]
