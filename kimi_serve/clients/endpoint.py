"""What a client needs to know about a deployment, read from its profile (no I/O beyond the profile and the patch
manifests): the base URL it reaches (the router's for a replicated profile; never a wildcard bind address), the served
model name, the key's environment variable (its NAME, never the key), the limits the server really serves, the field
reasoning comes back in, and whether Moonshot's own ``thinking`` request field is honoured. Without a profile, the
shipped ``prod`` profile's values are used and each one is listed in ``assumed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import SplitResult, urlsplit

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.family import DEFAULT as DEFAULT_FAMILY
from kimi_serve.core.family import family as family_of
from kimi_serve.core.net import connect_host, is_loopback, is_unspecified
from kimi_serve.core.report import json_meta
from kimi_serve.core.settings import API_KEY_ENV
from kimi_serve.profile.loader import Profile, load_profile
from kimi_serve.profile.topology import routed
from kimi_serve.verify.target import parse_target

REASONING_FIELD = "reasoning_content"  # what SGLang's kimi_k2 reasoning parser writes and every measured client reads
MOONSHOT_THINKING_FEATURE = "moonshot_thinking_field"  # the Kimi patch set's feature: `thinking: {"type": ...}`
OUTPUT_CAP = 32768  # the output budget suggested to a client: a quarter of the context, at most this
DEFAULT_PROFILE = "prod"  # where the values come from without --profile (each one then listed as assumed)


@dataclass(frozen=True)
class Endpoint:
    """A deployment as a client sees it."""

    base_url: str  # OpenAI base URL, ending in /v1
    model: str  # the served model name (model.served_name)
    # the environment variable the generated configs read the key from (the client's JSON names it: api_key_env)
    key_env: str = field(metadata=json_meta(omit=True))
    key_required: bool = field(metadata=json_meta(key="api_key_required"))  # server.api_key_file is set
    context_length: int  # the served context (prompt + output)
    # the output budget a client should ask for (leaves room for the prompt)
    max_output: int = field(metadata=json_meta(key="max_output_tokens"))
    reasoning_field: str | None  # None: the profile has no reasoning parser, reasoning comes back in content
    # `thinking: {"type": "disabled"}` honoured (None: not known without a profile)
    moonshot_thinking: bool | None = field(metadata=json_meta(key="moonshot_thinking_honoured"))
    profile: str | None  # the profile's name, None when the values are assumed
    assumed: tuple[str, ...] = field(default=())  # what was filled in without knowing it
    # what the client's user should know about the address (the client's JSON lists its notes)
    notes: tuple[str, ...] = field(default=(), metadata=json_meta(omit=True))
    family: str = DEFAULT_FAMILY  # the model family served (core/family.py, docs/families.md)
    # what clients should send: the family's only accepted, else the profile's
    sampling: tuple[tuple[str, float], ...] = field(default=(), metadata=json_meta(encode=dict))
    # the model has an instant mode (thinking off); False: it only thinks
    instant: bool = field(default=True, metadata=json_meta(key="instant_mode"))
    preserve_thinking: bool | None = None  # the server's default for the family's switch; None: the family has none

    @property
    def title(self) -> str:
        return family_of(self.family).title


def _url(host: str, port: int, scheme: str = "http", path: str = "") -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}:{port}{path}/v1"


def _wildcard(parts: SplitResult, raw: str) -> bool:
    """Whether ``--host`` names a wildcard bind address in any spelling (``0x0``, ``[::0]``, ``[::ffff:0.0.0.0]``...;
    core/net.py judges the address, not its text)."""
    try:
        host = parts.hostname or ""
    except ValueError:
        return False
    return is_unspecified(host) or is_unspecified(raw)


def _from_host(text: str, port: int) -> tuple[str, bool]:
    """``--host`` (HOST, HOST:PORT or a URL) -> (base URL, whether it named its port: a URL always does, its scheme's
    default when it has none, as for verify --host). A bare HOST gets ``port``. A wildcard bind address is refused:
    it is where a server listens, not where a client connects."""
    raw = text.strip()
    parts = urlsplit(raw if "://" in raw else f"http://{raw}")
    if raw and _wildcard(parts, raw):
        raise KimiServeError(
            f"{raw!r} is a wildcard bind address (every interface), not an address a client connects to",
            where="--host",
            hint="pass the name or address clients use to reach this server, e.g. --host gpu-box.example.com",
            exit_code=ExitCode.USAGE,
        )
    target = parse_target(raw)  # the same forms and one-line errors as verify --host
    if "://" in raw or parts.port is not None:
        return f"{target.base_url}/v1", True
    fixed = urlsplit(target.base_url)
    return _url(fixed.hostname or "", port, fixed.scheme, fixed.path), False


def _honours_thinking_field(profile: Profile) -> bool:
    from kimi_serve.patches import load_patch_set

    return any(MOONSHOT_THINKING_FEATURE in load_patch_set(name).features for name in profile.patch_set)


def endpoint_for(profile: Profile | None, host: str | None) -> Endpoint:
    """The endpoint of ``profile`` (None: the shipped prod profile's values, each listed as assumed), reached at
    ``host`` when given (``--host``), else at the profile's own address (a wildcard bind: this machine's loopback)."""
    if profile is None and host is None:
        raise KimiServeError(
            "neither --profile nor --host: nothing says which server the client should reach",
            where="client-config",
            hint="pass --profile P (the deployment's profile) or --host HOST[:PORT] (where clients reach it)",
            exit_code=ExitCode.USAGE,
        )
    assumed: list[str] = []
    notes: list[str] = []
    source = profile if profile is not None else load_profile(DEFAULT_PROFILE)
    # where clients send requests: the router of a replicated profile, else the server (rank 0 of a multi-node one)
    front = source.router if routed(source) else source.server
    bind_host, port = front.host, front.port
    if profile is None:
        assumed.append(f"model name {source.model.served_name!r}: the shipped {DEFAULT_PROFILE} profile's")
    context = source.model.context_length
    if context is None:
        context = 262144
        assumed.append("context 262144: Kimi-K2.5's published context (model.context_length is null: the model's)")
    elif profile is None:
        assumed.append(f"context {context}: the shipped {DEFAULT_PROFILE} profile's (model.context_length)")
    if host is not None:
        base_url, named_port = _from_host(host, port)
        if not named_port and profile is None:
            assumed.append(f"port {port}: the shipped {DEFAULT_PROFILE} profile's (pass --host HOST:PORT)")
    else:
        base_url = _url(connect_host(bind_host), port)
        if is_unspecified(bind_host):
            assumed.append(
                f"host {connect_host(bind_host)}: the profile binds every interface (a wildcard address), reached "
                "from this machine; a client elsewhere needs --host NAME (the address it reaches this machine at)"
            )
        elif is_loopback(bind_host):
            notes.append(f"{bind_host} is loopback: the client must run on this machine")
    key_required = bool(source.server.api_key_file)
    fam = family_of(source.model.family)
    chosen = tuple((k, v) for k in ("temperature", "top_p") if (v := getattr(source.model, k)) is not None)
    if profile is None:
        assumed.append(f"an API key is required (the shipped {DEFAULT_PROFILE} profile has server.api_key_file)")
    return Endpoint(
        base_url=base_url,
        model=source.model.served_name,
        key_env=API_KEY_ENV,
        key_required=key_required,
        context_length=context,
        max_output=min(OUTPUT_CAP, context // 4),
        reasoning_field=REASONING_FIELD if source.parsers.reasoning else None,
        moonshot_thinking=_honours_thinking_field(source) if profile is not None else None,
        profile=profile.name if profile is not None else None,
        assumed=tuple(assumed),
        notes=tuple(notes),
        family=fam.name,
        sampling=fam.sampling or chosen,
        instant=not fam.thinking_only,
        preserve_thinking=(
            dict(fam.forced).get("preserve_thinking", bool(source.model.preserve_thinking))
            if "preserve_thinking" in fam.switches
            else None
        ),
    )
