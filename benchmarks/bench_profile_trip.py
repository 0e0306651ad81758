#!/usr/bin/env python3
"""How far one profile travels through kimi-serve (docs/architecture.md, "One profile per command").

Runs one `install-service --profile P --root SCRATCH` in this process (a real install into a scratch root: the unit
rendered, systemd-analyze verify, the files written; no systemd asked) under ``sys.setprofile`` and records, for
every call into kimi-serve's own code, whether the loaded profile (a ``Profile``, or one of its typed sections) is
among the function's arguments or locals. Prints the modules the profile enters, in first-entry order, how many
times the trip re-enters a module it had left ("climbs back"), and how many times the profile is loaded.

Usage: benchmarks/bench_profile_trip.py [--profile sim] [--set K=V ...] [--list]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


COMMANDS = {
    "install-service": ["install-service"],
    "up": ["up", "--dry-run"],
    "render-k8s": ["render", "--format", "k8s"],
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="sim")
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument(
        "--command",
        choices=sorted(COMMANDS),
        default="install-service",
        help="the command traced: install-service (into a scratch root), up --dry-run, render --format k8s",
    )
    ap.add_argument("--list", action="store_true", help="print the modules in the order the profile enters them")
    ap.add_argument("--trip", action="store_true", help="print the whole trip, one line per module entered")
    args = ap.parse_args()

    from kimi_serve import cli
    from kimi_serve.profile import loader

    section_types: tuple[type, ...] = ()
    try:
        from kimi_serve.profile import sections

        own = sections.__name__
        section_types = tuple(v for v in vars(sections).values() if isinstance(v, type) and v.__module__ == own)
    except ImportError:
        pass
    profile_types = (loader.Profile, *section_types)
    package = str(REPO / "kimi_serve")
    trip: list[str] = []  # modules, in call order, collapsed runs
    loads = 0
    real_load = loader.load_profile

    def counting_load(*a: Any, **k: Any) -> Any:
        nonlocal loads
        loads += 1
        return real_load(*a, **k)

    loader.load_profile = counting_load  # type: ignore[assignment]
    for mod in list(sys.modules.values()):  # the modules that imported it by name already
        if getattr(mod, "load_profile", None) is real_load:
            mod.load_profile = counting_load  # type: ignore[attr-defined]

    def hook(frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call" or not frame.f_code.co_filename.startswith(package):
            return
        if any(isinstance(v, profile_types) for v in frame.f_locals.values()):
            rel = Path(frame.f_code.co_filename).relative_to(REPO).with_suffix("").as_posix().replace("/", ".")
            if not trip or trip[-1] != rel:
                trip.append(rel)

    with tempfile.TemporaryDirectory(prefix="kimi-serve-trip-") as root:
        os.environ.setdefault("KIMI_SERVE_API_KEY", "sk-trip-benchmark")
        os.environ["KIMI_SERVE_STATE_DIR"] = os.path.join(root, "state")  # its locks and records: not the host's
        argv = [*COMMANDS[args.command], "--profile", args.profile, *(x for s in args.sets for x in ("--set", s))]
        if args.command == "install-service":
            argv += ["--root", root, "--set", "service.user=root"]  # no account to create in the scratch root
        sys.setprofile(hook)
        try:
            code = cli.main(argv)
        finally:
            sys.setprofile(None)
    seen: list[str] = []
    climbs = accessors = 0
    for mod in trip:
        if mod in seen:
            climbs += 1
            accessors += mod == loader.__name__  # the profile's own methods (where, ref): reading the value
        else:
            seen.append(mod)
    shown = " ".join(COMMANDS[args.command]) + (" --root SCRATCH" if args.command == "install-service" else "")
    print(f"{shown} --profile {args.profile}: exit {code}")
    print(f"  profile loads: {loads}")
    print(f"  modules the profile enters: {len(seen)}")
    print(f"  re-entries of a module it had left (climbs back): {climbs}")
    print(f"    of which into the profile's own accessors ({loader.__name__}): {accessors}")
    if args.list:
        for mod in seen:
            print(f"    {mod}")
    if args.trip:
        for mod in trip:
            print(f"    {mod}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
