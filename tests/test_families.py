"""The Kimi family as data (docs/families.md): each shipped family profile passes; check refuses a contradiction with
the file, key and fix (exit 2) before anything starts; Kimi-K3 is refused with its size against the GPUs' memory."""

from __future__ import annotations

import json
import shutil

import pytest

from kimi_serve.check.launch import fast_validate
from kimi_serve.core import family as fam
from kimi_serve.core.findings import failed
from kimi_serve.profile.launch import server_args_of
from kimi_serve.profile.loader import load_profile
from kimi_serve.simulator.stand_in import STANDIN_MODEL
from tests.test_profile import assert_one_line_error


@pytest.fixture(autouse=True)
def _fast_layers_only(monkeypatch):
    monkeypatch.delenv("KIMI_SERVE_SGLANG_PYTHON", raising=False)


@pytest.mark.parametrize("name, title", [("prod", "Kimi-K2.5"), ("prod-k26", "Kimi-K2.6"), ("prod-k27-code", "K2.7")])
def test_shipped_family_profiles_pass_the_rules(name, title):
    profile = load_profile(name)
    _, findings = fast_validate(profile)
    assert not failed(findings)
    assert any(f.code == "model.family" and title in f.message for f in findings)


def test_family_switches_render_only_where_set():
    assert not [a for a in server_args_of(load_profile("prod")) if "template-kwargs" in a or "sampling-params" in a]
    k26 = server_args_of(load_profile("prod-k26"))
    assert k26[k26.index("--default-chat-template-kwargs") + 1] == '{"preserve_thinking":false}'
    k27 = server_args_of(load_profile("prod-k27-code"))
    assert json.loads(k27[k27.index("--preferred-sampling-params") + 1]) == {"temperature": 1.0, "top_p": 0.95}


BAD = [
    ("prod-k27-code", "model:\n  thinking: false\n", ["model.thinking", "only thinks", "remove model.thinking"]),
    (
        "prod-k27-code",
        "model:\n  temperature: 0.6\n",
        ["model.temperature", "only temperature 1", "set model.temperature: 1"],
    ),
    ("prod-k27-code", "model:\n  top_p: 1.0\n", ["model.top_p", "0.95"]),
    ("prod-k27-code", "model:\n  preserve_thinking: false\n", ["model.preserve_thinking", "fixes preserve_thinking"]),
    (
        "prod-k27-code",
        "speculative:\n  draft_model_path: /models/kimi-k2.5-eagle3-mla\n",
        ["speculative.draft_model_path", "made for Kimi-K2.5", "kimi-k2.7-code", "kimi-k2.6-eagle3.1-mla"],
    ),
    ("prod", "model:\n  preserve_thinking: true\n", ["model.preserve_thinking", "no preserve_thinking switch"]),
    ("prod-k26", "model:\n  context_length: 300000\n", ["model.context_length", "262,144"]),
    ("prod-k26", "extra_args: ['--default-chat-template-kwargs', '{}']\n", ["extra_args", "model.thinking"]),
    (
        "prod",
        "model:\n  family: kimi-k3\n",
        ["model.family", "1.56 TB (1,560,000,000,000 bytes)", "8 x 96 GB = 768 GB", "kimi_k3"],
    ),
]


@pytest.mark.parametrize("base, body, needles", BAD, ids=[f"{b}:{x.splitlines()[-1].strip()}" for b, x, _ in BAD])
def test_family_contradiction_refused(write_profile, cli, base, body, needles):
    path = write_profile(f"extends: {base}\n" + body)
    assert_one_line_error(cli("render", "--profile", str(path)), *needles)


def _checkpoint(tmp_path, config_edit=None, generation=None):
    model = tmp_path / "ckpt"
    shutil.copytree(STANDIN_MODEL, model)
    if config_edit:
        data = json.loads((model / "config.json").read_text())
        config_edit(data)
        (model / "config.json").write_text(json.dumps(data))
    if generation is not None:
        (model / "generation_config.json").write_text(json.dumps({"eos_token_id": generation}))
    return model


def test_checkpoint_stop_ids_must_be_the_familys(write_profile, cli, tmp_path):
    k25 = _checkpoint(tmp_path)  # config.json [EOS] 163585 + generation_config <|im_end|> 163586
    res = cli("check", "--offline", "--profile", str(write_profile(f"extends: prod-k26\nmodel:\n  path: {k25}\n")))
    assert res.code == 2 and "stops on 163585 too" in res.out and "set model.family: kimi-k2.5" in res.out
    assert "config.json" in res.out and "model.family" in res.out
    ok = cli("check", "--offline", "--profile", str(write_profile(f"extends: prod\nmodel:\n  path: {k25}\n")))
    assert ok.code == 0, ok.out
    # a K2.6 checkpoint (eos moved to 163586) under a K2.5 profile: K2.5's [EOS] 163585 is missing
    k26 = _checkpoint(tmp_path / "b", lambda c: c["text_config"].update(eos_token_id=163586), generation=163586)
    res = cli("check", "--offline", "--profile", str(write_profile(f"extends: prod\nmodel:\n  path: {k26}\n")))
    assert res.code == 2 and "lacks stop id 163585" in res.out and "set model.family: kimi-k2.6" in res.out


def test_k3_checkpoint_refused_with_its_bytes_before_anything_starts(write_profile, cli, tmp_path):
    model = _checkpoint(tmp_path, lambda c: c.update(architectures=["KimiK3ForConditionalGeneration"]))
    with open(model / "model-00001.safetensors", "wb") as shard:  # sparse: 1.6 TB of size, no disk
        shard.truncate(1_600_000_000_000)
    path = write_profile(f"extends: prod-k27-code\nmodel:\n  path: {model}\n")
    assert_one_line_error(
        cli("up", "--profile", str(path)), "Kimi-K3", "1.60 TB (1,600,000,000,000 bytes)", "768 GB", "model.path"
    )


def test_a_checkpoint_of_another_architecture_is_refused(write_profile, cli, tmp_path):
    model = _checkpoint(tmp_path, lambda c: c.update(architectures=["DeepseekV3ForCausalLM"], model_type="kimi_k2"))
    res = cli("render", "--profile", str(write_profile(f"extends: prod\nmodel:\n  path: {model}\n")))
    assert_one_line_error(res, "DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration", "model.family")


def test_family_table_facts():
    k26, k27 = fam.FAMILIES[fam.K26], fam.FAMILIES[fam.K27_CODE]
    assert fam.family(None).stop_id == 163586 and fam.family(None).eos_ids == (163586, 163585)
    assert k26.eos_ids == (163586,) and "preserve_thinking" in k26.switches
    assert k27.thinking_only and dict(k27.sampling) == {"temperature": 1.0, "top_p": 0.95}
    assert fam.by_model_name("/models/Kimi-K2.7-Code") is k27 and fam.by_model_name("kimi-k2.6") is k26
    assert fam.by_model_name("llama") is None
    assert fam.FAMILIES[fam.K3].gpu_fit(8) and fam.FAMILIES[fam.K26].gpu_fit(8) is None
