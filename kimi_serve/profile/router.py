"""Profile -> the router's launch (PyPI ``sglang-router`` 0.3.2, in the engine interpreter), as data (no I/O).

Always through kimi-serve's shim (:mod:`kimi_serve.router.shim`): sglang-router takes a key only as ``--api-key KEY``
on its command line, so the shim reads it (and the admin key) from the profile's key file and starts the router
in-process (no key in ps, /proc or the unit); and ``python -m sglang_router.launch_router`` imports all of SGLang
first (12-20 s, against about 1 s through the shim).
"""

from __future__ import annotations

from kimi_serve.core.proc import python_argv
from kimi_serve.profile.launch import Launch
from kimi_serve.profile.loader import Profile
from kimi_serve.profile.topology import replicas

ROUTER_SHIM_MODULE = "kimi_serve.router.shim"


def build_router_launch(profile: Profile, interpreter: str, pythonpath: str | None = None) -> Launch:
    """The router launch for a replicated profile, run by the engine's ``interpreter`` (which lacks kimi_serve: hence
    ``pythonpath``, the folder holding it, in front of PYTHONPATH). Its flags: full names, in a stable order."""
    r = profile.router
    args = ["--worker-urls", *(rep.url for rep in replicas(profile))]
    args += ["--policy", r.policy, "--host", r.host, "--port", str(r.port)]
    args += ["--health-check-interval-secs", str(r.health_check_interval)]
    args += ["--health-failure-threshold", str(r.health_failure_threshold)]
    args += ["--prometheus-host", r.metrics_host, "--prometheus-port", str(r.metrics_port)]
    level = profile.server.log_level
    args += ["--log-level", {"warning": "warn", "critical": "error"}.get(level, level)]
    key_file = profile.server.api_key_file
    own = ("--api-key-file", key_file) if key_file else ()
    argv = (*python_argv(interpreter, "-m", ROUTER_SHIM_MODULE), *own, "--", *args)
    env: dict[str, str] = {}
    if pythonpath:
        from kimi_serve.core.settings import with_pythonpath

        env = with_pythonpath(env, pythonpath)
    return Launch(
        argv=argv,
        env=env,
        server_args=tuple(args),
        engine="router",
        host=profile.router.host,
        port=profile.router.port,
        api_key_file=key_file,
    )
