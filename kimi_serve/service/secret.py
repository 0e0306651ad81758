"""The API-key file of a service: whether install must create it, and creating it (with a random admin key, never
printed). The rules of a key file itself live in :mod:`kimi_serve.core.keyfile`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kimi_serve.core.errors import ExitCode, KimiServeError
from kimi_serve.core.findings import FAIL
from kimi_serve.core.keyfile import SUFFIXES, keyfile_recipe, new_admin_key, new_key, write_key_file
from kimi_serve.core.report import json_meta
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

        finding = check_api_key_file(str(paths.under_root(secret)), profile, paths.root)
        if finding.status == FAIL:
            raise KimiServeError(finding.message, where=finding.where, hint=finding.fix, exit_code=ExitCode.FAILED)
        return False
    if not environ.get(API_KEY_ENV, "").strip():
        raise KimiServeError(
            f"API-key file {paths.under_root(secret)} does not exist",
            where=where,
            hint=f"set ${API_KEY_ENV} and install-service creates it (0600, with a random admin-api-key), or create it "
            f"first: {keyfile_recipe(profile.cli_args(), paths.root)}",
            exit_code=ExitCode.FAILED,
        )
    _yaml_name(secret, where)
    _one_line_key(environ[API_KEY_ENV])  # refused at planning, before anything is written
    return True


def _yaml_name(secret: str, where: str) -> None:
    if not secret.endswith(SUFFIXES):
        raise KimiServeError(
            f"{secret}: SGLang's --config accepts only .yaml/.yml files",
            where=where,
            hint="name it e.g. /etc/kimi-serve/secrets.yaml",
        )


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


@dataclass(frozen=True)
class KeyFileResult:
    """What `kimi-serve keyfile` did to a profile's key file (never the keys themselves)."""

    path: Path = field(metadata=json_meta(key="key_file"))
    changed: bool
    api_key: str  # "from $KIMI_SERVE_API_KEY", "kept", "new"
    admin_api_key: str  # "kept", "new", "none"

    def message(self) -> str:
        if not self.changed:
            return f"{self.path} already holds an api-key and {self._admin()} (mode 0600): unchanged"
        key = {"new": "a new random api-key", "kept": "its api-key"}.get(self.api_key, f"the api-key {self.api_key}")
        new = " (the clients' key: read it from the file as its owner)" if self.api_key == "new" else ""
        return f"wrote {self.path} (mode 0600): {key} and {self._admin()}{new}"

    def _admin(self) -> str:
        return {"new": "a new random admin-api-key", "kept": "its distinct admin-api-key"}.get(
            self.admin_api_key, "no admin-api-key (server.admin_key: none)"
        )


def _present(path: Path) -> tuple[str | None, str | None, bool] | None:
    """``(api-key, admin-api-key, private)`` of the key file at ``path``; None when there is none. A file that is not
    a key file to rewrite (a link, a folder, unreadable) is refused: it is never replaced unseen."""
    import stat

    from kimi_serve.core.inputs import NotRegularFile
    from kimi_serve.core.keyfile import MAX_BYTES, PRIVATE_MASK, parse_keys, read_regular

    try:
        if path.is_symlink():  # replaced, the link would be lost; followed, it writes where it points
            raise NotRegularFile(path, "a symbolic link")
        st, raw = read_regular(path)
    except FileNotFoundError:
        return None
    except NotRegularFile as exc:
        raise KimiServeError(
            f"{path} is {exc.kind}, not a key file: refusing to replace it",
            hint=f"move it aside (mv {path} {path}.old), then run this again",
            exit_code=ExitCode.FAILED,
        ) from None
    except PermissionError:
        raise KimiServeError(
            f"{path} is not readable by this user",
            hint="run it as the file's owner or root",
            exit_code=ExitCode.ENVIRONMENT,
        ) from None
    if len(raw) > MAX_BYTES:
        return None, None, False
    key, admin = parse_keys(raw.decode("utf-8", errors="replace"))
    return key, admin, not st.st_mode & PRIVATE_MASK and stat.S_ISREG(st.st_mode)


def write_profile_key_file(profile: Profile, root: Path, environ: Mapping[str, str]) -> KeyFileResult:
    """`kimi-serve keyfile`: the profile's ``server.api_key_file`` (inside ``root``) made to pass `check`: 0600, its
    folders created, the clients' key from $KIMI_SERVE_API_KEY (else the file's own, else a new random one), a
    distinct admin-api-key (the file's own, else a new random one, as install-service writes it). Idempotent."""
    secret = profile.server.api_key_file
    where = profile.where("server.api_key_file")
    if secret is None:
        raise KimiServeError(
            f"profile {profile.name} has no key file (server.api_key_file is null)",
            where=where,
            hint="set server.api_key_file: /etc/kimi-serve/NAME-secrets.yaml in the profile (or --set)",
        )
    _yaml_name(secret, where)
    path = root / secret.lstrip("/")
    given = environ.get(API_KEY_ENV, "").strip()
    found = _present(path)
    old_key, old_admin, private = found if found is not None else (None, None, False)
    if given:
        key, key_from = _one_line_key(given), f"from ${API_KEY_ENV}"
    elif old_key and not old_key.startswith("-"):
        key, key_from = old_key, "kept"
    else:
        key, key_from = new_key(), "new"
    if profile.server.admin_key == "none":
        admin, admin_from = (old_admin, "kept") if old_admin and old_admin != key else (None, "none")
    elif old_admin and old_admin != key and not old_admin.startswith("-"):
        admin, admin_from = old_admin, "kept"
    else:
        admin, admin_from = new_admin_key(), "new"
    if found is not None and private and key == old_key and admin == old_admin:
        return KeyFileResult(path, False, key_from, admin_from)
    try:
        write_key_file(path, key, admin, root=root)
    except OSError as exc:  # not permitted, a read-only or full file system: the host's refusal
        raise KimiServeError(
            f"cannot write {path}: {exc.strerror or exc}",
            where=where,
            hint="run it as root (sudo), or point server.api_key_file at a folder this user owns",
            exit_code=ExitCode.ENVIRONMENT,
        ) from None
    return KeyFileResult(path, True, key_from, admin_from)
