#!/usr/bin/env python3
"""SGLang 0.5.23's own safetensors weight iterators over a checkpoint, timed per loader option (docs/coldstart.md).

What `loader:` chooses between, measured where it matters: run it on the serving host with the SGLang interpreter,
e.g. ``/opt/kimi-serve/venv/bin/python benchmarks/bench_loader_options.py /models/Kimi-K2.5 --max-shards 8``.
It runs the iterators in this one process (one "rank": no GPU, no TP slicing), so it times reading and
materialising tensors on the CPU, the part the disk and the page cache decide.

Before each cold run it drops the page cache of the shards it reads (posix_fadvise DONTNEED on those files only,
after fdatasync): that evicts them from memory. Do not run it while a server is about to start from a prewarmed
cache. ``--warm`` also times each option with the shards cached. Prints one line per option; no pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def shards(model: Path, limit: int | None) -> list[str]:
    index = model / "model.safetensors.index.json"
    if index.is_file():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        names = sorted(p.name for p in model.glob("*.safetensors"))
    return [str(model / n) for n in names][:limit]


def drop(files: list[str]) -> None:
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def run(option: str, files: list[str], threads: int, prefetch_threads: int) -> tuple[float, int]:
    """Seconds to iterate every tensor with ``option`` (touching every page), and the tensor bytes seen."""
    import torch
    from sglang.srt.model_loader import weight_utils as wu

    if option == "single":
        it = wu.safetensors_weights_iterator(files)
    elif option == "single+prefetch":
        it = wu.safetensors_weights_iterator(files, prefetch=True, prefetch_num_threads=prefetch_threads)
    elif option == "multithread":
        it = wu.buffered_multi_thread_safetensors_weights_iterator(files, max_workers=threads)
    else:  # multithread+prefetch: prod's choice
        it = wu.buffered_multi_thread_safetensors_weights_iterator(
            files, max_workers=threads, prefetch=True, prefetch_num_threads=prefetch_threads
        )
    start = time.monotonic()
    n = 0
    for _name, tensor in it:  # mmap-backed tensors are lazy: touch every page, as the copy to the GPU does
        raw = tensor.reshape(-1).view(torch.uint8)
        raw[::4096].sum()
        n += raw.numel()
    return time.monotonic() - start, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path, help="checkpoint directory (safetensors shards)")
    ap.add_argument("--max-shards", type=int, default=None, help="time only the first N shards")
    ap.add_argument("--threads", type=int, default=8, help="loader.num_threads (default 8)")
    ap.add_argument("--prefetch-threads", type=int, default=4, help="loader.prefetch_num_threads (default 4)")
    ap.add_argument("--options", default="single,single+prefetch,multithread,multithread+prefetch")
    ap.add_argument("--warm", action="store_true", help="also time each option with the shards cached")
    args = ap.parse_args()
    files = shards(args.model, args.max_shards)
    total = sum(os.path.getsize(f) for f in files)
    print(
        f"{len(files)} shard(s), {total / 1e9:.2f} GB; threads {args.threads}, prefetch threads {args.prefetch_threads}"
    )
    for option in args.options.split(","):
        runs = [("cold", True)] + ([("warm", False)] if args.warm else [])
        for label, cold in runs:
            if cold:
                drop(files)
            secs, n = run(option, files, args.threads, args.prefetch_threads)
            print(
                f"{option:22} {label}: {secs:7.2f}s  {total / secs / 1e9:6.2f} GB/s of shards  "
                f"({n / 1e9:.2f} GB of tensors)"
            )


if __name__ == "__main__":
    main()
