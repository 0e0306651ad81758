"""The API-key file of a service: whether install must create it, and creating it (with a random admin key, never
printed). The rules of a key file itself live in :mod:`kimi_serve.core.keyfile`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.findings import FAIL
from kimi_serve.core.keyfile import SUFFIXES, new_admin_key, write_key_file
from kimi_serve.core.settings import API_KEY_ENV
from kimi_serve.core.text import line_breaker
from kimi_serve.profile.loader import Profile
from kimi_serve.service.state import ServicePaths


def needs_secret(profile: Profile, paths: ServicePaths, environ: Mapping[str, str]) -> bool:
    """Whether install must create the API-key file; raises when it is missing and cannot be created."""
    secret = profile.server.api_key_file
    if secret is None:
        return False
    where = profile.where("server.api_key_file")
    if paths.under_root(secret).exists():
        from kimi_serve.check.host import check_api_key_file

        finding = check_api_key_file(str(paths.under_root(secret)), profile)
        if finding.status == FAIL:
            raise KimiServeError(finding.message, where=finding.where, hint=finding.fix, exit_code=ExitCode.FAILED)
        return False
    if not environ.get(API_KEY_ENV, "").strip():
        raise KimiServeError(
            f"API-key file {paths.under_root(secret)} does not exist",
            where=where,
            hint=f"set ${API_KEY_ENV} and install-service creates it (0600), or create it: "
            f"install -m 600 /dev/null {paths.under_root(secret)}, then write 'api-key: KEY'",
            exit_code=ExitCode.FAILED,
        )
    if not secret.endswith(SUFFIXES):
        raise KimiServeError(
            f"{secret}: SGLang's --config accepts only .yaml/.yml files",
            where=where,
            hint="name it e.g. /etc/kimi-serve/secrets.yaml",
        )
    _one_line_key(environ[API_KEY_ENV])  # refused at planning, before anything is written
    return True


def _one_line_key(key: str) -> str:
    key = key.strip()
    if line_breaker(key) is not None:  # the key file is YAML: one line, no control characters
        raise KimiServeError(
            f"${API_KEY_ENV} contains control character {line_breaker(key)!r} (or spans several lines)",
            where=API_KEY_ENV,
            hint="set it to the key alone",
        )
    if key.startswith("-"):  # SGLang's --config merger would read it as an option and stop at start (exit 2)
        raise KimiServeError(
            f"${API_KEY_ENV} begins with '-': SGLang reads the key file's values as command-line arguments and "
            "would stop at start ('argument --api-key: expected one argument')",
            where=API_KEY_ENV,
            hint="use a key that does not begin with '-'",
        )
    return key


def create_secret(path: Path, profile: Profile, key: str, root: Path) -> None:
    """The key file at ``path``, written inside ``root`` (no link followed out of it on the way)."""
    key = _one_line_key(key)
    admin = new_admin_key() if profile.server.admin_key != "none" else None  # never printed, only in the file
    write_key_file(path, key, admin, step="service.write-atomic", root=root)
