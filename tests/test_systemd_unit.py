"""The rendered systemd unit: golden text per shipped profile, escaping, what is rejected, the marker.

That systemd turns the escaped words back into exactly the launch argv is proven against a real systemd in
tests/systemd/; here `systemd-analyze verify` (any stderr is a failure) checks what a hostile profile renders to.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kimi_serve.check.launch import validated_launch
from kimi_serve.core.errors import KimiServeError
from kimi_serve.profile.loader import load_profile
from kimi_serve.service.marker import parse_marker
from kimi_serve.service.systemd_text import environment_line, exec_line
from kimi_serve.service.unit import UnitContext, render_unit

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "golden"
SHIPPED = sorted(p.stem for p in (REPO / "configs").glob("*.yaml"))
CTX = UnitContext(
    kimi_serve="/opt/kimi-serve/venv/bin/kimi-serve", package_root="/opt/kimi-serve/src", version="0.0.0-golden"
)
HOSTILE = "50% $HOME ${X} \"q\" 'a' back\\slash ü 中文"


def _render(name_or_path: str, ctx: UnitContext = CTX) -> str:
    profile = load_profile(name_or_path)
    return render_unit(profile, validated_launch(profile), ctx).text


@pytest.fixture(autouse=True)
def _fixed_sglang_python(monkeypatch: pytest.MonkeyPatch) -> None:
    # the simulator profile's interpreter comes from $KIMI_SERVE_SGLANG_PYTHON: pin it for stable golden text
    monkeypatch.setenv("KIMI_SERVE_SGLANG_PYTHON", "/opt/sglang/bin/python")


@pytest.mark.parametrize("name", SHIPPED)
def test_golden_unit_per_shipped_profile(name: str) -> None:
    text = _render(name)
    golden = GOLDEN / f"{name}.service"
    if os.environ.get("KIMI_SERVE_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.is_file(), f"no golden unit for {name}: run with KIMI_SERVE_UPDATE_GOLDEN=1 and review the diff"
    assert text == golden.read_text()


def test_prod_unit_shape() -> None:
    text = _render("prod")
    profile = load_profile("prod")
    launch = validated_launch(profile)
    lines = text.splitlines()
    exec_start = next(line for line in lines if line.startswith("ExecStart="))
    # nothing to escape but the double quotes of the loader's JSON (--model-loader-extra-config)
    assert exec_start == "ExecStart=" + " ".join('"' + a.replace('"', '\\"') + '"' for a in launch.argv)
    assert exec_start.startswith('ExecStart="/opt/kimi-serve/venv/bin/python" "-P" "-m" "sglang.launch_server"')
    for flag in (
        '"--tool-call-parser" "kimi_k2"',
        '"--reasoning-parser" "kimi_k2"',
        '"--config" "/etc/kimi-serve/prod-secrets.yaml"',
    ):
        assert flag in exec_start
    post = next(line for line in lines if line.startswith("ExecStartPost="))
    assert post == (
        'ExecStartPost="/opt/kimi-serve/venv/bin/kimi-serve" "verify" "--host" "0.0.0.0:30000" '
        '"--wait" "1800" "--timeout" "120" "--suite" "quick" '
        '"--api-key-file" "/etc/kimi-serve/prod-secrets.yaml"'
    )
    for setting in (
        "KillMode=mixed",
        "KillSignal=SIGTERM",
        "TimeoutStopSec=120",
        "Restart=on-failure",
        "TimeoutStartSec=2280",  # the self-test (300 + 30) + startup (1800) + verify (120) + 30
        "LimitNOFILE=1048576",
        "LimitMEMLOCK=infinity",
        "After=network-online.target",
        "StandardError=journal",
        'Environment="NCCL_P2P_LEVEL=SYS"',
        'Environment="SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1"',
        "StartLimitBurst=3",
    ):
        assert setting in lines
    assert any(line.startswith("Documentation=") for line in lines)


def test_simulator_unit_puts_kimi_serve_on_pythonpath() -> None:
    text = _render("sim")
    assert 'Environment="PYTHONPATH=/opt/kimi-serve/src"' in text
    assert 'ExecStart="/opt/sglang/bin/python" "-P" "-m" "kimi_serve.simulator"' in text


def test_escaping_follows_systemds_three_passes() -> None:
    assert exec_line(["/bin/echo", "100%"], "x") == '"/bin/echo" "100%%"'
    assert exec_line(["/bin/echo", "$HOME"], "x") == '"/bin/echo" "$$HOME"'
    assert exec_line(["/bin/echo", 'say "hi"'], "x") == r'"/bin/echo" "say \"hi\""'
    assert exec_line(["/bin/echo", "a\\nb"], "x") == r'"/bin/echo" "a\\nb"'  # not a newline after C-unescape
    assert exec_line(["/bin/echo", ";"], "x") == '"/bin/echo" ";"'  # quoted: an argument, not a separator
    # Environment= gets no $ expansion in systemd, so no $$
    assert environment_line("A", "$x 5%", "x") == '"A=$x 5%%"'


def _hostile_profile(tmp_path: Path, **overrides: str) -> Path:
    values = {"served": HOSTILE, "env": HOSTILE, "extra": ""}
    values.update(overrides)
    path = tmp_path / "hostile.yaml"
    path.write_text(
        "extends: sim\n"
        f"model:\n  served_name: {yaml_quote(values['served'])}\n"
        f"env:\n  KIMI_TEST_VALUE: {yaml_quote(values['env'])}\n" + values["extra"]
    )
    return path


def yaml_quote(value: str) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)  # JSON strings are YAML strings


def test_hostile_values_render_to_a_unit_systemd_accepts(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    text = _render(
        str(_hostile_profile(tmp_path)),
        UnitContext(kimi_serve=shutil.which("true") or "/bin/true", package_root=str(REPO)),
    )
    text = text.replace('ExecStart="/opt/sglang/bin/python"', 'ExecStart="/bin/true"')  # an executable that exists
    unit = tmp_path / "hostile-test.service"
    unit.write_text(text)
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    assert '"--served-model-name" "50%% $$HOME $${X} \\"q\\" \'a\' back\\\\slash ü 中文"' in text
    assert 'Environment="KIMI_TEST_VALUE=50%% $HOME ${X} \\"q\\" \'a\' back\\\\slash ü 中文"' in text


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ('env:\n  BAD: "tab\\there"\n', "env.BAD"),
        ('service:\n  user: "root; rm -rf /"\n', "service.user"),
        ('service:\n  limit_memlock: "lots"\n', "service.limit_memlock"),
        ('service:\n  working_directory: "/srv/x "\n', "service.working_directory"),
        ('service:\n  unit_name: "../evil"\n', "service.unit_name"),
    ],
)
def test_values_systemd_cannot_carry_are_rejected_with_their_key(tmp_path: Path, extra: str, key: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("extends: sim\n" + extra)
    with pytest.raises(KimiServeError) as err:
        _render(str(path))
    assert key in err.value.one_line()
    assert "\n" not in err.value.one_line()


def test_marker_names_profile_and_detects_hand_edits() -> None:
    text = _render("prod")
    marker = parse_marker(text)
    assert marker is not None
    assert (marker.profile, marker.patch_set, marker.endpoint, marker.version) == (
        "prod",
        "sglang-0.5.23-sm120+sglang-0.5.23-kimi",
        "0.0.0.0:30000",
        "0.0.0-golden",
    )
    assert marker.body_matches
    edited = parse_marker(text.replace("TimeoutStopSec=120", "TimeoutStopSec=5"))
    assert edited is not None and not edited.body_matches
    assert parse_marker("[Unit]\nDescription=hand written\n") is None


def engine_prefix(root: Path, nvcc: bool = True, version: str = "3.11") -> Path:
    """A stand-in engine venv as `engine install` lays it out: bin/python, pyvenv.cfg and, when the lock installs
    nvidia-cuda-nvcc, site-packages/nvidia/cu13/bin/nvcc."""
    python = root / "engine" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    (root / "engine" / "pyvenv.cfg").write_text(f"home = /usr/bin\nversion_info = {version}.9\n")
    site = root / "engine" / "lib" / f"python{version}" / "site-packages"
    (site / "nvidia" / "cu13" / "lib").mkdir(parents=True)
    if nvcc:
        tool = site / "nvidia" / "cu13" / "bin" / "nvcc"
        tool.parent.mkdir()
        tool.write_text("#!/bin/sh\n")
        tool.chmod(0o755)
    return python


def _env_lines(text: str) -> dict[str, str]:
    pairs = [line[len('Environment="') : -1].split("=", 1) for line in text.splitlines() if line.startswith("Environ")]
    return {k: v for k, v in pairs}


@pytest.mark.parametrize("version", ["3.11", "3.12"])
def test_unit_points_cuda_home_and_path_at_the_engines_own_nvcc(tmp_path: Path, write_profile, version: str) -> None:  # type: ignore[no-untyped-def]
    from kimi_serve.check.launch import server_env
    from kimi_serve.sglang.toolchain import SYSTEMD_PATH, find_nvcc

    python = engine_prefix(tmp_path, version=version)
    profile = load_profile(str(write_profile(f"extends: prod\npython: {python}\n")))
    launch = validated_launch(profile)
    env = _env_lines(render_unit(profile, launch, CTX).text)
    home = f"{tmp_path}/engine/lib/python{version}/site-packages/nvidia/cu13"
    assert env["CUDA_HOME"] == home
    assert env["PATH"] == f"{home}/bin:{SYSTEMD_PATH}"
    assert find_nvcc(env) == (f"{home}/bin/nvcc", "CUDA_HOME")  # how SGLang's load_jit and FlashInfer look
    # `up` starts the server with the same toolchain (check/launch.py server_env), its own PATH after it
    up_env = server_env(launch)
    assert up_env["CUDA_HOME"] == home and up_env["PATH"].startswith(f"{home}/bin:")
    assert "" not in up_env["PATH"].split(":")  # no empty entry (the working directory)


def test_unit_sets_no_cuda_home_without_the_locks_nvcc_and_keeps_the_profiles(tmp_path: Path, write_profile) -> None:  # type: ignore[no-untyped-def]
    bare = engine_prefix(tmp_path / "a", nvcc=False)
    profile = load_profile(str(write_profile(f"extends: prod\npython: {bare}\n", name="bare")))
    env = _env_lines(render_unit(profile, validated_launch(profile), CTX).text)
    assert "CUDA_HOME" not in env and "PATH" not in env
    own = engine_prefix(tmp_path / "b")
    text = f"extends: prod\npython: {own}\nenv: {{CUDA_HOME: /usr/local/cuda-13.0}}\n"
    profile = load_profile(str(write_profile(text, name="own")))
    env = _env_lines(render_unit(profile, validated_launch(profile), CTX).text)
    assert env["CUDA_HOME"] == "/usr/local/cuda-13.0" and "PATH" not in env  # the profile's toolchain wins


def test_every_jit_cache_lives_in_the_units_cache_directory() -> None:
    env = _env_lines(_render("prod"))
    for name in (
        "SGLANG_JIT_CACHE_DIR",  # does not follow SGLANG_CACHE_DIR
        "SGLANG_CACHE_DIR",
        "FLASHINFER_WORKSPACE_BASE",  # FlashInfer's JIT and autotuner (the PCIe-IPC tuning) under it
        "TRITON_CACHE_DIR",
        "TVM_FFI_CACHE_DIR",
        "TILELANG_CACHE_DIR",
        "TORCHINDUCTOR_CACHE_DIR",
        "CUDA_CACHE_PATH",
        "XDG_CACHE_HOME",
    ):
        assert env[name] == "/var/cache/kimi-serve" or env[name].startswith("/var/cache/kimi-serve/"), name
    assert "CacheDirectory=kimi-serve" in _render("prod").splitlines()


def test_gpu_units_make_nvidia_uvm_before_the_start_and_allow_both_frontend_spellings() -> None:
    lines = _render("prod").splitlines()
    assert 'ExecStartPre=-+"/usr/bin/nvidia-modprobe" "-u" "-c=0"' in lines
    assert lines.index('ExecStartPre=-+"/usr/bin/nvidia-modprobe" "-u" "-c=0"') < next(
        i for i, line in enumerate(lines) if line.startswith("ExecStart=")
    )
    for group in ("nvidia-frontend", "nvidia", "nvidia-uvm", "nvidia-caps"):
        assert f"DeviceAllow=char-{group} rw" in lines
    assert not any(line.startswith("ExecStartPre=") for line in _render("sim").splitlines())  # no GPU, no step


def test_only_the_gpu_servers_of_a_replicated_profile_make_nvidia_uvm() -> None:
    from kimi_serve.profile.deployment import deployment_of
    from kimi_serve.service.member_units import render_members

    profile = load_profile("prod-dp2")
    members = render_members(
        deployment_of(profile, validated_launch(profile), pythonpath=CTX.package_root), CTX, "sglang-kimi"
    )
    steps = {m.role: any(line.startswith("ExecStartPre=") for line in u.text.splitlines()) for m, u in members.items()}
    assert steps.pop("router") is False  # the router needs no GPU
    assert all(steps.values()), steps  # a replica on this host does (prod-dp2's replicas: its own single render)
    assert _render("prod-dp2").count('ExecStartPre=-+"/usr/bin/nvidia-modprobe"') == 1


def test_the_cache_table_in_docs_names_every_variable_the_unit_sets() -> None:
    from kimi_serve.sglang.toolchain import CACHE_ENV

    doc = (REPO / "docs" / "systemd.md").read_text()
    for name, sub in CACHE_ENV:
        assert f"| `{name}` | `{sub}` |" in doc or (not sub and f"| `{name}` | (the root) |" in doc), name
