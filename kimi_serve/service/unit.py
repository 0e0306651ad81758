"""Render the systemd unit for a profile: the validated launch argv, escaped for systemd
(:mod:`kimi_serve.service.systemd_text`), under kimi-serve's marker (:mod:`kimi_serve.service.marker`); the context
of the installing host it names (:class:`UnitContext`), and whether the unit's user can reach what it runs
(:func:`unit_reach`)."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kimi_serve import __version__
from kimi_serve.check.owned_paths import UNIT_NAME_FIX, unit_name_problem
from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.findings import WARN, Finding
from kimi_serve.core.resources import package_root, resource_dir
from kimi_serve.core.settings import with_pythonpath
from kimi_serve.host.doctor import uses_gpus
from kimi_serve.host.gpu_host import UVM_STEP
from kimi_serve.host.unit_reach import ENTER, LOAD, RUN, Need, Sandbox, reach_findings
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.loader import Profile
from kimi_serve.profile.member import Role
from kimi_serve.profile.schema import default_of
from kimi_serve.service.hardening import CACHE_NAME, cache_environment, protect_home, sandbox
from kimi_serve.service.marker import MARKER_PREFIX, OVERRIDES_PREFIX, body_hash, marker_value
from kimi_serve.service.systemd_text import (
    carryable,
    environment_line,
    exec_line,
    quote,
    resource_limit,
    specifiers,
    user_name,
)
from kimi_serve.service.timeouts import (
    RESTART_SEC,
    START_LIMIT_BURST,
    selftest_plan,
    start_limit_interval_sec,
    start_timeout_sec,
)
from kimi_serve.sglang.toolchain import toolchain_env

TEMPLATE = "sglang-kimi.service.j2"


@dataclass(frozen=True)
class UnitContext:
    """Facts of the installing host that the unit names: where kimi-serve lives, and its version."""

    kimi_serve: str  # absolute path of the kimi-serve executable, for ExecStartPost
    package_root: str  # parent of the kimi_serve package, on the simulator's PYTHONPATH
    version: str = __version__
    engine_prefix: str = ""  # set when kimi-serve is the engine's own copy (for_engine)

    @classmethod
    def detect(cls) -> UnitContext:
        """The kimi-serve next to this interpreter (a venv's bin/), else the one on PATH; absolute either way."""
        beside = Path(sys.executable).parent / "kimi-serve"
        found = str(beside) if beside.is_file() else shutil.which("kimi-serve")
        if not found:
            raise KimiServeError(
                "cannot find the kimi-serve executable for the unit's ExecStartPost "
                "(systemd's PATH is not the shell's)",
                hint="install kimi-serve into the venv you run it from (pip install kimi-serve)",
                exit_code=ExitCode.ENVIRONMENT,
            )
        return cls(kimi_serve=str(Path(found).absolute()), package_root=str(package_root()))

    def for_engine(self, python: str) -> UnitContext:
        """The engine's own kimi-serve when the unit's interpreter ``python`` is an engine venv that carries one
        (``engine install`` puts it there, engine/own.py): the unit then runs from the engine prefix alone, whatever
        runs this command. Else this context."""
        from kimi_serve.engine.own import installed_in

        found = installed_in(python)
        if found is None:
            return self
        script, site = found
        prefix = str(script.parent.parent)
        return UnitContext(kimi_serve=str(script), package_root=str(site), version=self.version, engine_prefix=prefix)

    def engine_drift(self) -> Finding | None:
        """A warning when the unit runs the engine's kimi-serve and that copy is not the running one (kimi-serve was
        upgraded or changed since `engine install`): the unit's gate and the simulator would run the old code."""
        if not self.engine_prefix:
            return None
        from kimi_serve.engine.own import stale

        why = stale(Path(self.package_root))
        if why is None:
            return None
        return Finding(
            "service",
            "unit.kimi_serve",
            WARN,
            f"{why}: the unit's start gate and the simulator run the engine's copy",
            f"kimi-serve engine install --prefix {self.engine_prefix}, then kimi-serve restart",
        )


POST_COMMENT = (
    "The unit counts as started only once the API contract holds (structured tool_calls and reasoning_content)."
)
STOP_COMMENT = (
    "SIGTERM to the main process only: SGLang shuts its schedulers down itself (a SIGTERM to every process in the",
    "cgroup trips its crash path). Whatever is left after TimeoutStopSec gets SIGKILL.",
)
TIMEOUT_COMMENT = "Cold start (weights, CUDA graphs, warmup) + the contract check."
SELFTEST_TIMEOUT = "The collective self-test (ExecStartPre) + "


@dataclass(frozen=True)
class UnitShape:
    """How one member of a deployment differs from the single unit (:mod:`kimi_serve.service.member_units`): its role
    (recorded in the marker), what its start is gated on (ExecStartPost argvs), ordering lines, comments."""

    role: str  # marker field: replica:I | router | rank:R
    what: str  # appended to the description
    posts: tuple[tuple[str, ...], ...]  # ExecStartPost= argvs, run in order
    post_comment: str
    unit_lines: tuple[str, ...] = ()  # extra [Unit] lines (After=, Wants=), already escaped
    stop_comment: tuple[str, ...] = STOP_COMMENT
    timeout_comment: str = TIMEOUT_COMMENT
    timeout_start_sec: int | None = None  # None: the profile's (start_timeout_sec)


@dataclass(frozen=True)
class RenderedUnit:
    name: str  # e.g. sglang-kimi.service
    text: str
    sha256: str  # of the body below the marker line


def unit_file_name(unit_name: str, where: str = "service.unit_name") -> str:
    """``NAME.service`` for a unit name; exit 2 naming ``where`` for a name that is not one
    (:func:`kimi_serve.check.owned_paths.unit_name_problem`), before anything is read or touched."""
    name = unit_name.removesuffix(".service")
    why = unit_name_problem(name)
    if why:
        raise KimiServeError(f"invalid unit name {unit_name!r}: {why}", where=where, hint=UNIT_NAME_FIX)
    return f"{name}.service"


def unit_environment(profile: Profile, launch: Launch, ctx: UnitContext, root: Path = Path("/")) -> dict[str, str]:
    """The service environment: the launch's, plus the JIT caches in the unit's CacheDirectory, unbuffered Python
    output (journald reads a pipe), for an SGLang engine that carries nvcc its CUDA_HOME and PATH
    (:func:`kimi_serve.sglang.toolchain.toolchain_env`) and, for the simulator engine, kimi-serve's package on
    PYTHONPATH (the SGLang interpreter does not have it installed). ``root``: the system whose engine is read."""
    env = cache_environment(dict(launch.env))
    env.setdefault("PYTHONUNBUFFERED", "1")
    if profile.engine == "sglang":
        env.update(toolchain_env(launch.argv[0], env, root=root))
    if profile.engine == "simulator":  # the launch put this process's package root there: the unit's is ctx's
        env = with_pythonpath({**env, "PYTHONPATH": profile.env.get("PYTHONPATH", "")}, ctx.package_root)
    return env


def floor_args(profile: Profile) -> list[str]:
    """``--accept-floor`` for a check of ``profile``'s server where its ``speculative.accept_floor`` is not verify's
    default (the default is verify's own: units and manifests of a profile that keeps it stay as they were): the
    unit's ExecStartPost, the verify timer's check, restart's and install-service --now's, the Kubernetes CronJob."""
    floor = profile.speculative.accept_floor
    if not profile.speculative.enabled or floor == default_of("speculative.accept_floor"):
        return []
    return ["--accept-floor", "1" if floor is None else f"{floor:g}"]


def verify_argv(profile: Profile, launch: Launch, ctx: UnitContext) -> list[str]:
    """``kimi-serve verify`` as ExecStartPost runs it: wait out the cold start, then the contract suite."""
    v, wait = profile.verify, str(profile.startup.timeout)
    return verify_command(
        [ctx.kimi_serve], launch.endpoint, v.timeout, v.suite, launch.api_key_file, wait, floor_args(profile)
    )


def verify_command(
    kimi_serve: Sequence[str],
    host: str,
    timeout: float,
    suite: str,
    key: str | None,
    wait: str = "",
    extra: Sequence[str] = (),
) -> list[str]:
    """A ``kimi-serve verify`` command line (``kimi_serve``: what runs kimi-serve); ``wait``: seconds of a cold start
    to wait out; ``extra``: further options, before the key file."""
    head = [*kimi_serve, "verify", "--host", host, *(["--wait", wait] if wait else [])]
    return [*head, "--timeout", f"{timeout:g}", "--suite", suite, *extra, *(["--api-key-file", key] if key else [])]


def selftest_gate_argv(profile: Profile, launch: Launch, ctx: UnitContext) -> list[str] | None:
    """``kimi-serve selftest-gate`` as ExecStartPre runs it (docs/up.md "The collective self-test"): the profile's
    plan on its command line (the engine interpreter, TP size, paths, deadline); the unit's Environment= gives the
    ranks the server's own environment. None where the profile has no plan."""
    plan = selftest_plan(profile)
    if plan is None:
        return None
    argv = [ctx.kimi_serve, "selftest-gate", "--python", launch.argv[0], "--tp-size", str(plan.world_size)]
    for path in plan.paths:
        argv += ["--path", path]
    return argv + ["--deadline", f"{plan.deadline_s:g}"]


def render_unit(
    profile: Profile, launch: Launch, ctx: UnitContext, unit_name: str | None = None, shape: UnitShape | None = None
) -> RenderedUnit:
    """The unit text for a validated launch (see :func:`kimi_serve.check.launch.validated_launch`); ``unit_name``
    (NAME.service) overrides the profile's service.unit_name; ``shape`` makes it one member of a deployment."""
    name = unit_name or unit_file_name(profile.service.unit_name, profile.where("service.unit_name"))
    env = unit_environment(profile, launch, ctx)
    shape = shape or UnitShape("", "", (tuple(verify_argv(profile, launch, ctx)),), POST_COMMENT)  # the one unit
    gpus = uses_gpus(profile) and shape.role != Role.ROUTER.marker(0)  # the router of a replicated profile runs none
    gate = selftest_gate_argv(profile, launch, ctx) if gpus else None
    what = f", {shape.what}" if shape.what else ""
    values: Mapping[str, object] = {
        "description": specifiers(
            f"Kimi-K2.5 on SGLang (kimi-serve profile {profile.name}, engine {profile.engine}{what})",
            profile.where("service.unit_name"),
        ),
        "exec_start": exec_line(launch.argv, profile.where("python")),
        "selftest_pre": exec_line(gate, profile.where("allreduce")) if gate else "",
        "exec_start_pres": [f"-+{exec_line(list(UVM_STEP), 'ExecStartPre')}"] if gpus else [],
        "exec_start_posts": [exec_line(list(a), profile.where("server")) for a in shape.posts],
        "post_comment": shape.post_comment,
        "unit_lines": list(shape.unit_lines),
        "stop_comment": list(shape.stop_comment),
        "timeout_comment": SELFTEST_TIMEOUT + shape.timeout_comment[:1].lower() + shape.timeout_comment[1:]
        if gate
        else shape.timeout_comment,
        "environment": [environment_line(k, v, profile.where(f"env.{k}")) for k, v in sorted(env.items())],
        "user": user_name(profile.service.user, profile.where("service.user")),
        "working_directory": specifiers(profile.service.working_directory, profile.where("service.working_directory")),
        "timeout_start_sec": shape.timeout_start_sec or start_timeout_sec(profile),
        "restart_sec": RESTART_SEC,
        "start_limit_burst": START_LIMIT_BURST,
        "start_limit_interval_sec": start_limit_interval_sec(profile),
        "timeout_stop_sec": profile.service.stop_timeout,
        "limit_nofile": profile.service.limit_nofile,
        "limit_memlock": resource_limit(profile.service.limit_memlock, profile.where("service.limit_memlock")),
        "syslog_identifier": name.removesuffix(".service"),
        "cache_directory": CACHE_NAME,
        "hardening_level": profile.service.hardening,
        "hardening": [f"{k}={v}" for k, v in unit_sandbox(profile, launch, ctx)],
    }
    # the --set overrides are recorded in the unit (under its hash), so `status` shows what is live
    overrides = OVERRIDES_PREFIX + shlex.join(profile.overrides) + "\n" if profile.overrides else ""
    fields = {**marker_fields(ctx, profile, launch.endpoint), **({"role": shape.role} if shape.role else {})}
    return render_template(TEMPLATE, values, name, fields, overrides)


def marker_fields(ctx: UnitContext, profile: Profile, endpoint: str) -> dict[str, str]:
    """The marker line's fields of a unit rendered for ``profile`` (:mod:`kimi_serve.service.marker`)."""
    patch_set = "+".join(profile.patch_set) or "none"
    return {"version": ctx.version, "profile": profile.name, "patch_set": patch_set, "endpoint": endpoint}


def render_template(
    template: str, values: Mapping[str, object], name: str, fields: Mapping[str, str], head: str = ""
) -> RenderedUnit:
    """``template`` (under resources/systemd) rendered with ``values`` below kimi-serve's marker line (``fields``
    and the body's SHA-256); ``head`` starts the body."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(resource_dir("systemd"))),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    body = head + env.get_template(template).render(**values)
    digest = body_hash(body)
    marker = " ".join([MARKER_PREFIX, *(f"{k}={marker_value(v)}" for k, v in {**fields, "sha256": digest}.items())])
    return RenderedUnit(name=name, text=f"{marker}\n{body}", sha256=digest)


def unit_sandbox(profile: Profile, launch: Launch, ctx: UnitContext) -> list[tuple[str, str]]:
    """The sandbox lines (:mod:`kimi_serve.service.hardening`); ProtectHome= is read-only when the interpreter,
    kimi-serve or the model live under a home directory."""
    used = [
        launch.argv[0],
        ctx.kimi_serve,
        ctx.package_root,
        profile.model.path or "",
        profile.speculative.draft_model_path or "",
        profile.service.working_directory,
    ]
    used += [os.path.realpath(u) for u in used if u]  # a venv's python links into the Python it was made from
    where = profile.where("service.working_directory")
    writable = quote("-" + carryable(profile.service.working_directory, where))  # a list setting: one quoted word
    return sandbox(profile.service.hardening, [writable], protect_home(used))


def unit_reach(
    profile: Profile,
    launch: Launch,
    ctx: UnitContext,
    root: Path,
) -> list[Finding]:
    """Whether the unit's user, inside the unit's sandbox, can run its interpreter and start gate and read its model
    (:mod:`kimi_serve.host.unit_reach`): failed ``unit.reach`` findings, none when it can. ``root``: the system the
    unit runs on (an install root, or a container's root seen from its host)."""
    needs = [  # every gate (verify, wait-router, wait-joined, selftest-gate) is ctx's kimi-serve
        Need("interpreter", launch.argv[0], RUN, profile.where("python")),
        Need("start gate command", ctx.kimi_serve, RUN, profile.where("server")),
    ]
    if profile.engine == "simulator":  # the unit imports kimi-serve's own package from there (PYTHONPATH)
        needs.append(Need("kimi-serve package directory", ctx.package_root, ENTER, profile.where("engine")))
    models: list[tuple[str, str, str | None]] = [("model", "model.path", profile.model.path)]
    if profile.speculative.enabled:
        models.append(("draft model", "speculative.draft_model_path", profile.speculative.draft_model_path))
    needs += [Need(role, path, LOAD, profile.where(key)) for role, key, path in models if path]
    needs.append(
        Need("working directory", profile.service.working_directory, ENTER, profile.where("service.working_directory"))
    )
    box = Sandbox.from_lines(unit_sandbox(profile, launch, ctx))
    return reach_findings(needs, box, profile.service.user, root=root)
