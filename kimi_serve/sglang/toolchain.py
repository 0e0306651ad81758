"""The CUDA an engine is built for and the toolchain its JIT compilers find, read from files without importing
anything of the engine.

- **The CUDA of a lock or an install**: the ``nvidia-cuda-runtime`` pin (``13.0.96`` -> CUDA 13.0), else torch's
  local version (``+cu130``), else the ``-cuNN`` suffix of the ``nvidia-*`` packages. An installed engine is read
  from its ``*.dist-info`` folders (what the lock installed); without one, from the shipped GPU lock.
- **The driver floor**: :data:`DRIVER_FLOOR`, the one table of CUDA release -> oldest driver branch that runs it.
- **The JIT and kernel caches**: :data:`CACHE_ENV`, the one table of the variables that move each cache (SGLang's
  JIT, FlashInfer, Triton, tvm-ffi, TileLang, CUDA's, inductor's) under one folder: the unit's CacheDirectory.
- **nvcc and the host compiler**: SGLang's JIT (``load_jit``, tvm-ffi) and FlashInfer look for nvcc in
  ``$CUDA_HOME/bin``, then on ``PATH`` (``which nvcc``), then in ``/usr/local/cuda``; nvcc and tvm-ffi call the host
  C++ compiler ``$CXX``, else ``c++``/``g++`` on ``PATH``. :func:`toolchain_env` points ``CUDA_HOME`` and ``PATH``
  at the engine's own nvcc (``site-packages/nvidia/cuNN``) when the lock installed one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

# (CUDA major, minor) -> the oldest driver branch that runs it (NVIDIA's CUDA toolkit release notes, table 3).
DRIVER_FLOOR: tuple[tuple[tuple[int, int], int], ...] = (
    ((12, 0), 525),
    ((12, 8), 570),  # the first CUDA with Blackwell (SM120)
    ((13, 0), 580),
)
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"  # a service's PATH when the unit sets none
DEFAULT_CUDA = "/usr/local/cuda"
SHIPPED_GPU_LOCK = Path(__file__).resolve().parent.parent / "engine" / "lockfiles" / "gpu.txt"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", re.MULTILINE)
_DIST = re.compile(r"^(.+)-([^-]+)\.dist-info$")
_CU = re.compile(r"[-+]cu(\d{2,3})$")

Cuda = tuple[int, int]

# (variable, path under the cache root): where each JIT or download cache goes instead of $HOME.
CACHE_ENV = (
    ("XDG_CACHE_HOME", ""),  # the fallback of most of the below, and pip/torch hub
    ("TRITON_CACHE_DIR", "triton"),  # Triton kernels (triton/knobs.py: TRITON_CACHE_DIR, else ~/.triton/cache)
    # FlashInfer JIT and its autotuner's results (the PCIe-IPC all-reduce's tuning among them, which has no variable
    # of its own): $FLASHINFER_WORKSPACE_BASE/.cache/flashinfer
    ("FLASHINFER_WORKSPACE_BASE", "flashinfer"),
    ("SGLANG_CACHE_DIR", "sglang"),  # SGLang's own (environ.py: SGLANG_CACHE_DIR, else ~/.cache/sglang)
    # SGLang's JIT kernels (load_jit: Marlin INT4 MoE on SM120): does not follow SGLANG_CACHE_DIR (~/.cache/sglang/jit)
    ("SGLANG_JIT_CACHE_DIR", "sglang/jit"),
    ("TVM_FFI_CACHE_DIR", "tvm-ffi"),  # tvm-ffi's C++/CUDA builds (tvm_ffi/cpp/extension.py, else ~/.cache/tvm-ffi)
    ("TILELANG_CACHE_DIR", "tilelang"),  # TileLang kernels (else its own folder under $HOME)
    ("TORCHINDUCTOR_CACHE_DIR", "torchinductor"),  # torch.compile / inductor
    ("CUDA_CACHE_PATH", "nv"),  # the CUDA driver's PTX JIT cache (else ~/.nv/ComputeCache)
    ("HF_HOME", "huggingface"),  # trust_remote_code copies the model's Python here (modules/)
)


def cache_env(root: str) -> dict[str, str]:
    """Every JIT and kernel cache of :data:`CACHE_ENV` under the folder ``root`` (the unit's CacheDirectory, or the
    folder ``engine install`` warms)."""
    return {name: f"{root.rstrip('/')}/{sub}".rstrip("/") for name, sub in CACHE_ENV}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_pins(text: str) -> dict[str, str]:
    """``name -> version`` of a requirements-style lock's ``name==version`` lines."""
    return {_norm(m.group(1)): m.group(2) for m in _PIN.finditer(text)}


def installed_pins(site: Path) -> dict[str, str]:
    """``name -> version`` of the distributions installed in ``site`` (its ``*.dist-info`` folders)."""
    try:
        names = [p.name for p in site.iterdir()]
    except OSError:
        return {}
    return {_norm(m.group(1)): m.group(2) for m in map(_DIST.match, names) if m}


def cuda_of(pins: Mapping[str, str]) -> Cuda | None:
    """The CUDA release ``pins`` (a lock's, or an install's) are built for; None: no CUDA package in them."""
    runtime = pins.get("nvidia-cuda-runtime") or pins.get("nvidia-cuda-runtime-cu12")
    if runtime:
        major, _, rest = runtime.partition(".")
        minor = rest.partition(".")[0]
        if major.isdigit() and minor.isdigit():
            return int(major), int(minor)
    local = _CU.search(pins.get("torch", ""))
    if local:
        digits = local.group(1)
        return int(digits[:2]), int(digits[2:] or 0)
    majors = sorted({int(m.group(1)) for n in pins if n.startswith("nvidia-") and (m := _CU.search(n))})
    return (majors[-1], 0) if majors else None


def shipped_lock_cuda() -> Cuda | None:
    """The CUDA of the GPU lock kimi-serve ships (``engine install --lock gpu``)."""
    try:
        return cuda_of(lock_pins(SHIPPED_GPU_LOCK.read_text(encoding="utf-8")))
    except OSError:
        return None


def min_driver(cuda: Cuda) -> int:
    """The oldest driver branch that runs ``cuda`` (:data:`DRIVER_FLOOR`)."""
    return next((branch for release, branch in reversed(DRIVER_FLOOR) if cuda >= release), DRIVER_FLOOR[0][1])


def _site_packages(prefix: Path) -> list[Path]:
    """The engine prefix's site-packages (``prefix`` as seen from here): the one of the venv's Python version
    (pyvenv.cfg) first."""
    version = ""
    try:
        for line in (prefix / "pyvenv.cfg").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition("=")
            if key.strip() in ("version_info", "version") and value.strip():
                version = ".".join(value.strip().split(".")[:2])
                break
    except OSError:
        pass
    found = [prefix / "lib" / f"python{version}" / "site-packages"] if version else []
    return found + sorted((prefix / "lib").glob("python3.*/site-packages"))


def engine_cuda_home(python: str, root: Path = Path("/")) -> Path | None:
    """The CUDA toolkit the engine venv of ``python`` (PREFIX/bin/python) installed (``nvidia-cuda-nvcc``:
    ``site-packages/nvidia/cuNN`` with ``bin/nvcc``), as a path on the system ``root``; None when it has none."""
    prefix = root / str(Path(python).parent.parent).lstrip("/")
    for site in _site_packages(prefix):
        homes = sorted(site.glob("nvidia/cu[0-9]*/bin/nvcc"), reverse=True)  # the newest CUDA first
        if homes:
            return Path("/") / homes[0].parent.parent.relative_to(root)
    return None


def toolchain_env(
    python: str, env: Mapping[str, str], base_path: str = SYSTEMD_PATH, root: Path = Path("/")
) -> dict[str, str]:
    """The variables that make the engine's own nvcc the one found: ``CUDA_HOME`` and ``PATH`` (``base_path`` when
    ``env`` has no PATH) with its ``bin`` first; {} when the engine carries no nvcc or ``env`` sets CUDA_HOME."""
    home = engine_cuda_home(python, root)
    if home is None or env.get("CUDA_HOME"):
        return {}
    path = [part for part in (env.get("PATH") or base_path).split(":") if part]  # an empty entry is the cwd
    return {"CUDA_HOME": str(home), "PATH": ":".join(dict.fromkeys([str(home / "bin"), *path]))}


def _on_path(name: str, path: str, root: Path) -> str | None:
    for folder in path.split(":"):
        if folder.startswith("/") and _executable(root, f"{folder.rstrip('/')}/{name}"):
            return f"{folder.rstrip('/')}/{name}"
    return None


def _executable(root: Path, path: str) -> bool:
    import os

    here = root / path.lstrip("/")
    return here.is_file() and os.access(here, os.X_OK)


def find_nvcc(env: Mapping[str, str], root: Path = Path("/")) -> tuple[str | None, str]:
    """The nvcc SGLang and FlashInfer would run under ``env`` (``root``: the system it runs on), and how it was
    found (``CUDA_HOME``, ``PATH``, /usr/local/cuda); (None, what was searched) when there is none."""
    home = env.get("CUDA_HOME")
    if home and _executable(root, f"{home.rstrip('/')}/bin/nvcc"):
        return f"{home.rstrip('/')}/bin/nvcc", "CUDA_HOME"
    found = _on_path("nvcc", env.get("PATH", SYSTEMD_PATH), root)
    if found:
        return found, "PATH"
    if _executable(root, f"{DEFAULT_CUDA}/bin/nvcc"):
        return f"{DEFAULT_CUDA}/bin/nvcc", DEFAULT_CUDA
    searched = (f"CUDA_HOME={home}, " if home else "no CUDA_HOME, ") + f"PATH, {DEFAULT_CUDA}"
    return None, searched


def find_cxx(env: Mapping[str, str], root: Path = Path("/")) -> str | None:
    """The host C++ compiler nvcc and tvm-ffi would call under ``env``: ``$CXX``, else ``c++``/``g++`` on PATH."""
    path = env.get("PATH", SYSTEMD_PATH)
    cxx = env.get("CXX")
    if cxx:
        return cxx if cxx.startswith("/") and _executable(root, cxx) else _on_path(cxx, path, root)
    return _on_path("c++", path, root) or _on_path("g++", path, root)
