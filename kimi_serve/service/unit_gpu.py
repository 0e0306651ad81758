"""`doctor`'s judgement of the unit on a GPU host, with the unit's own environment and sandbox (the host-side checks
are :mod:`kimi_serve.host.gpu_host`'s, run as `up` would start):

- ``unit.nvcc`` / ``unit.cxx``: the compilers SGLang's and FlashInfer's JIT find under the unit's CUDA_HOME and PATH
  (systemd's PATH when the unit sets none), on the system it runs on;
- ``unit.cuda``: a CUDA init and a GPU-to-GPU copy as the unit's user inside its sandbox, a transient unit started by
  ``systemd-run`` with the unit's hardening lines (:mod:`kimi_serve.host.sandbox_probe`). It needs root and a GPU
  doctor found; elsewhere it is a skip that says why.
"""

from __future__ import annotations

from pathlib import Path

from kimi_serve.core.findings import PASS, SKIP, Finding
from kimi_serve.host.doctor import Host
from kimi_serve.host.gpu_host import check_toolchain
from kimi_serve.host.gpus import doctor_finding
from kimi_serve.host.sandbox_probe import probe_argv, probe_finding
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.loader import Profile
from kimi_serve.service.hardening import CACHE_NAME
from kimi_serve.service.unit import UnitContext, unit_environment, unit_sandbox
from kimi_serve.sglang.toolchain import SYSTEMD_PATH


def probe_command(profile: Profile, launch: Launch, ctx: UnitContext, root: Path = Path("/")) -> list[str]:
    """The ``systemd-run`` command line of ``unit.cuda``: the unit's interpreter, user, sandbox, cache directory,
    limits and environment."""
    extra = [
        ("CacheDirectory", CACHE_NAME),
        ("LimitMEMLOCK", "infinity"),
        ("LimitNOFILE", str(profile.service.limit_nofile)),
        ("WorkingDirectory", profile.service.working_directory),
    ]
    return probe_argv(
        launch.argv[0],
        profile.service.user,
        unit_sandbox(profile, launch, ctx),
        unit_environment(profile, launch, ctx, root),
        extra,
    )


def unit_gpu_findings(
    profile: Profile, launch: Launch, ctx: UnitContext, host: Host, *, gpus_found: bool, as_root: bool
) -> list[Finding]:
    """The unit's compilers, then its sandboxed CUDA probe (``gpus_found``: doctor's gpus check passed; ``as_root``:
    doctor runs as root, which systemd-run needs to start a unit as another user)."""
    env = {"PATH": SYSTEMD_PATH, **unit_environment(profile, launch, ctx, host.fs_root)}
    found = [  # the compilers under the rendered unit's environment
        doctor_finding(f"unit.{f.code}", f.status, f.message, f.fix)
        for f in check_toolchain(env, host.fs_root, "the unit")
    ]
    if not gpus_found:
        return [*found, doctor_finding("unit.cuda", SKIP, "no usable GPU: CUDA inside the unit's sandbox not tried")]
    if not as_root:
        why = "doctor is not running as root: CUDA inside the unit's sandbox not tried (systemd-run starts a unit)"
        return [*found, doctor_finding("unit.cuda", SKIP, why, "sudo kimi-serve doctor")]
    return [*found, probe_finding(host.run_probe(probe_command(profile, launch, ctx, host.fs_root)), profile.gpus)]


def doctor_unit_gpu(
    profile: Profile, launch: Launch, host: Host, checks: list[Finding], *, as_root: bool
) -> list[Finding]:
    """What `doctor` adds for a GPU profile's unit, after its own ``checks`` (their ``gpus`` line says whether a GPU
    was found); none for a profile that needs no GPU, or when the unit's kimi-serve cannot be found (``unit.reach``
    says so)."""
    from kimi_serve.core.errors import KimiServeError
    from kimi_serve.host.doctor import uses_gpus

    if not uses_gpus(profile):
        return []
    try:
        ctx = UnitContext.detect().for_engine(launch.argv[0])
    except KimiServeError:
        return []
    gpus_found = any(c.code == "gpus" and c.status == PASS for c in checks)
    return unit_gpu_findings(profile, launch, ctx, host, gpus_found=gpus_found, as_root=as_root)
