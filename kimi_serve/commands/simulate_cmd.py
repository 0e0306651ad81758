"""`kimi-serve simulate`: run SGLang's own OpenAI serving layer with a scripted Kimi-K2.5 (docs/simulator.md)."""

from __future__ import annotations

import os

import typer

from kimi_serve.commands.numbers import number_option, seconds_option
from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.settings import SIM_ACCEPT_ENV, process_environ


def register(app: typer.Typer) -> None:
    @app.command(
        "simulate",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        help="Serve the OpenAI API through SGLang's own serving code with a scripted Kimi-K2.5 (no GPU): the profile's "
        "exact SGLang flags decide parsers, model name and API key. Raw SGLang flags: `simulate --raw -- FLAGS`.",
    )
    def simulate(
        ctx: typer.Context,
        profile: str = typer.Option(None, "--profile", "-p", help="Profile name (configs/NAME.yaml) or path."),
        host: str = typer.Option(None, "--host", help="Override the profile's server.host."),
        port: int = typer.Option(
            None, "--port", min=1, max=65535, help="Override the profile's server.port (1..65535)."
        ),
        warmup: float = seconds_option(2.0, "--warmup", help="Seconds /health and /ready answer 503 after bind."),
        load: float = seconds_option(0.0, "--load", help="Seconds of simulated loading (port closed) first."),
        raw: bool = typer.Option(
            False, "--raw", help="Take SGLang launch_server flags after `--` instead of a profile."
        ),
        accept_length: float = number_option(
            None,
            "--draft-accept-length",
            lo=1.0,
            hi=17.0,
            help="STAND-IN draft acceptance: the performance model's mean accept length per verify step (1.0 a dead "
            "draft, 1.6 a weak one; default 2.9), reported as SGLang reports it (sglext.spec_tokens_details, "
            "/metrics). Only with speculative decoding on.",
        ),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the command instead of running it."),
    ) -> int:
        import shlex

        from kimi_serve.sglang.site import require_sglang_python
        from kimi_serve.simulator import launcher

        if raw == bool(profile):
            raise KimiServeError(
                "give exactly one of --profile NAME and --raw -- FLAGS",
                where="simulate",
                hint="kimi-serve simulate --profile sim",
            )
        args, env_extra, profile_python, where = list(ctx.args), dict[str, str](), None, "simulate --raw"
        if raw and not args:
            raise KimiServeError(
                "--raw needs SGLang flags after `--`",
                where="simulate",
                hint="kimi-serve simulate --raw -- --model-path /models/Kimi-K2.5 --port 30000",
            )
        if not raw:
            if args:
                raise KimiServeError(
                    f"unexpected arguments {' '.join(args)}",
                    where="simulate",
                    hint="pass raw SGLang flags only with --raw",
                )
            from kimi_serve.check.launch import launch_for
            from kimi_serve.profile.loader import load_profile

            prof = load_profile(profile)
            launch = launch_for(prof)
            args, env_extra, profile_python = list(launch.server_args), dict(launch.env), launch.argv[0]
            where = prof.where("server.api_key_file")
        if host:
            args = launcher.with_flag(args, "--host", host)
        if port:
            args = launcher.with_flag(args, "--port", str(port))
        launcher.check_config_file(args, where)
        python = require_sglang_python(profile_python)
        argv = launcher.command(python, args)
        env = launcher.environment({**process_environ(), **env_extra}, warmup=warmup, load=load)
        if accept_length is not None:
            env[SIM_ACCEPT_ENV] = repr(accept_length)
        if dry_run:
            typer.echo(shlex.join(argv))
            return 0
        os.execve(python, argv, env)  # the simulator takes over this process: signals and exit status are its own
        return 0  # pragma: no cover
