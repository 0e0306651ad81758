"""A fuzzer of the profile loader: the shipped profiles (configs/*.yaml) mutated textually and structurally, then
loaded, judged by check's fast rules and rendered (the unit's launch, every rank, the Kubernetes manifests) in
process, and through the CLI for a share of the cases. Bad input must end in a KimiServeError (one line, exit 2),
never another exception or exit 70, and quickly: each case within a CPU-time bound.

Fixed seed, bounded count: the same few hundred cases every run (about 10 s on one core).
"""

from __future__ import annotations

import functools
import math
import random
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_profile import all_key_paths

from kimi_serve.check.launch import fast_validate, plan_deployment
from kimi_serve.core.errors import KimiServeError
from kimi_serve.core.resources import resource_dir
from kimi_serve.k8s.manifests import render_manifests, to_yaml
from kimi_serve.profile.loader import dump_profile, load_profile
from kimi_serve.profile.schema import SECTIONS

SEED = 20261204
CASES = 320
CPU_BOUND_S = 2.0  # per case: the slowest legitimate case takes well under 0.2 s
CLI_EVERY = 8  # every 8th case also runs `render` and `render --format k8s` through the CLI

SHIPPED = sorted(resource_dir("configs").glob("*.yaml"))
KEYS = all_key_paths()
ODD_TEXT = [
    "\x00",
    "\x1b[31m",
    "\t",
    "\r\n",
    "\u2028",
    "\u202e",
    "\ufeff",
    "é",
    "名字",
    "🦀",
    "$(HOME)",
    "$$",
    "%n",
    "'",
    '"',
    "\\",
    "{{",
    "}}",
    ":",
    " #",
    "&a",
    "*a",
    "!!python/object:os.system",
    "<<",
    "? ",
    "- ",
    "|",
    ">",
    "~",
    "@",
    "`",
]
BOMB = "\n".join(
    [' l0: &l0 ["x","x","x","x","x","x","x","x","x"]']
    + [f" l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 8)]
)


def _values(rng: random.Random) -> list[Any]:
    deep: Any = "x"
    for _ in range(rng.choice((31, 33, 40, 300))):
        deep = [deep] if rng.random() < 0.5 else {"k": deep}
    return [
        math.nan,
        math.inf,
        -math.inf,
        10**30,
        -(10**30),
        0,
        -1,
        1.5,
        1e308,
        True,
        None,
        [],
        {},
        "",
        " ",
        "x" * rng.choice((64, 256, 300, 5000)),
        rng.choice(ODD_TEXT) * rng.randint(1, 3),
        "".join(rng.choice(ODD_TEXT) for _ in range(5)),
        ["a", 1, None],
        {"A": "1", "b c": [1]},
        deep,
        "/" + "a" * 300,
        "builtin:" + "p" * 300,
        "a" * 300,
        "/dev/null",
        "/nonexistent/x.yaml",
        "builtin:prod",
        "64Gi",
        "lots",
        "gpu:NoSchedule",
        "bad key!:NoExecute",
        "k=v:NoSchedule",
        "=:",
        "0.0.0.0",
        "::1",
    ]


def _plausible(rng: random.Random, path: str) -> Any:
    """A value the schema accepts for ``path`` (its default, a bound, a choice), so the rules and renderers run."""
    section, _, key = path.rpartition(".")
    spec = SECTIONS.get(section, {}).get(key)
    if spec is None:
        return None
    options = [spec.default, *(spec.choices or ())]
    if spec.min is not None:
        options += [spec.min if spec.type == "float" else int(spec.min)]
    if spec.max is not None:
        options += [spec.max if spec.type == "float" else int(spec.max)]
    return rng.choice(options)


def _set_path(data: dict[str, Any], path: str, value: Any) -> None:
    section, _, key = path.rpartition(".")
    if section:
        sub = data.get(section)
        if not isinstance(sub, dict):
            sub = data[section] = {}
        sub[key] = value
    else:
        data[key] = value


def _structural(rng: random.Random, text: str) -> str:
    try:
        data = yaml.safe_load(text) or {}
    except (yaml.YAMLError, ValueError, RecursionError):  # an earlier mutation broke the YAML: keep it broken
        return text
    if not isinstance(data, dict):
        return text
    op = rng.randrange(10)
    if op >= 7:  # keys set to values the schema accepts: the rules and the renderers get to judge them
        for _ in range(rng.randint(1, 4)):
            path = rng.choice(KEYS)
            _set_path(data, path, _plausible(rng, path))
    elif op == 0:  # a key set to a hostile value
        _set_path(data, rng.choice(KEYS), rng.choice(_values(rng)))
    elif op == 1 and data:  # a key or section deleted
        del data[rng.choice(sorted(data))]
    elif op == 2:  # a type swap: a section replaced by a scalar or a list
        key = rng.choice(sorted(data) or ["server"])
        data[key] = rng.choice([1, "x", [data.get(key)], {"nested": data.get(key)}])
    elif op == 3:  # an unknown key
        _set_path(data, rng.choice(KEYS).rsplit(".", 1)[0] + "." + rng.choice(ODD_TEXT) + "key", 1)
    elif op == 4:  # extends pointed elsewhere
        data["extends"] = rng.choice(_values(rng))
    elif op == 5:  # several keys at once
        for _ in range(rng.randint(2, 6)):
            _set_path(data, rng.choice(KEYS), rng.choice(_values(rng)))
    else:
        for _ in range(rng.randint(1, 3)):
            data.pop(rng.choice(sorted(data) or ["x"]), None)
    try:
        return yaml.safe_dump(data, allow_unicode=rng.random() < 0.5, sort_keys=rng.random() < 0.5)
    except (yaml.YAMLError, RecursionError):
        return text


def _textual(rng: random.Random, text: str) -> str:
    lines = text.splitlines()
    op = rng.randrange(8)
    i = rng.randrange(len(lines)) if lines else 0
    if op == 0 and lines:  # a line deleted
        del lines[i]
    elif op == 1 and lines:  # a line duplicated (a duplicate key, or one more list item)
        lines.insert(i, lines[i])
    elif op == 2 and len(lines) > 1:  # two lines swapped (indentation moves)
        j = rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    elif op == 3:  # odd characters inserted
        pos = rng.randrange(len(text) + 1)
        return text[:pos] + rng.choice(ODD_TEXT) * rng.randint(1, 4) + text[pos:]
    elif op == 4:  # cut short
        return text[: rng.randrange(len(text) + 1)]
    elif op == 5:  # an alias bomb, or an alias of the value that holds it
        extra = rng.choice([f"description:\n{BOMB}\n", "extra_args: &a [*a]\n", "env: &e {A: *e}\n"])
        return text + "\n" + extra
    elif op == 6:  # nesting far past the bound
        depth = rng.choice((33, 1000, 5000))
        return text + f"\n{rng.choice(KEYS).split('.')[0]}: " + "[" * depth + "]" * depth + "\n"
    else:  # a scalar replaced by a hostile YAML token
        token = rng.choice([".nan", ".inf", "-.inf", "9" * 5000, "1.0e+999", "2026-13-45", "!!binary x", "*nope"])
        if lines and ":" in lines[i]:
            lines[i] = lines[i].split(":", 1)[0] + ": " + token
    return "\n".join(lines) + "\n"


@functools.cache
def _cases(seed: int = SEED, count: int = CASES) -> list[tuple[int, str, str, tuple[str, ...]]]:
    rng = random.Random(seed)
    out = []
    for n in range(count):
        source = rng.choice(SHIPPED)
        text = source.read_text(encoding="utf-8")
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            text = (_structural if rng.random() < 0.6 else _textual)(rng, text)
        sets: tuple[str, ...] = ()
        if rng.random() < 0.2:  # the same hostile values through --set
            value = rng.choice([".nan", ".inf", "-.inf", "[" * 3000, "9" * 5000, "'" + "a" * 300 + "'", "{a: &a [*a]}"])
            sets = (f"{rng.choice(KEYS)}={value}",)
        out.append((n, source.stem, text, sets))
    return out


def _judge(path: Path, sets: tuple[str, ...]) -> None:
    """Load, check's fast rules, render every rank and the manifests: a KimiServeError is a verdict, fine."""
    try:
        profile = load_profile(str(path), sets)
        fast_validate(profile)
        plan_deployment(profile)
        dump_profile(profile)
        to_yaml(render_manifests(profile, namespace="default", image="kimi-serve:test"))
    except KimiServeError as exc:
        line = exc.one_line()
        assert "\n" not in line and len(line) < 2000, line[:300]


@pytest.mark.parametrize("chunk", range(4))
def test_mutated_shipped_profiles_never_crash(chunk: int, tmp_path: Path, cli: Any) -> None:
    for n, stem, text, sets in _cases()[chunk::4]:
        path = tmp_path / f"{stem}-fuzz{n}.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        start = time.process_time()
        try:
            _judge(path, sets)
        except Exception as exc:  # the failure names the case to replay
            raise AssertionError(f"case {n} ({stem}, sets {sets}): {type(exc).__name__}: {exc}"[:600]) from exc
        spent = time.process_time() - start
        assert spent < CPU_BOUND_S, f"case {n} ({stem}) took {spent:.2f} s of CPU"
        if (n // 4) % CLI_EVERY == 0:  # spread over the four chunks
            for extra in ((), ("--format", "k8s")):
                args = [a for s in sets for a in ("--set", s)]
                r = cli("render", "--profile", str(path), *extra, *args)
                assert r.code in (0, 2), f"case {n} ({stem}): exit {r.code}: {r.err[:400]}"
                if r.code:
                    assert len(r.err.strip().splitlines()) == 1, f"case {n}: {r.err[:400]}"
