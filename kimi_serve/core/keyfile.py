"""API-key files: the one home for their rules. A key file is SGLang's own ``--config`` YAML (``api-key: KEY``,
optionally ``admin-api-key: KEY``), private to its owner (no group/other bits), named ``*.yaml``/``*.yml`` (SGLang's
``--config`` accepts nothing else). `check`, `up`, `simulate`, `install-service` and `verify` all apply these rules.
"""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path
from typing import Any

import yaml

from kimi_serve.core import inputs
from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.files import write_atomic
from kimi_serve.core.inputs import NotRegularFile
from kimi_serve.core.settings import API_KEY_ENV

PRIVATE_MASK = stat.S_IRWXG | stat.S_IRWXO
SUFFIXES = (".yaml", ".yml")
MAX_BYTES = 65536  # a key file is two short lines; more is not a key file


def read_regular(path: str | Path) -> tuple[os.stat_result, bytes]:
    """``(its status, its first MAX_BYTES + 1 bytes)``: core/inputs.py's bounded reader with the key file's bound."""
    return inputs.read_regular(path, MAX_BYTES)


def _get(data: dict[Any, Any], name: str) -> Any:
    """``name`` (``api-key``) of a key file's mapping, also spelled with ``_``."""
    return data.get(name, data.get(name.replace("-", "_")))


def _load(text: str) -> Any:
    """A key file's YAML within core/inputs.py's depth and alias bounds (None when it is not YAML or past them)."""
    try:
        return inputs.load_yaml(text)[0]
    except (yaml.YAMLError, ValueError):  # InputBoundError: nested too deep, an alias bomb
        return None


def keyfile_recipe(profile_args: str, root: str | Path | None = None) -> str:
    """The one recipe for a profile's key file (check, doctor, up's preflight, install-service): `kimi-serve keyfile`
    writes it as install-service does (service/secret.py). ``profile_args``: ``--profile P [--set ...]`` as typed;
    ``root``: install-service's --root, when not /."""
    under = f" --root {shlex.quote(str(root))}" if root is not None and Path(root) != Path("/") else ""
    return f"kimi-serve keyfile {profile_args}{under}"


def create_hint(path: str, recipe: str | None = None) -> str:
    """The fix for a missing key file: ``recipe`` (:func:`keyfile_recipe`) where a profile names the file, else the
    same file by hand (its folder, 0600, an api-key and a distinct random admin-api-key)."""
    if recipe:
        return f"create it: {recipe}"
    folder, q = shlex.quote(str(Path(path).parent)), shlex.quote(path)
    return (
        f"create it: mkdir -p {folder} && (umask 077 && printf 'api-key: %s\\nadmin-api-key: %s\\n' YOUR-KEY "
        f'"$(python3 -c \'import secrets; print("k" + secrets.token_urlsafe(32))\')" > {q})'
    )


def parse_keys(text: str) -> tuple[str | None, str | None]:
    """``(api-key, admin-api-key)`` of a key file's text (SGLang's ``--config`` YAML or a bare one-line key); None
    for a key it does not hold."""
    data = _load(text)
    if isinstance(data, dict):
        key, admin = _get(data, "api-key"), _get(data, "admin-api-key")
    elif isinstance(data, str | int) and len(text.strip().splitlines()) == 1:
        key, admin = text.strip(), None
    else:
        return None, None
    return tuple(str(v).strip() if isinstance(v, str | int) and str(v).strip() else None for v in (key, admin))  # type: ignore[return-value]


def key_file_problem(path: str | Path, recipe: str | None = None) -> tuple[str, str] | None:
    """``(what is wrong, the fix)`` when ``path`` cannot serve as SGLang's key file, else None; ``recipe``
    (:func:`keyfile_recipe`) is the fix that makes one, where a profile names the file."""
    f, make = Path(path), create_hint(str(path), recipe)
    try:
        st = f.stat()
    except OSError:
        return f"API-key file {path} does not exist", make
    if st.st_mode & PRIVATE_MASK:
        return (f"API-key file {path} is readable by others (mode {stat.S_IMODE(st.st_mode):o})", f"chmod 600 {path}")
    if not f.name.endswith(SUFFIXES):
        return f"{path}: SGLang's --config accepts only .yaml/.yml files", "rename it to end in .yaml"
    if not stat.S_ISREG(st.st_mode):
        return f"API-key file {path} is {inputs.file_kind(st.st_mode)}, not a regular file", make
    try:
        raw = read_regular(f)[1]
    except NotRegularFile as exc:
        return f"API-key file {path} is {exc.kind}, not a regular file", make
    except OSError:
        return f"API-key file {path} is not readable by this user", "run as its owner (or root), or fix its owner"
    if len(raw) > MAX_BYTES:
        return f"API-key file {path} is over {MAX_BYTES} bytes: not a key file", "write one line `api-key: KEY`"
    text = raw.decode("utf-8", errors="replace")
    try:
        inputs.load_yaml(text)
    except inputs.InputBoundError as exc:
        return f"API-key file {path} is {exc}", exc.hint
    except yaml.YAMLError:
        pass  # SGLang's own reader says what is wrong with its YAML
    dashed = _dashed_value(text)
    if dashed:
        return (
            f"API-key file {path}: its {dashed} begins with '-': SGLang turns the file into command-line arguments, "
            f"so it stops at start ('argument --{dashed}: expected one argument', exit 2)",
            f"use a key that does not begin with '-': {recipe} draws a new one (the api-key from ${API_KEY_ENV} when "
            "set)"
            if recipe
            else f"use a key that does not begin with '-' ({ADMIN_KEY_HINT})",
        )
    return None


def _dashed_value(text: str) -> str | None:
    """The first key (``api-key``, ``admin-api-key``) of a key file whose value begins with ``-``: SGLang's
    ``--config`` merger passes every value as the next argv word, and argparse reads ``-x...`` as an option."""
    data = _load(text)
    items = data.items() if isinstance(data, dict) else ()
    return next((str(k).replace("_", "-") for k, v in items if isinstance(v, str) and v.startswith("-")), None)


def new_key() -> str:
    """A fresh random key (``secrets.token_urlsafe``), never beginning with ``-``, which SGLang's ``--config`` cannot
    read (:func:`key_file_problem`)."""
    import secrets

    while (key := secrets.token_urlsafe(32)).startswith("-"):
        pass
    return key


new_admin_key = new_key  # SGLang's admin-api-key, random: it never leaves the key file


def admin_key_problem(path: str | Path, recipe: str | None = None) -> tuple[str, str] | None:
    """``(what is wrong, the fix)`` when the (readable, private) key file at ``path`` has no ``admin-api-key`` distinct
    from its ``api-key``: then SGLang lets the clients' key into its ADMIN_OPTIONAL endpoints. None when it has one.
    ``recipe`` (:func:`keyfile_recipe`): the fix, which keeps the file's api-key and adds a random admin-api-key."""
    try:
        data = _load(read_regular(path)[1].decode("utf-8"))
    except (OSError, UnicodeDecodeError):
        data = None
    admin = _get(data, "admin-api-key") if isinstance(data, dict) else None
    if not isinstance(data, dict):
        problem = (
            f"API-key file {path} has no admin-api-key (not a YAML mapping)",
            f"write it as two lines 'api-key: KEY' and 'admin-api-key: OTHER-KEY' ({ADMIN_KEY_HINT})",
        )
    elif admin is None or not str(admin).strip():
        problem = (
            f"API-key file {path} has no admin-api-key: SGLang then accepts the clients' key on its admin "
            "endpoints (weights, LoRA, pause, profiling)",
            f"add a line 'admin-api-key: OTHER-KEY' ({ADMIN_KEY_HINT})",
        )
    elif (client := _get(data, "api-key")) is not None and str(client).strip() == str(admin).strip():
        problem = (
            f"API-key file {path}: admin-api-key equals api-key, so every client holds the admin key",
            f"use a distinct admin-api-key ({ADMIN_KEY_HINT})",
        )
    else:
        return None
    if recipe is not None:
        problem = problem[0], f"{recipe} (keeps its api-key, adds a distinct random admin-api-key)"
    return problem


ADMIN_KEY_HINT = "e.g. python3 -c 'import secrets; print(\"k\" + secrets.token_urlsafe(32))'"


def render_key_file(api_key: str, admin_api_key: str | None = None) -> str:
    """The text of a key file SGLang reads with ``--config``."""
    data = {"api-key": api_key}
    if admin_api_key:
        data["admin-api-key"] = admin_api_key
    return yaml.safe_dump(data, default_flow_style=False)


def write_key_file_text(path: Path, text: str, step: str | None = None, root: Path | None = None) -> None:
    """The one writer of key files (the service's, the dry run's stand-in, the SGLang tier's copy): 0600 from its first
    byte, atomic (:func:`kimi_serve.core.files.write_atomic`)."""
    write_atomic(path, text, 0o600, step, root)


def write_key_file(
    path: Path, api_key: str, admin_api_key: str | None = None, step: str | None = None, root: Path | None = None
) -> None:
    """Write a key file SGLang reads with ``--config`` (:func:`render_key_file`, :func:`write_key_file_text`)."""
    write_key_file_text(path, render_key_file(api_key, admin_api_key), step, root)


def read_key_file(path: Path, where: str | None = None) -> str:
    """The key in an API-key file: SGLang's ``--config`` YAML (``api-key: KEY``) or a bare one-line key. The file must
    be private (no group/other bits). ``where`` names it in errors (default: the --api-key-file option)."""
    where = where or f"--api-key-file {path}"
    try:
        st, raw = read_regular(path)
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise KimiServeError(
            "API key file not found", where=where, hint="pass the file SGLang reads via --config"
        ) from None
    except NotRegularFile as exc:
        raise KimiServeError(
            f"API key file is {exc.kind}, not a regular file",
            where=where,
            hint="pass the regular file SGLang reads via --config (mode 600)",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise KimiServeError(
            f"cannot read API key file ({exc.__class__.__name__})", where=where, hint="make it a readable UTF-8 file"
        ) from None
    if len(raw) > MAX_BYTES:
        raise KimiServeError(
            f"API key file is over {MAX_BYTES} bytes: not a key file",
            where=where,
            hint="write one line `api-key: KEY` (the SGLang --config form) or the bare key",
        )
    if st.st_mode & PRIVATE_MASK:
        raise KimiServeError(
            f"API key file is accessible by group/others (mode {stat.S_IMODE(st.st_mode):04o})",
            where=where,
            hint=f"chmod 600 {path}",
        )
    try:
        inputs.load_yaml(text)
    except inputs.InputBoundError as exc:
        raise KimiServeError(f"API key file is {exc}", where=where, hint=exc.hint) from None
    except yaml.YAMLError:
        pass
    key = parse_keys(text)[0]
    if key is None:
        raise KimiServeError(
            "no API key in file",
            where=where,
            hint="write one line `api-key: KEY` (the SGLang --config form) or the bare key",
        )
    return key


def read_admin_key(path: Path, where: str | None = None) -> str | None:
    """The ``admin-api-key`` of a key file (the file's rules as :func:`read_key_file`), None when it holds none. The
    router's control plane (``/workers``) takes it; SGLang's ADMIN_OPTIONAL endpoints too."""
    read_key_file(path, where)
    try:
        return parse_keys(read_regular(path)[1].decode("utf-8"))[1]
    except (OSError, UnicodeDecodeError):
        return None
