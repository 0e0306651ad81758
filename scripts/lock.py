#!/usr/bin/env python3
"""Regenerate the committed locks (gpu, cpu: kimi_serve/engine/lockfiles/; dev: requirements/dev.txt) with uv.

Usage: scripts/lock.py [--check | --resolvable] [NAME ...]      (default: every lock)
  --check       resolve into a temp dir and compare with the committed locks; exit 1 on any difference (needs PyPI).
                A drift report for maintainers: the package index can serve, later, versions it did not serve when
                the lock was made, with upload times before the cut-off, so this can change without any input
                changing.
  --resolvable  resolve each lock's inputs constrained to the lock's own pins; exit 1 unless that gives exactly the
                locked versions and hashes: every pin still exists on the index and the set still satisfies the
                inputs (needs PyPI; what the test suite checks).
uv comes from $UV, else PATH, else .venv/bin/uv (requirements/dev.txt pins it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kimi_serve.engine import locks  # noqa: E402


def find_uv() -> str:
    for cand in (os.environ.get("UV"), shutil.which("uv"), str(REPO / ".venv" / "bin" / "uv")):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return cand
    sys.exit("lock.py: uv not found (fix: .venv/bin/pip install -r requirements/dev.txt, or set UV=PATH)")


def resolve(spec: locks.LockSpec, uv: str, out_dir: Path, constrained: bool = False) -> str:
    raw = out_dir / f"{spec.name}.raw.txt"
    cmd = spec.command(uv, raw, REPO) + (["--constraint", str(spec.target)] if constrained else [])
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"lock.py: resolving {spec.name} failed:\n{done.stderr.strip()}")
    return locks.header(spec) + raw.read_text(encoding="utf-8")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--resolvable", action="store_true")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    all_specs = locks.specs(REPO)
    names = args.names or list(all_specs)
    uv = find_uv()
    rc = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            spec = all_specs[name]
            rel = spec.target.relative_to(REPO)
            if args.resolvable:
                if not spec.target.exists():
                    print(f"{rel}: missing (run scripts/lock.py {name})")
                    rc = 1
                    continue
                got = locks.parse(resolve(spec, uv, Path(tmp), constrained=True), name=name).pins
                want = locks.parse(spec.target.read_text(encoding="utf-8"), name=name).pins
                diff = sorted(set(got.items()) ^ set(want.items()), key=str)
                if diff:
                    rc = 1
                    shown = ", ".join(f"{p.name}=={p.version}" for _, p in diff[:10])
                    print(f"{rel}: NOT RESOLVABLE as locked ({len(diff)} pins differ: {shown})")
                else:
                    print(f"{rel}: resolvable as locked ({len(want)} packages)")
                continue
            text = resolve(spec, uv, Path(tmp))
            new = locks.parse(text, name=name)
            if args.check:
                old_text = spec.target.read_text(encoding="utf-8") if spec.target.exists() else ""
                old = locks.parse(old_text, name=name)
                if old_text == text:
                    print(f"{rel}: up to date ({len(new.pins)} packages)")
                    continue
                rc = 1
                diff = sorted(set(new.pins.items()) ^ set(old.pins.items()), key=str)
                print(
                    f"{rel}: DRIFT ({len(diff)} pins differ: "
                    f"{', '.join(sorted({p.name for _, p in diff})[:10])}; header or text otherwise)"
                )
            else:
                spec.target.parent.mkdir(parents=True, exist_ok=True)
                spec.target.write_text(text, encoding="utf-8")
                print(f"{rel}: {len(new.pins)} packages, input-sha256 {new.input_sha256[:12]}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
