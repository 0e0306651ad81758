"""`doctor`'s GPU checks: the GPUs nvidia-smi lists (SM120 on every one, as many as the profile uses), the driver
and CUDA versions, the interconnect (PCIe only, no NVLink: what the allreduce choice assumes) and free memory. No GPU
is a finding, never a crash; ``run`` is the doctor host's probe runner (tests inject one)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kimi_serve.core.findings import FAIL, PASS, WARN, Finding
from kimi_serve.core.proc import Completed
from kimi_serve.profile.loader import Profile
from kimi_serve.sglang.platform import EXPECTED_CC
from kimi_serve.sglang.toolchain import Cuda, min_driver

Run = Callable[[list[str]], Completed | None]  # None: the program is not installed
GIB = 1024**3
BLACKWELL_CUDA = (12, 8)  # the first CUDA with SM120: the floor whatever the engine is built for
GPU_QUERY = [
    "nvidia-smi",
    "--query-gpu=index,name,compute_cap,memory.total,memory.free,driver_version",
    "--format=csv,noheader,nounits",
]


def doctor_finding(name: str, status: str, message: str, fix: str = "") -> Finding:
    """A doctor finding (doctor's own checks build theirs with it too)."""
    return Finding("doctor", name, status, message, fix)


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    compute_cap: str
    total_mib: int
    free_mib: int
    driver: str


def read_gpus(run: Run) -> tuple[list[Gpu], Finding | None]:
    res = run(GPU_QUERY)
    no_gpu_fix = "install the NVIDIA driver (580+) on the serving host; without GPUs only engine: simulator runs here"
    if res is None:
        return [], doctor_finding("gpus", FAIL, "no NVIDIA GPU: nvidia-smi is not installed", no_gpu_fix)
    if res.rc != 0:
        why = (res.err.strip() or res.out.strip() or f"exit {res.rc}").splitlines()[0]
        return [], doctor_finding("gpus", FAIL, f"no usable NVIDIA GPU: nvidia-smi failed: {why}", no_gpu_fix)
    gpus = []
    for row in res.out.strip().splitlines():
        cells = [c.strip() for c in row.split(",")]
        if len(cells) != 6:
            continue
        try:
            gpus.append(Gpu(int(cells[0]), cells[1], cells[2], int(float(cells[3])), int(float(cells[4])), cells[5]))
        except ValueError:
            continue
    if not gpus:
        return [], doctor_finding("gpus", FAIL, "no NVIDIA GPU listed by nvidia-smi", no_gpu_fix)
    return gpus, None


def check_gpus(p: Profile, gpus: list[Gpu]) -> list[Finding]:
    names = sorted({g.name for g in gpus})
    caps = sorted({g.compute_cap for g in gpus})
    fix = "check CUDA_VISIBLE_DEVICES and nvidia-smi; or lower gpus/parallel.tp_size"
    wrong_cc = f"compute capability {', '.join(caps)}, expected {EXPECTED_CC} (RTX PRO 6000 Blackwell, SM120)"
    return [
        doctor_finding("gpus", FAIL, f"{len(gpus)} GPU(s) visible, the profile needs {p.gpus}", fix)
        if len(gpus) < p.gpus
        else doctor_finding("gpus", PASS, f"{len(gpus)} GPU(s): {', '.join(names)} (profile uses {p.gpus})"),
        doctor_finding("compute_capability", FAIL, wrong_cc, "use a profile and patch set made for these GPUs")
        if caps != [EXPECTED_CC]
        else doctor_finding("compute_capability", PASS, f"compute capability {EXPECTED_CC} (SM120) on every GPU"),
    ]


def check_driver(run: Run, gpus: list[Gpu], engine_cuda: Cuda | None, source: str = "the GPU lock") -> Finding:
    """The driver branch and the CUDA it supports against what the engine is built for (``engine_cuda``, read from
    ``source``: the installed engine or the shipped GPU lock; the driver floor per CUDA is
    :data:`kimi_serve.sglang.toolchain.DRIVER_FLOOR`)."""
    driver = gpus[0].driver
    res = run(["nvidia-smi"])
    cuda = None
    if res is not None and "CUDA Version:" in res.out:
        cuda = res.out.split("CUDA Version:", 1)[1].split()[0]
    try:
        major = int(driver.split(".")[0])
        cuda_t = tuple(int(x) for x in cuda.split(".")[:2]) if cuda else None
    except ValueError:
        return doctor_finding("driver", WARN, f"cannot parse driver {driver!r} / CUDA {cuda!r}", "check nvidia-smi")
    need = max(engine_cuda or BLACKWELL_CUDA, BLACKWELL_CUDA)
    floor = min_driver(need)
    text = f"driver {driver}, CUDA {cuda or 'unknown'}"
    built = f"{source} is built for CUDA {need[0]}.{need[1]}" if engine_cuda else "Blackwell needs CUDA 12.8"
    if major < floor or (cuda_t is not None and cuda_t < need):
        message = f"{text}: {built}, which needs driver {floor}+ (the first CUDA call would fail)"
        return doctor_finding("driver", FAIL, message, f"install NVIDIA driver {floor} or newer (the R{floor} branch)")
    return doctor_finding("driver", PASS, f"{text} (CUDA {need[0]}.{need[1]} needs {floor}+)")


def check_topology(run: Run) -> Finding:
    res = run(["nvidia-smi", "topo", "-m"])
    if res is None or res.rc != 0:
        return doctor_finding(
            "topology", WARN, "nvidia-smi topo -m failed", "run it by hand to see the GPU interconnect"
        )
    links: dict[str, int] = {}
    for row in res.out.splitlines():
        cells = row.split()
        if not cells or not cells[0].startswith("GPU"):
            continue
        for cell in cells[1:]:
            if cell.startswith("NV") and cell[2:].isdigit() or cell in ("PIX", "PXB", "PHB", "NODE", "SYS"):
                kind = "NVLink" if cell.startswith("NV") else cell
                links[kind] = links.get(kind, 0) + 1
    if not links:
        return doctor_finding("topology", WARN, "no GPU-to-GPU links in nvidia-smi topo -m", "run it by hand")
    summary = ", ".join(f"{k} x{v // 2 or v}" for k, v in sorted(links.items()))
    if "NVLink" in links:
        message = f"NVLink present ({summary}); this deployment is tuned for PCIe-only (PCIe-IPC all-reduce)"
        return doctor_finding("topology", WARN, message, "consider allreduce.pcie_ipc: false on NVLink hosts")
    return doctor_finding("topology", PASS, f"PCIe only, no NVLink ({summary} GPU pairs): PCIe-IPC all-reduce fits")


def check_gpu_memory(p: Profile, gpus: list[Gpu]) -> Finding:
    fraction = p.memory.mem_fraction_static or 0.85
    short = [g for g in gpus[: p.gpus] if g.free_mib < fraction * g.total_mib]
    if short:
        g = short[0]
        message = (
            f"GPU {g.index} has {g.free_mib / 1024:.1f} of {g.total_mib / 1024:.1f} GiB free, less than "
            f"mem_fraction_static {fraction:g} needs (SGLang would fail with CUDA OOM)"
        )
        return doctor_finding("gpu_memory", FAIL, message, "stop the other GPU processes (nvidia-smi lists them)")
    busy = [g for g in gpus[: p.gpus] if g.total_mib - g.free_mib > 2048]
    least = min(g.free_mib for g in gpus[: p.gpus]) / 1024
    if busy:
        message = f"{len(busy)} GPU(s) already have >2 GiB in use (least free: {least:.1f} GiB)"
        return doctor_finding("gpu_memory", WARN, message, "check nvidia-smi for leftover processes")
    message = f"GPU memory free on all {min(len(gpus), p.gpus)} GPUs (least: {least:.1f} GiB)"
    return doctor_finding("gpu_memory", PASS, message)
