"""The typed profile: kimi_serve/profile/sections.py is generated from the schema and current, its dataclasses agree
with the schema key by key (names, types, nullability; the defaults stay in the schema), a loaded profile's typed
values are the validated ones, and a misspelt key is an error, at run time and for mypy."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from kimi_serve.profile import sections
from kimi_serve.profile.loader import Profile, load_profile
from kimi_serve.profile.schema import SECTIONS, default_of

ROOT = Path(__file__).resolve().parent.parent
PY = {"str": "str", "path": "str", "int": "int", "float": "float", "bool": "bool"}
PY |= {"str_map": "Mapping[str, str]", "str_list": "tuple[str, ...]", "names": "tuple[str, ...]"}


def test_the_generated_sections_are_current() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts/gen-profile-types.py"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("section", list(SECTIONS))
def test_the_dataclasses_agree_with_the_schema_key_by_key(section: str) -> None:
    cls = sections.SECTION_TYPES[section] if section else sections.ProfileKeys
    fields = {f.name: f for f in dataclasses.fields(cls)}
    keys = SECTIONS[section]
    if not section:  # the top level also holds one field per section
        assert [n for n in fields if n not in keys] == [s for s in SECTIONS if s]
        assert all(fields[s].type == sections.SECTION_TYPES[s].__name__ for s in SECTIONS if s)
    assert [n for n in fields if n in keys] == list(keys)
    for name, key in keys.items():
        f = fields[name]
        assert f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING, name  # schema only
        optional = (
            key.nullable and not key.required and not (not section and key.type in ("str_map", "str_list", "names"))
        )
        assert f.type == PY[key.type] + (" | None" if optional else ""), (section, name, f.type)


@pytest.mark.parametrize("name", ["prod", "sim", "sim-dp2"])
def test_a_loaded_profile_carries_the_validated_values_typed(name: str) -> None:
    p = load_profile(name)
    for section, keys in SECTIONS.items():
        holder = getattr(p, section) if section else p
        assert {k: getattr(holder, k) for k in keys} == dict(
            p.data[section] if section else {k: p.data[k] for k in keys}
        )
    assert isinstance(p.server.port, int) and isinstance(p.startup.timeout, int)
    assert dataclasses.is_dataclass(p.server) and p.server.__dataclass_params__.frozen  # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.server.port = 1  # type: ignore[misc]
    with pytest.raises(AttributeError):
        _ = p.server.prot  # type: ignore[attr-defined]
    assert not hasattr(Profile, "__getattr__") and not hasattr(type(p.server), "__getattr__")


def test_defaults_come_from_the_schema() -> None:
    from kimi_serve.up.options import UpOptions

    o = UpOptions()
    assert (o.startup_timeout_s, o.verify_timeout_s, o.verify_suite, o.stop_grace_s) == (
        default_of("startup.timeout"),
        default_of("verify.timeout"),
        default_of("verify.suite"),
        default_of("service.stop_timeout"),
    )


def test_a_misspelt_key_fails_type_checking(tmp_path: Path) -> None:
    snippet = tmp_path / "misspelt.py"
    snippet.write_text(
        "from kimi_serve.profile.loader import load_profile\n\n"
        'p = load_profile("prod")\nport: int = p.server.port\nwrong = p.server.prot\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--follow-imports=silent", str(snippet)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 1, done.stdout
    assert f'{snippet}:5: error: "ServerSection" has no attribute "prot"  [attr-defined]' in done.stdout
    assert "Found 1 error" in done.stdout, done.stdout  # the correct key type-checks as int
