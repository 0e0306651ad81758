#!/usr/bin/env python3
"""Recompute the hashes in a patch set's manifest.json after editing its patches.

Usage: scripts/make-patch-manifest.py patches/sglang-0.5.23 [WHEEL]   (WHEEL default: the cached pinned wheel)

Takes the files each patch touches from the wheel, runs the patches in order with GNU patch (as `apply` does), and
writes every patch's sha256 and each file's sha256 before/after (per patch and for the whole set) into manifest.json.
Name, target, features and each patch's feature/gates are kept as written; a patch not yet listed must be added to
"patches" by hand first (file, feature, gates).
"""

from __future__ import annotations

import json
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kimi_serve.patches import MANIFEST, cached_wheel
from kimi_serve.patches.files import patch_tool, run_patch, sha256_bytes, sha256_file, stage


def touched_files(patch: Path, strip: int) -> list[str]:
    return [
        line[4:].split("\t")[0].strip().split("/", strip)[-1]
        for line in patch.read_text().splitlines()
        if line.startswith("+++ ")
    ]


def main(folder: Path, wheel: Path | None) -> int:
    manifest = json.loads((folder / MANIFEST).read_text())
    strip = int(manifest.get("strip", 1))
    wheel = wheel or cached_wheel(manifest["target"]["version"])
    if wheel is None:
        print("no cached wheel: run scripts/fetch-sglang-wheel.sh", file=sys.stderr)
        return 5
    entries = manifest["patches"]
    touched = {e["file"]: touched_files(folder / e["file"], strip) for e in entries}
    with zipfile.ZipFile(wheel) as zf:
        current = {rel: zf.read(rel) for files in touched.values() for rel in files}
    originals = {rel: sha256_bytes(data) for rel, data in current.items()}
    tool = patch_tool()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        stage(current, root)
        for entry in entries:
            before = {rel: sha256_file(root / rel) for rel in touched[entry["file"]]}
            problem = run_patch(tool, folder / entry["file"], root, strip=strip)
            if problem:
                print(f"{entry['file']}: {problem}", file=sys.stderr)
                return 1
            entry["sha256"] = sha256_file(folder / entry["file"])
            entry["files"] = {rel: {"before": before[rel], "after": sha256_file(root / rel)} for rel in before}
        manifest["files"] = {
            rel: {"before": originals[rel], "after": sha256_file(root / rel)} for rel in sorted(originals)
        }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"{folder / MANIFEST}: {len(entries)} patches, {len(originals)} files, from {wheel.name}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        sys.exit(2)
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) == 3 else None))
