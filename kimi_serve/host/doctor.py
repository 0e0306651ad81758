"""`kimi-serve doctor`: can this host serve the profile? Each check is pass / warn / fail / skip with its fix.

Every host probe goes through a :class:`Host` (a runner for nvidia-smi, disk, limits, port, SGLang lookup), so tests
inject one; the real host is :meth:`Host.real`. No GPU is a finding, never a crash.
"""

from __future__ import annotations

import errno
import resource
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimi_serve.core import proc
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.findings import FAIL, PASS, SKIP, WARN, Finding, failed
from kimi_serve.core.pin import SGLANG_VERSION
from kimi_serve.core.proc import Completed
from kimi_serve.host.facts import model_findings, patch_state_finding
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.loader import Profile, display_path
from kimi_serve.sglang.platform import EXPECTED_CC

GIB = 1024**3
MIN_DRIVER = 570  # first driver branch for Blackwell
MIN_CUDA = (12, 8)
MIN_NOFILE = 65536
GPU_QUERY = [
    "nvidia-smi",
    "--query-gpu=index,name,compute_cap,memory.total,memory.free,driver_version",
    "--format=csv,noheader,nounits",
]


def _run(argv: list[str]) -> Completed | None:
    """Run a probe; None when the program does not exist."""
    try:
        return proc.run(argv, timeout=30)
    except proc.NotInstalled:
        return None


def port_problem(host: str, port: int) -> str | None:
    """None if ``host:port`` can be bound the way uvicorn binds it (SO_REUSEADDR); else why not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"port {port} on {host} is already in use"
            return f"cannot bind {host}:{port}: {exc.strerror}"
    return None


def _sglang_site(python: str) -> Path:
    from kimi_serve.sglang.site import site_packages_of

    return site_packages_of(python)


@dataclass
class Host:
    """Everything doctor asks the machine; replace any part in tests."""

    run: Callable[[list[str]], Completed | None] = _run
    disk_free: Callable[[Path], int] = lambda p: shutil.disk_usage(p).free
    rlimit: Callable[[int], tuple[int, int]] = resource.getrlimit
    port_problem: Callable[[str, int], str | None] = port_problem
    sglang_site: Callable[[str], Path] = _sglang_site
    state_dir: Path | None = None
    accounts_root: Path = Path("/")  # whose etc/passwd holds service.user
    dev_root: Path = Path("/dev")
    coldstart_probe: str = "always"  # the bandwidth probe: always | if-unknown (up reuses doctor's) | never

    @classmethod
    def real(cls) -> Host:
        return cls()


@dataclass
class DoctorReport:
    profile: str
    checks: list[Finding] = field(default_factory=list)
    figures: dict[str, Any] | None = None  # the cold start's numbers (floor.figures_json); None: not measured
    disk: dict[str, Any] | None = None  # the disk check's numbers: path, free_bytes; None: not checked

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.ENVIRONMENT if failed(self.checks) else ExitCode.OK

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "kind": "kimi-serve-doctor",
            "profile": self.profile,
            "ok": self.exit_code == ExitCode.OK,
            "exit_code": int(self.exit_code),
            "checks": [c.to_json() for c in self.checks],
            "figures": self.figures,
            "disk": self.disk,
        }


def _f(name: str, status: str, message: str, fix: str = "") -> Finding:
    return Finding("doctor", name, status, message, fix)


# ------------------------------------------------------------------------------------------------------ GPUs


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    compute_cap: str
    total_mib: int
    free_mib: int
    driver: str


def _gpus(host: Host) -> tuple[list[Gpu], Finding | None]:
    res = host.run(GPU_QUERY)
    no_gpu_fix = "install the NVIDIA driver (570+) on the serving host; without GPUs only engine: simulator runs here"
    if res is None:
        return [], _f("gpus", FAIL, "no NVIDIA GPU: nvidia-smi is not installed", no_gpu_fix)
    if res.rc != 0:
        why = (res.err.strip() or res.out.strip() or f"exit {res.rc}").splitlines()[0]
        return [], _f("gpus", FAIL, f"no usable NVIDIA GPU: nvidia-smi failed: {why}", no_gpu_fix)
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
        return [], _f("gpus", FAIL, "no NVIDIA GPU listed by nvidia-smi", no_gpu_fix)
    return gpus, None


def check_gpus(p: Profile, gpus: list[Gpu]) -> list[Finding]:
    names = sorted({g.name for g in gpus})
    caps = sorted({g.compute_cap for g in gpus})
    out = []
    if len(gpus) < p.gpus:
        out.append(
            _f(
                "gpus",
                FAIL,
                f"{len(gpus)} GPU(s) visible, the profile needs {p.gpus}",
                "check CUDA_VISIBLE_DEVICES and nvidia-smi; or lower gpus/parallel.tp_size",
            )
        )
    else:
        out.append(_f("gpus", PASS, f"{len(gpus)} GPU(s): {', '.join(names)} (profile uses {p.gpus})"))
    if caps != [EXPECTED_CC]:
        out.append(
            _f(
                "compute_capability",
                FAIL,
                f"compute capability {', '.join(caps)}, expected {EXPECTED_CC} (RTX PRO 6000 Blackwell, SM120)",
                "use a profile and patch set made for these GPUs",
            )
        )
    else:
        out.append(_f("compute_capability", PASS, f"compute capability {EXPECTED_CC} (SM120) on every GPU"))
    return out


def check_driver(host: Host, gpus: list[Gpu]) -> Finding:
    driver = gpus[0].driver
    res = host.run(["nvidia-smi"])
    cuda = None
    if res is not None and "CUDA Version:" in res.out:
        cuda = res.out.split("CUDA Version:", 1)[1].split()[0]
    try:
        major = int(driver.split(".")[0])
        cuda_t = tuple(int(x) for x in cuda.split(".")[:2]) if cuda else None
    except ValueError:
        return _f("driver", WARN, f"cannot parse driver {driver!r} / CUDA {cuda!r}", "check nvidia-smi")
    text = f"driver {driver}, CUDA {cuda or 'unknown'}"
    if major < MIN_DRIVER or (cuda_t is not None and cuda_t < MIN_CUDA):
        return _f(
            "driver",
            FAIL,
            f"{text}: Blackwell needs driver {MIN_DRIVER}+ and CUDA {MIN_CUDA[0]}.{MIN_CUDA[1]}+",
            f"install NVIDIA driver {MIN_DRIVER} or newer",
        )
    return _f("driver", PASS, text)


def check_topology(host: Host) -> Finding:
    res = host.run(["nvidia-smi", "topo", "-m"])
    if res is None or res.rc != 0:
        return _f("topology", WARN, "nvidia-smi topo -m failed", "run it by hand to see the GPU interconnect")
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
        return _f("topology", WARN, "no GPU-to-GPU links in nvidia-smi topo -m", "run it by hand")
    summary = ", ".join(f"{k} x{v // 2 or v}" for k, v in sorted(links.items()))
    if "NVLink" in links:
        return _f(
            "topology",
            WARN,
            f"NVLink present ({summary}); this deployment is tuned for PCIe-only (PCIe-IPC all-reduce)",
            "consider allreduce.pcie_ipc: false on NVLink hosts",
        )
    return _f("topology", PASS, f"PCIe only, no NVLink ({summary} GPU pairs): PCIe-IPC all-reduce fits")


def check_gpu_memory(p: Profile, gpus: list[Gpu]) -> Finding:
    fraction = p.memory.mem_fraction_static or 0.85
    short = [g for g in gpus[: p.gpus] if g.free_mib < fraction * g.total_mib]
    if short:
        g = short[0]
        return _f(
            "gpu_memory",
            FAIL,
            f"GPU {g.index} has {g.free_mib / 1024:.1f} of {g.total_mib / 1024:.1f} GiB "
            f"free, less than mem_fraction_static {fraction:g} needs (SGLang would fail with CUDA OOM)",
            "stop the other GPU processes (nvidia-smi lists them)",
        )
    busy = [g for g in gpus[: p.gpus] if g.total_mib - g.free_mib > 2048]
    least = min(g.free_mib for g in gpus[: p.gpus]) / 1024
    if busy:
        return _f(
            "gpu_memory",
            WARN,
            f"{len(busy)} GPU(s) already have >2 GiB in use (least free: {least:.1f} GiB)",
            "check nvidia-smi for leftover processes",
        )
    return _f("gpu_memory", PASS, f"GPU memory free on all {min(len(gpus), p.gpus)} GPUs (least: {least:.1f} GiB)")


# ------------------------------------------------------------------------------------------------------ files


def check_disk(host: Host, path: str) -> tuple[Finding, dict[str, Any]]:
    """The free-space line and its numbers (``doctor --json`` ``disk``: the directory measured and its free bytes)."""
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free_bytes = host.disk_free(probe)
    numbers = {"path": str(probe), "free_bytes": free_bytes}
    free = free_bytes / GIB
    if free < 20:
        return _f(
            "disk",
            WARN,
            f"{free:.1f} GiB free at {probe} (model path {path})",
            "free space: logs, caches and a re-download need room",
        ), numbers
    return _f("disk", PASS, f"{free:.0f} GiB free at {probe}"), numbers


# ------------------------------------------------------------------------------------------------------ software


def check_sglang(p: Profile, launch: Launch, host: Host) -> list[Finding]:
    from kimi_serve.profile.flags import load_flag_table
    from kimi_serve.sglang.site import BUILD_HINT, installed_version

    python = launch.argv[0]
    try:
        site = host.sglang_site(python)
        version = installed_version(site)
    except KimiServeError as exc:
        fix = (
            BUILD_HINT
            if p.engine == "simulator"
            else f"install sglang=={SGLANG_VERSION} there (pip install 'kimi-serve[serve]'), or point the profile's "
            "python: at the venv that has it"
        )
        return [_f("sglang", FAIL, exc.message, fix)]
    want = load_flag_table().sglang_version
    if version != want:
        return [
            _f(
                "sglang",
                FAIL,
                f"sglang {version} in {site}, the profile is made for {want}",
                f"pip install sglang=={want} with {python}",
            )
        ]
    out = [_f("sglang", PASS, f"sglang {version} ({python})")]
    if p.engine == "sglang" and p.patch_set:
        out.append(
            patch_state_finding(p, site, python=python, state_dir=host.state_dir, layer="doctor", code="patch_set")
        )
    return out


def check_port(launch: Launch, host: Host) -> Finding:
    problem = host.port_problem(launch.host, launch.port)
    if problem:
        return _f(
            "port",
            FAIL,
            f"{problem}: SGLang would notice only after loading every weight (~2 min later)",
            f"stop what listens there (ss -ltnp 'sport = :{launch.port}') or change server.port",
        )
    return _f("port", PASS, f"{launch.host}:{launch.port} is free")


def check_limits(host: Host) -> list[Finding]:
    inf = resource.RLIM_INFINITY
    soft, _hard = host.rlimit(resource.RLIMIT_MEMLOCK)
    out = [
        _f("memlock", PASS, "locked-memory limit unlimited")
        if soft == inf
        else _f(
            "memlock",
            WARN,
            f"locked-memory limit {soft // 1024} KiB (NCCL and CUDA pin host memory)",
            "ulimit -l unlimited (the systemd unit sets LimitMEMLOCK=infinity)",
        )
    ]
    soft, hard = host.rlimit(resource.RLIMIT_NOFILE)
    best = hard if hard != inf else MIN_NOFILE
    if best < MIN_NOFILE:
        out.append(
            _f(
                "nofile",
                WARN,
                f"open-file limit {soft}/{hard} (SGLang wants {MIN_NOFILE}+)",
                "ulimit -n 1048576 (the systemd unit sets LimitNOFILE)",
            )
        )
    else:
        out.append(_f("nofile", PASS, f"open-file limit {soft} (hard {'unlimited' if hard == inf else hard})"))
    return out


# ------------------------------------------------------------------------------------------------------ all


def uses_gpus(p: Profile) -> bool:
    args = list(p.extra_args)
    device = args[args.index("--device") + 1] if "--device" in args[:-1] else "cuda"
    return p.engine == "sglang" and device != "cpu"


def _coldstart(p: Profile, host: Host, report: DoctorReport) -> list[Finding]:
    from kimi_serve.core.settings import state_root
    from kimi_serve.host.floor import coldstart_report

    found, report.figures = coldstart_report(p, state_root(host.state_dir), probe=host.coldstart_probe)
    return found


def run_doctor(p: Profile, launch: Launch, host: Host | None = None, *, service: bool = True) -> DoctorReport:
    """``service``: also check service.user (the unit's user); `up` runs as the invoking user and says False."""
    host = host or Host.real()
    report = DoctorReport(display_path(p.source))
    checks = report.checks
    if uses_gpus(p):
        gpus, problem = _gpus(host)
        if problem:
            checks.append(problem)
            checks += [_f(n, SKIP, "no GPU to inspect") for n in ("driver", "topology", "gpu_memory")]
        else:
            checks += check_gpus(p, gpus)
            checks += [check_driver(host, gpus), check_topology(host), check_gpu_memory(p, gpus)]
    else:
        why = "engine: simulator" if p.engine == "simulator" else "--device cpu"
        checks.append(_f("gpus", SKIP, f"{why}: no GPU needed"))
    if p.engine == "sglang":
        disk, report.disk = check_disk(host, p.model.path)
        checks.append(disk)
        checks += model_findings(p, layer="doctor")
        checks += _coldstart(p, host, report)
    checks.append(check_key_file(p))  # before SGLang's: the first failure is the one up's preflight names
    checks += check_sglang(p, launch, host)
    checks.append(check_port(launch, host))
    checks += check_limits(host)
    if not service:
        return report
    from kimi_serve.host.service_user import service_user_findings

    checks += service_user_findings(p, accounts_root=host.accounts_root, dev_root=host.dev_root, gpus=uses_gpus(p))
    return report


def check_key_file(p: Profile) -> Finding:
    """The API-key file SGLang reads with --config: present, private, *.yaml (core/keyfile.py's rule), before a cold
    start rather than after it."""
    from kimi_serve.core.keyfile import key_file_problem

    path = p.server.api_key_file
    if path is None:
        return _f("api_key_file", PASS, "no API-key file configured")
    problem = key_file_problem(path)
    if problem:
        return Finding("doctor", "api_key_file", FAIL, problem[0], problem[1], p.where("server.api_key_file"))
    return _f("api_key_file", PASS, f"API-key file {path} is private")


def render(report: DoctorReport) -> str:
    lines = [f"doctor: profile {report.profile}"]
    for c in report.checks:
        lines.append(f"{c.status.upper():4}  {c.code:<18} {c.message}")
        if c.fix and c.status in (WARN, FAIL):
            lines.append(f"      {'':<18} fix: {c.fix}")
    bad = failed(report.checks)
    warns = sum(c.status == WARN for c in report.checks)
    lines.append(f"doctor: {len(bad)} failed, {warns} warning(s)" if bad or warns else "doctor: all checks passed")
    return "\n".join(lines)
