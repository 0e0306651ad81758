"""`kimi-serve doctor`: can this host serve the profile? Each check is pass / warn / fail / skip with its fix.

Every host probe goes through a :class:`Host` (a runner for nvidia-smi, disk, limits, port, SGLang lookup), so tests
inject one; the real host is :meth:`Host.real`. No GPU is a finding, never a crash.
"""

from __future__ import annotations

import errno
import resource
import shutil
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kimi_serve.core import proc
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.findings import FAIL, PASS, SKIP, WARN, Finding, failed
from kimi_serve.core.proc import Completed
from kimi_serve.core.report import finding_lines
from kimi_serve.core.settings import current, process_environ, state_root
from kimi_serve.host.facts import model_findings, patch_state_finding
from kimi_serve.host.gpus import (
    GIB,
    check_driver,
    check_gpu_memory,
    check_gpus,
    check_topology,
    doctor_finding,
    read_gpus,
)
from kimi_serve.host.sandbox_probe import PROBE_TIMEOUT_S
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.loader import Profile, display_path

MIN_NOFILE = 65536


def _run(argv: list[str], timeout: float = 30) -> Completed | None:
    """Run a probe; None when the program does not exist."""
    try:
        return proc.run(argv, timeout=timeout)
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
    state_dir: Path | None = None  # None: the state root of the settings ($KIMI_SERVE_STATE_DIR)
    # whose etc/passwd and etc/group hold service.user: the settings' ($KIMI_SERVE_ACCOUNTS_ROOT, default /), read
    # only through core/accounts.py (never NSS), so a test's scratch root is the only user database doctor sees
    accounts_root: Path = field(default_factory=lambda: current().accounts_root)
    dev_root: Path = Path("/dev")
    fs_root: Path = Path("/")  # where /proc, /sys, the compilers and nvidia-modprobe are read
    environ: Mapping[str, str] | None = None  # the invoking environment (None: this process's)
    # the sandboxed CUDA probe (systemd-run, host/sandbox_probe.py)
    run_probe: Callable[[list[str]], Completed | None] = lambda argv: _run(argv, PROBE_TIMEOUT_S + 30)
    coldstart_probe: str = "always"  # the bandwidth probe: always | if-unknown (up reuses doctor's) | never
    # the collective self-test on the GPUs (up/selftest.py); None: not run by this view of the host
    allreduce_selftest: Callable[[Profile, Launch], list[Finding]] | None = None

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


def check_disk(host: Host, path: str) -> tuple[Finding, dict[str, Any]]:
    """The free-space line and its numbers (``doctor --json`` ``disk``: the directory measured and its free bytes)."""
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free_bytes = host.disk_free(probe)
    numbers = {"path": str(probe), "free_bytes": free_bytes}
    free = free_bytes / GIB
    if free < 20:
        fix = "free space: logs, caches and a re-download need room"
        return doctor_finding("disk", WARN, f"{free:.1f} GiB free at {probe} (model path {path})", fix), numbers
    return doctor_finding("disk", PASS, f"{free:.0f} GiB free at {probe}"), numbers


def check_sglang(p: Profile, launch: Launch, host: Host) -> list[Finding]:
    from kimi_serve.profile.flags import load_flag_table
    from kimi_serve.sglang.site import BUILD_HINT, engine_install_hint, installed_version

    python = launch.argv[0]
    fix = BUILD_HINT if p.engine == "simulator" else engine_install_hint(p.ref or p.name, python, bool(p.overrides))
    try:
        site = host.sglang_site(python)
        version = installed_version(site)
    except KimiServeError as exc:
        return [doctor_finding("sglang", FAIL, exc.message, fix)]
    want = load_flag_table().sglang_version
    if version != want:
        return [doctor_finding("sglang", FAIL, f"sglang {version} in {site}, the profile is made for {want}", fix)]
    out = [doctor_finding("sglang", PASS, f"sglang {version} ({python})")]
    if p.engine == "sglang" and p.patch_set:
        out.append(
            patch_state_finding(p, site, python=python, state_dir=host.state_dir, layer="doctor", code="patch_set")
        )
    return out


def check_port(launch: Launch, host: Host) -> Finding:
    problem = host.port_problem(launch.host, launch.port)
    if problem:
        return doctor_finding(
            "port",
            FAIL,
            f"{problem}: SGLang would notice only after loading every weight (~2 min later)",
            f"stop what listens there (ss -ltnp 'sport = :{launch.port}') or change server.port",
        )
    return doctor_finding("port", PASS, f"{launch.host}:{launch.port} is free")


def check_limits(host: Host, p: Profile) -> list[Finding]:
    """memlock (NCCL and CUDA pin host memory) and nofile (SGLang's many sockets and shared files on a GPU host): a
    profile that runs no GPU (the simulator, --device cpu) needs neither, and is told so rather than warned."""
    if not uses_gpus(p):
        return [
            doctor_finding("memlock", SKIP, f"{_no_gpu(p)}: no GPU memory is pinned"),
            doctor_finding("nofile", SKIP, f"{_no_gpu(p)}: no GPU server's worth of open files"),
        ]
    inf = resource.RLIM_INFINITY
    soft, _hard = host.rlimit(resource.RLIMIT_MEMLOCK)
    memlock = f"locked-memory limit {soft // 1024} KiB (NCCL and CUDA pin host memory)"
    fix = "ulimit -l unlimited (the systemd unit sets LimitMEMLOCK=infinity)"
    out = [
        doctor_finding("memlock", PASS, "locked-memory limit unlimited")
        if soft == inf
        else doctor_finding("memlock", WARN, memlock, fix)
    ]
    soft, hard = host.rlimit(resource.RLIMIT_NOFILE)
    if (hard if hard != inf else MIN_NOFILE) < MIN_NOFILE:
        fix = "ulimit -n 1048576 (the systemd unit sets LimitNOFILE)"
        out.append(doctor_finding("nofile", WARN, f"open-file limit {soft}/{hard} (SGLang wants {MIN_NOFILE}+)", fix))
    else:
        hard_text = "unlimited" if hard == inf else hard
        out.append(doctor_finding("nofile", PASS, f"open-file limit {soft} (hard {hard_text})"))
    return out


def uses_gpus(p: Profile) -> bool:
    args = list(p.extra_args)
    device = args[args.index("--device") + 1] if "--device" in args[:-1] else "cuda"
    return p.engine == "sglang" and device != "cpu"


def _no_gpu(p: Profile) -> str:
    return "engine: simulator" if p.engine == "simulator" else "--device cpu"


def run_doctor(p: Profile, launch: Launch, host: Host | None = None, *, service: bool = True) -> DoctorReport:
    """``service``: also check service.user (the unit's user); `up` runs as the invoking user and says False."""
    host = host or Host.real()
    report = DoctorReport(display_path(p.source))
    checks = report.checks
    if uses_gpus(p):
        gpus, problem = read_gpus(host.run)
        if problem:
            checks.append(problem)
            checks += [doctor_finding(n, SKIP, "no GPU to inspect") for n in ("driver", "topology", "gpu_memory")]
        else:
            checks += check_gpus(p, gpus)
            cuda, source = engine_cuda(launch.argv[0], host)
            checks += [check_driver(host.run, gpus, cuda, source), check_topology(host.run), check_gpu_memory(p, gpus)]
            checks += gpu_host_findings(p, launch, host, service=service)
    else:
        checks.append(doctor_finding("gpus", SKIP, f"{_no_gpu(p)}: no GPU needed"))
    if p.engine == "sglang":
        disk, report.disk = check_disk(host, p.model.path)
        checks.append(disk)
        checks += model_findings(p, layer="doctor")
        from kimi_serve.host.floor import coldstart_report

        coldstart, report.figures = coldstart_report(p, state_root(host.state_dir), probe=host.coldstart_probe)
        checks += coldstart
    checks.append(check_key_file(p))  # before SGLang's: the first failure is the one up's preflight names
    checks += check_sglang(p, launch, host)
    checks.append(check_port(launch, host))
    checks += check_limits(host, p)
    checks += _selftest(p, launch, host, checks)
    if not service:
        return report
    from kimi_serve.host.service_user import service_user_findings

    checks += service_user_findings(p, accounts_root=host.accounts_root, dev_root=host.dev_root, gpus=uses_gpus(p))
    return report


def _selftest(p: Profile, launch: Launch, host: Host, checks: list[Finding]) -> list[Finding]:
    """The collective self-test (host/allreduce_selftest.py), once every other check of the GPUs and SGLang held."""
    from kimi_serve.host.allreduce_selftest import CODE, plan_for

    plan = plan_for(p, uses_gpus(p))
    if isinstance(plan, str):
        return [doctor_finding(CODE, SKIP, plan)]
    bad = failed(checks)
    if bad:
        return [doctor_finding(CODE, SKIP, f"not run: {bad[0].code} failed")]
    if host.allreduce_selftest is None:
        return [doctor_finding(CODE, SKIP, "not run by this caller")]
    return host.allreduce_selftest(p, launch)


def engine_cuda(python: str, host: Host) -> tuple[tuple[int, int] | None, str]:
    """The CUDA the engine is built for and where that was read: the engine ``python`` serves from (the packages the
    lock installed there), else the GPU lock kimi-serve ships."""
    from kimi_serve.sglang.toolchain import cuda_of, installed_pins, shipped_lock_cuda

    try:
        found = cuda_of(installed_pins(host.sglang_site(python)))
    except KimiServeError:
        found = None
    return (found, f"the engine at {python}") if found else (shipped_lock_cuda(), "the GPU lock")


def gpu_host_findings(p: Profile, launch: Launch, host: Host, *, service: bool) -> list[Finding]:
    """The device nodes, nvidia-uvm, IOMMU/ACS, the P2P matrix and the JIT's compilers as a start here (`up`, this
    shell's environment plus the launch's) finds them; the unit's own are judged by service/unit_gpu.py."""
    from kimi_serve.host import gpu_host
    from kimi_serve.sglang.toolchain import toolchain_env

    base = dict(host.environ if host.environ is not None else process_environ())
    env = {**base, **launch.env}
    env.update(toolchain_env(launch.argv[0], env, base.get("PATH", ""), host.fs_root))
    return [
        gpu_host.check_devices(host.fs_root, p.service.hardening if service else "off"),
        gpu_host.check_uvm(host.fs_root, host.dev_root),
        gpu_host.check_iommu(host.fs_root, env),
        gpu_host.check_acs(host.run, env),
        gpu_host.check_p2p(host.run, p.gpus, env),
        *gpu_host.check_toolchain(env, host.fs_root, "up's environment"),
    ]


def check_key_file(p: Profile) -> Finding:
    """The API-key file SGLang reads with --config: present, private, *.yaml, with a distinct admin-api-key where the
    profile needs one (core/keyfile.py's rules, as check's host layer applies them), before a cold start rather than
    after it; the fix is the one recipe, `kimi-serve keyfile` (:func:`keyfile_recipe`)."""
    from kimi_serve.core.keyfile import admin_key_problem, key_file_problem, keyfile_recipe
    from kimi_serve.profile.topology import admin_key_required

    path = p.server.api_key_file
    if path is None:
        return doctor_finding("api_key_file", PASS, "no API-key file configured")
    recipe = keyfile_recipe(p.cli_args())
    problem = key_file_problem(path, recipe) or (admin_key_problem(path, recipe) if admin_key_required(p) else None)
    if problem:
        return Finding("doctor", "api_key_file", FAIL, problem[0], problem[1], p.where("server.api_key_file"))
    admin = " and holds a distinct admin key" if admin_key_required(p) else ""
    return doctor_finding("api_key_file", PASS, f"API-key file {path} is private{admin}")


def render(report: DoctorReport) -> str:
    lines = [f"doctor: profile {report.profile}"]
    lines += finding_lines(report.checks, word="upper", label="code", width=18, sep="  ", fix_below=True)
    bad = failed(report.checks)
    warns = sum(c.status == WARN for c in report.checks)
    said = f"doctor: {len(bad)} failed, {warns} warning{'' if warns == 1 else 's'}"
    lines.append(said if bad or warns else "doctor: all checks passed")
    return "\n".join(lines)
