"""The simulator's draft: prod's draft class (``Eagle3DeepseekV2ForCausalLM``, MLA) as SGLang's start-up resolves it.

The stand-in draft is shaped as prod's kimi-k2.5-eagle3-mla and as the stand-in target; SGLang's own draft-mode
ModelConfig, aux-hidden-state resolution and model registry resolve its class; a draft SGLang would refuse stops the
simulator with one line (exit 2)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from kimi_serve.check.launch import launch_for
from kimi_serve.core.proc import python_argv
from kimi_serve.core.resources import package_root
from kimi_serve.core.settings import process_environ, with_pythonpath
from kimi_serve.profile.loader import load_profile
from kimi_serve.simulator.draft import MLA_FIELDS, PROD_DRAFT_CLASS
from kimi_serve.simulator.launcher import with_flag
from kimi_serve.simulator.stand_in import STANDIN_DRAFT, STANDIN_MODEL

DRAFT = json.loads((STANDIN_DRAFT / "config.json").read_text())
TARGET = json.loads((STANDIN_MODEL / "config.json").read_text())["text_config"]


def test_the_stand_in_draft_is_prods_mla_draft_and_fits_the_stand_in_target() -> None:
    assert DRAFT["architectures"] == [PROD_DRAFT_CLASS] == ["Eagle3DeepseekV2ForCausalLM"]
    assert DRAFT["num_hidden_layers"] == 1  # the class refuses any other count
    # one layer of the target's own multi-latent attention: the draft KV cache shares the target's MLA layout
    for field in (*MLA_FIELDS, "num_attention_heads", "hidden_size", "vocab_size", "rope_theta", "rope_scaling"):
        assert DRAFT[field] == TARGET[field], field
    assert DRAFT["target_hidden_size"] == TARGET["hidden_size"]
    layers = DRAFT["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert len(layers) == 3 and all(0 <= i < TARGET["num_hidden_layers"] for i in layers)


PROBE = r"""
import inspect, json, re, sys
from kimi_serve.core.errors import KimiServeError
from kimi_serve.simulator.args import resolve
from kimi_serve.simulator.draft import registered_class

cases = json.loads(sys.stdin.read())
drafts = {}
for name, argv in cases.items():
    try:
        sim = resolve(argv)
    except KimiServeError as exc:
        drafts[name] = {"refused": exc.one_line(), "code": int(exc.exit_code)}
        continue
    d = sim.draft
    drafts[name] = {"class": d.architecture, "module": d.module, "attention": d.attention, "shape": dict(d.shape),
                    "layers": d.layers, "aux": d.aux_layer_ids, "tp": d.tp_execution, "line": d.describe(),
                    "notes": sim.notes}
# SGLang's registry as its loader asks it (every model module imported): the same classes, none for an unknown name
from sglang.srt.models.registry import ModelRegistry
registry = {}
for arch in ("Eagle3DeepseekV2ForCausalLM", "LlamaForCausalLMEagle3", "Eagle3FooForCausalLM"):
    mine, theirs = registered_class(arch), ModelRegistry.models.get(arch)
    registry[arch] = {"same": bool(mine) and mine[0] is theirs, "registered": theirs is not None, "found": bool(mine)}
import sglang.srt.models.kimi_k25_eagle3 as mla
reads = sorted(set(re.findall(r"\bconfig\.(\w+)", inspect.getsource(mla))))
print(json.dumps({"drafts": drafts, "registry": registry, "reads": reads}))
"""


def _write(directory: Path, config: dict[str, object]) -> str:
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config))
    return str(directory)


def test_sglang_resolves_prods_draft_class_and_refuses_what_its_start_would(sglang_python: str, tmp_path: Path) -> None:
    args = list(launch_for(load_profile("prod")).server_args)
    at = args.index("--config")
    del args[at : at + 2]  # no API-key file here: not what this test is about
    llama = {  # an EAGLE-3 draft of the other kind SGLang ships (Llama attention): still resolved, as MHA
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "num_hidden_layers": 1,
        "vocab_size": 163840,
        "draft_vocab_size": 32000,
        "max_position_embeddings": 262144,
        "rms_norm_eps": 1e-05,
        "rope_theta": 50000.0,
    }
    drafts = {
        "prod": "/models/kimi-k2.5-eagle3-mla",  # absent here: the stand-in
        "copy": _write(tmp_path / "copy", DRAFT),  # the same config in a real directory: read as it is
        "llama": _write(tmp_path / "llama", llama),
        "unknown": _write(tmp_path / "unknown", {**DRAFT, "architectures": ["Eagle3FooForCausalLM"]}),
        "none": _write(tmp_path / "none", {**DRAFT, "architectures": []}),
        # prod's class over a Llama-shaped config: no MLA fields for SGLang's ModelConfig to read
        "no-mla": _write(tmp_path / "no-mla", {**llama, "architectures": ["Eagle3DeepseekV2ForCausalLM"]}),
    }
    cases = {name: with_flag(args, "--speculative-draft-model-path", path) for name, path in drafts.items()}
    done = subprocess.run(
        [*python_argv(sglang_python, "-c", PROBE)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=600,
        env=with_pythonpath(process_environ(), package_root()),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    got = result["drafts"]

    for name in ("prod", "copy"):
        mla = got[name]
        assert mla["class"] == "Eagle3DeepseekV2ForCausalLM", mla
        assert mla["module"] == "sglang.srt.models.kimi_k25_eagle3"
        assert mla["attention"] == "MLA" and mla["layers"] == 1 and mla["tp"] == "single_group"
        assert mla["shape"] == {f: DRAFT[f] for f in MLA_FIELDS}  # what SGLang's ModelConfig derived, per field
        assert mla["aux"] == DRAFT["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert any("stand-in config-only EAGLE-3 MLA draft" in n for n in got["prod"]["notes"])
    assert not any("draft" in n for n in got["copy"]["notes"])  # a real directory is not substituted
    assert got["llama"]["class"] == "LlamaForCausalLMEagle3" and got["llama"]["attention"] == "MHA", got["llama"]

    unknown = got["unknown"]
    assert unknown["code"] == 2, unknown
    assert unknown["refused"].startswith(f"{tmp_path / 'unknown' / 'config.json'}: architectures: ")
    assert "SGLang 0.5.23 has no model class Eagle3FooForCausalLM" in unknown["refused"]
    assert "(fix: name the draft's class in architectures (Eagle3DeepseekV2ForCausalLM" in unknown["refused"]
    assert got["none"]["code"] == 2 and "names no architecture" in got["none"]["refused"], got["none"]
    no_mla = got["no-mla"]
    assert no_mla["code"] == 2, no_mla
    assert no_mla["refused"].startswith(
        f"{tmp_path / 'no-mla' / 'config.json'}: SGLang 0.5.23 cannot read the draft model's config: AttributeError: "
    ), no_mla
    assert "kv_lora_rank" in no_mla["refused"] and "(fix: " in no_mla["refused"], no_mla

    # the modules-that-name-it lookup finds exactly the class SGLang's full registry holds, and nothing it lacks
    assert result["registry"] == {
        "Eagle3DeepseekV2ForCausalLM": {"same": True, "registered": True, "found": True},
        "LlamaForCausalLMEagle3": {"same": True, "registered": True, "found": True},
        "Eagle3FooForCausalLM": {"same": False, "registered": False, "found": False},
    }
    # every config attribute the MLA class reads is in the stand-in (rope_parameters: only where hasattr says so)
    assert set(result["reads"]) - {"rope_parameters"} <= set(DRAFT), result["reads"]
