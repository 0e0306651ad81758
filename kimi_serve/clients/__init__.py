"""`client-config`: a configuration that works for the agent clients people point at a Kimi server (opencode, kimi-cli,
the openai SDK, openai-agents, pydantic-ai, LangChain, the AI SDK), from the deployment's profile (docs/clients.md).

Modules: :mod:`.endpoint` (the deployment as a client sees it: base URL, model, key variable, limits, reasoning
field, thinking dialects honoured), :mod:`.configs` (each client's file or snippet). Pure: reads the profile and the
patch manifests, writes nothing. Imports core, profile, verify (the --host forms) and patches (the manifests).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kimi_serve.clients.configs import CLIENTS, ClientConfig
from kimi_serve.core.errors import ExitCode, KimiServeError

if TYPE_CHECKING:  # loaded on use: the command's --help needs only the client names
    from kimi_serve.clients.endpoint import Endpoint
    from kimi_serve.profile.loader import Profile

__all__ = ["CLIENTS", "ClientConfig", "client_config"]


def client_config(client: str, profile: Profile | None, host: str | None) -> tuple[Endpoint, ClientConfig]:
    """``client``'s configuration for the deployment of ``profile`` (None: the shipped prod profile's values,
    listed as assumed) reached at ``host`` (None: the profile's own address). An unknown client is a USAGE error
    that lists the known ones."""
    if client not in CLIENTS:
        from kimi_serve.profile.loader import suggest

        known = f"pass one of: {', '.join(CLIENTS)}"
        close = suggest(client, list(CLIENTS))
        raise KimiServeError(
            f"unknown client {client!r}",
            where="--client",
            hint=f"{close} ({known})" if close.startswith("did you mean") else known,
            exit_code=ExitCode.USAGE,
        )
    from kimi_serve.clients.endpoint import endpoint_for

    endpoint = endpoint_for(profile, host)
    return endpoint, CLIENTS[client](endpoint)
