"""What the HTTP exchange with a server says before its answer is read: refused or timed out, 401/404/5xx, a body
that is not JSON, past verify's read limits, or whose Content-Encoding lies; each as a finding with its fix."""

from __future__ import annotations

from typing import Any

from kimi_serve.core.findings import Finding
from kimi_serve.core.http import Reply, TransportError
from kimi_serve.verify import wire
from kimi_serve.verify.report import Readiness, clip, problem

FIX_KEY = (
    "pass --api-key, set KIMI_SERVE_API_KEY or --api-key-file FILE (the `api-key:` file SGLang reads via --config)"
)


_COLD_START = "a cold start loads ~600 GB and captures CUDA graphs"
# the fix when the port never got ready, by the last phase seen: one text, or (checked once, after waiting)
_NOT_READY_FIX: dict[str, str | tuple[str, str]] = {
    "not-http": "another service listens on {address}: point --host at SGLang's HTTP port (the profile's "
    "server.port, default 30000)",
    "no-answer": "find what holds the port with `ss -ltnp 'sport = :{port}'`: if it is SGLang, it hangs (read its "
    "log); otherwise point --host at SGLang's HTTP port",
    "refused": (
        "start the server, or pass --wait SECONDS to wait while it loads",
        f"start the server (check its log: did it exit?), check --host, or raise --wait ({_COLD_START})",
    ),
    "warming": (
        "pass --wait SECONDS to wait for the warmup to end",
        f"raise --wait ({_COLD_START}) or read the server log",
    ),
    "unreachable": "check --host (scheme, host, port)",
}
_HTTP_ON_HEALTH = (
    "check that --host is SGLang's HTTP port (another web server or a proxy answers there), or read its log"
)


def not_ready(readiness: Readiness, wait: float, address: str) -> Finding:
    """The server at ``address`` (HOST:PORT) was not ready by the ``--wait`` deadline (``wait``: the value given, 0:
    checked once): the message says what the port did, and the fix is the one for that cause."""
    when = f"after {wait:g}s (--wait {wait:g})" if wait > 0 else "(checked once, --wait 0)"
    fix = _NOT_READY_FIX.get(readiness.phase, _HTTP_ON_HEALTH)  # else http-NNN on /health
    fix = fix[wait > 0] if isinstance(fix, tuple) else fix
    fix = fix.format(address=address, port=address.rsplit(":", 1)[-1])
    return problem("not_ready", f"server not ready {when}: {readiness.detail}", fix)


def transport_finding(err: TransportError, *, timeout: float) -> Finding:
    """No answer to a request sent after the readiness poll (so the port answered HTTP once): by cause."""
    if err.answered:
        return problem(
            "unreachable",
            f"answered {clip(err.answered)!r}, not HTTP",
            "another service listens there: point --host at SGLang's HTTP port",
        )
    if err.kind == "refused":
        return problem(
            "unreachable",
            "connection refused: the server stopped listening after it answered /health",
            "it exited or restarted during the check: read its log, then run verify again (with --wait SECONDS to "
            "wait for a restart)",
        )
    if err.kind == "timeout":
        return problem(
            "timeout",
            f"no answer within --timeout {timeout:g}s",
            "the server accepts connections but does not answer; read its log, or raise --timeout",
        )
    if err.kind == "reset":
        return problem(
            "connection_reset",
            clip(err.detail),
            "the server (or a proxy or gateway in front of it) accepted the connection and then reset it: its accept "
            "backlog or connection limit is too small for this many requests at once (SGLang's own server accepts "
            "2048); raise it, or read its log",
        )
    return problem("unreachable", f"cannot connect: {clip(err.detail)}", "check --host (scheme, host, port)")


def unreachable(err: TransportError) -> bool:
    """The server could not be reached at all (refused, DNS, TLS, not HTTP): exit 3, not a contract failure (a
    timeout or a reset is the server's answer to the request)."""
    return err.kind not in ("timeout", "reset")


def model_not_found(model: str, served: list[str] | None) -> Finding:
    names = ", ".join(served) if served else "none listed"
    return problem(
        "http_404_model",
        f"HTTP 404: model {model!r} is not served (served: {names})",
        "pass --model with a served name, or omit it to use what /v1/models lists",
    )


def http_finding(reply: Reply, *, api_key_sent: bool, model: str | None) -> Finding | None:
    """A finding for a non-2xx reply, or a 2xx reply whose body does not match its Content-Encoding; None else."""
    if reply.encoding_fault and 200 <= reply.status < 300:
        return problem(
            "content_encoding",
            f"the HTTP {reply.status} answer has {reply.encoding_fault}: the openai SDK's HTTP client (httpx) "
            "cannot read it (httpx.DecodingError, raised as openai.APIConnectionError), so clients fail",
            "a proxy or gateway in between decodes (or re-encodes) bodies and keeps the original Content-Encoding "
            "header: make it drop or fix the header, or pass bodies through untouched; point --host at SGLang "
            "itself to confirm",
        )
    body = reply.body.decode("utf-8", errors="replace").strip()
    if reply.status == 401:
        if api_key_sent:
            return problem(
                "http_401",
                "HTTP 401: the server rejected the API key",
                "use the key from the server's --config file: --api-key-file FILE or KIMI_SERVE_API_KEY",
            )
        return problem("http_401", "HTTP 401: the server requires an API key and none was sent", FIX_KEY)
    if reply.status == 404 and model is not None:
        return model_not_found(model, None)
    if reply.status >= 500:
        return problem(
            "http_5xx",
            f"HTTP {reply.status} server error: {clip(body) or '(empty body)'}",
            "read the SGLang log for the traceback of this request",
        )
    if not 200 <= reply.status < 300:
        return problem(
            "http_error",
            f"HTTP {reply.status}: {clip(body) or '(empty body)'}",
            "check --host and the request the server rejected (see the message)",
        )
    return None


FIX_TOO_LARGE = (
    "the server sends an endless or oversized answer; read its log, and check that --host is SGLang's OpenAI server "
    "(not a proxy or another service)"
)


def too_large(limit: str, what: str) -> Finding:
    """Reading stopped at one of verify's read limits (transport.LIMITS); ``limit`` names it."""
    return problem("too_large", f"{what} passed verify's read limit ({limit}) and was cut off there", FIX_TOO_LARGE)


def past_bound(limit: str, what: str) -> Finding:
    """A JSON document past one of verify's bounds (wire.MAX_DEPTH, wire.MAX_CONTAINERS): not decoded."""
    return problem(
        "too_large", f"{what} is JSON past verify's bound ({limit}), so verify does not decode it", FIX_TOO_LARGE
    )


def parse_json_body(reply: Reply) -> tuple[Any, Finding | None]:
    if reply.limit:
        return None, too_large(reply.limit, f"the HTTP {reply.status} answer")
    if reply.timed_out:
        return None, problem(
            "timeout",
            "the answer did not finish before the deadline",
            "the server stalls mid-answer; read its log, or raise --timeout if it is only slow",
        )
    try:
        return wire.loads(reply.body), None
    except wire.WireLimit as exc:
        return None, past_bound(exc.limit, f"the HTTP {reply.status} answer")
    except ValueError:
        text = reply.body.decode("utf-8", errors="replace").strip()
        return None, problem(
            "non_json_body",
            f"HTTP {reply.status} body is not JSON: {clip(text)!r}",
            "point --host at SGLang's OpenAI server, not a web page or a proxy error page",
        )
