"""Where verify connects and with which API key: HOST parsing and the key sources.

HOST forms: ``host:port``, ``host`` (port 30000, SGLang's default), ``[v6addr]:port``, or an ``http(s)://`` URL with an
optional path prefix. A wildcard bind address (``0.0.0.0``, ``::``) is what a server listens on, not where a client
connects, so it maps to the loopback address of the same family.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.keyfile import read_key_file
from kimi_serve.core.net import connect_host
from kimi_serve.core.settings import API_KEY_ENV, current

DEFAULT_PORT = 30000
MAX_HOST_TEXT = 512  # the whole --host value (a URL with a path prefix); a host name itself is at most 253
_LABEL = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
_PATH = re.compile(r"[A-Za-z0-9._~!$&'()*+,;=:@%/-]*")
_FORM = "use HOST:PORT (e.g. 127.0.0.1:30000, [::1]:30000) or a URL such as http://host:30000"


@dataclass(frozen=True)
class Target:
    """An OpenAI-compatible server root, e.g. ``http://127.0.0.1:30000`` (no trailing slash, no ``/v1``)."""

    base_url: str

    def url(self, path: str) -> str:
        return f"{self.base_url}{path}"


def _usage(message: str, hint: str = _FORM) -> KimiServeError:
    return KimiServeError(message, where="--host", hint=hint, exit_code=ExitCode.USAGE)


def _host_for_url(host: str) -> str:
    host = connect_host(host)
    return f"[{host}]" if ":" in host else host


def _check_host(host: str, raw: str) -> None:
    """A host name (RFC 1123 labels, at most 253 characters) or an IP address; else a USAGE error."""
    shown = raw if len(raw) <= 80 else raw[:77] + "..."
    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    if host.isdigit():
        raise _usage(f"{shown!r} is a port alone, with no host", "use the form HOST:PORT, e.g. 127.0.0.1:30000")
    labels = host.rstrip(".").split(".")
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise _usage(
            f"{shown!r}: {host[:40]!r} is not a host name or an IP address (labels of letters, digits and '-', "
            "each at most 63 characters, 253 in all)"
        )
    if all(label.isdigit() for label in labels):
        raise _usage(f"{shown!r}: {host!r} is not a valid IPv4 address")


def parse_target(text: str) -> Target:
    """Turn what a user types after ``--host`` into a :class:`Target`; raise a USAGE error for anything else."""
    raw = text.strip()
    if not raw:
        raise _usage("empty host")
    if len(raw) > MAX_HOST_TEXT:
        raise _usage(f"the value is {len(raw)} characters long (at most {MAX_HOST_TEXT})")
    if not raw.isprintable() or any(c.isspace() for c in raw):
        raise _usage(f"{raw[:80]!r} contains spaces or control characters")
    if "://" not in raw and "/" in raw:
        raise _usage(
            f"{raw[:80]!r} is neither HOST:PORT nor a URL",
            "use the form HOST:PORT (e.g. 127.0.0.1:30000), or a full URL such as http://127.0.0.1:30000",
        )
    scheme, rest = "http", raw
    if "://" in raw:
        scheme = raw.split("://", 1)[0].lower()
        if scheme not in ("http", "https"):
            raise _usage(f"unsupported scheme {scheme!r} in {raw!r}")
    else:
        if raw.count(":") > 1 and not raw.startswith("["):
            raise _usage(f"IPv6 address {raw!r} needs brackets", "write it as [ADDR]:PORT, e.g. [::1]:30000")
        rest = f"http://{raw}"
    try:
        parts = urlsplit(rest)
        port = parts.port
    except ValueError:
        raise _usage(f"invalid host or port in {raw!r}") from None
    if parts.query or parts.fragment or parts.username:
        raise _usage(f"unexpected query, fragment or user in {raw!r}")
    host = parts.hostname or ""
    if host:
        _check_host(host, raw)
    if not _PATH.fullmatch(parts.path):
        raise _usage(f"unexpected characters in the path of {raw[:80]!r}")
    if port is None:
        port = DEFAULT_PORT if "://" not in raw else (443 if scheme == "https" else 80)
    if port == 0:
        raise _usage(f"port 0 in {raw!r}")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):  # an OpenAI "base_url"; the endpoints below add /v1 themselves
        path = path[: -len("/v1")]
    return Target(f"{scheme}://{_host_for_url(host)}:{port}{path}")


@dataclass(frozen=True)
class ApiKey:
    """A key and where it came from. ``source`` goes into reports; the key itself never does."""

    value: str | None
    source: str  # "--api-key" | "profile key file PATH" | "--api-key-file PATH" | "$KIMI_SERVE_API_KEY" | "none"


def resolve_key(
    api_key: str | None = None,
    key_file: str | Path | None = None,
    environ: dict[str, str] | None = None,
    *,
    file_label: str = "--api-key-file",
) -> ApiKey:
    """The API key from, in order: ``api_key`` (--api-key), ``key_file``, $KIMI_SERVE_API_KEY; none if none is given.

    A named key file beats the environment: it is the file the server itself reads its key from (SGLang's
    ``--config``), so a stale $KIMI_SERVE_API_KEY in the caller's shell cannot make a keyed server look broken.
    ``file_label`` names the file in :attr:`ApiKey.source` ("profile key file" for commands that run a profile).
    """
    if api_key:
        return ApiKey(api_key, "--api-key")
    if key_file:
        return ApiKey(read_key_file(Path(key_file)), f"{file_label} {key_file}")
    env_key = current().api_key if environ is None else environ.get(API_KEY_ENV)
    if env_key:
        return ApiKey(env_key, f"${API_KEY_ENV}")
    return ApiKey(None, "none")
