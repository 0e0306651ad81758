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
    res = cli("render", "--profile", str(write_profile(f"extends: prod-k26\nmodel:\n  path: {k25}\n")))
    assert_one_line_error(res, "config.json", "model.family", "stops on 163585 too", "set model.family: kimi-k2.5")
    ok = cli("render", "--profile", str(write_profile(f"extends: prod\nmodel:\n  path: {k25}\n")))
    assert ok.code == 0, ok.err
    # a K2.6 checkpoint (eos moved to 163586) under a K2.5 profile: K2.5's [EOS] 163585 is missing
    k26 = _checkpoint(tmp_path / "b", lambda c: c["text_config"].update(eos_token_id=163586), generation=163586)
    res = cli("render", "--profile", str(write_profile(f"extends: prod\nmodel:\n  path: {k26}\n")))
    assert_one_line_error(res, "lacks stop id 163585", "set model.family: kimi-k2.6")


def test_k3_checkpoint_refused_with_its_bytes_before_anything_starts(write_profile, cli, tmp_path):
    model = _checkpoint(tmp_path, lambda c: c.update(architectures=["KimiK3ForConditionalGeneration"]))
    with open(model / "model-00001.safetensors", "wb") as shard:  # sparse: 1.6 TB of size, no disk
        shard.truncate(1_600_000_000_000)
    path = write_profile(f"extends: prod-k27-code\nmodel:\n  path: {model}\n")
    assert_one_line_error(
        cli("up", "--profile", str(path)), "Kimi-K3", "1.60 TB (1,600,000,000,000 bytes)", "768 GB", "model.path"
    )


def test_a_checkpoint_of_another_kimi_model_is_refused_and_a_non_kimi_one_is_not_judged(write_profile, cli, tmp_path):
    k3_type = _checkpoint(tmp_path, lambda c: c.update(architectures=["KimiK3LinearForCausalLM"], model_type="kimi_k3"))
    res = cli("render", "--profile", str(write_profile(f"extends: prod\nmodel:\n  path: {k3_type}\n")))
    assert_one_line_error(res, "Kimi-K3", "768 GB", "model.path")
    llama = _checkpoint(tmp_path / "b", lambda c: c.update(architectures=["LlamaForCausalLM"], model_type="llama"))
    res = cli(
        "check", "--offline", "--json", "--profile", str(write_profile(f"extends: prod\nmodel:\n  path: {llama}\n"))
    )
    found = {f["code"]: f for f in json.loads(res.out)["findings"]}
    assert res.code == 0 and found["model.checkpoint"]["status"] == "skip"


def test_family_table_facts():
    k26, k27 = fam.FAMILIES[fam.K26], fam.FAMILIES[fam.K27_CODE]
    assert fam.family(None).stop_id == 163586 and fam.family(None).eos_ids == (163586, 163585)
    assert k26.eos_ids == (163586,) and "preserve_thinking" in k26.switches
    assert k27.thinking_only and dict(k27.sampling) == {"temperature": 1.0, "top_p": 0.95}
    assert fam.by_model_name("/models/Kimi-K2.7-Code") is k27 and fam.by_model_name("kimi-k2.6") is k26
    assert fam.by_model_name("llama") is None


# --- verify, the simulator's template and client-config know the family (pure) ---


def _render(family: str, **kwargs):
    import jinja2

    from kimi_serve.simulator.stand_in import chat_template
    from kimi_serve.verify.family_probe import _history

    env = jinja2.Environment()
    env.filters["tojson"] = lambda v, **kw: json.dumps(v, **kw)
    return env.from_string(chat_template(family)).render(messages=_history(True), add_generation_prompt=True, **kwargs)


def test_stand_in_template_keeps_or_drops_earlier_reasoning_per_family():
    from kimi_serve.verify.family_probe import _REASONING

    assert _REASONING not in _render(fam.K25) and _REASONING not in _render(fam.K25, preserve_thinking=True)
    assert _REASONING not in _render(fam.K26) and _REASONING not in _render(fam.K26, preserve_thinking=False)
    assert _REASONING in _render(fam.K26, preserve_thinking=True)
    assert _REASONING in _render(fam.K27_CODE)
    assert _render(fam.K25, thinking=False).endswith("<think></think>")
    assert _render(fam.K27_CODE, thinking=False).endswith("<think>")  # no instant mode: the switch is ignored


def test_verify_judges_by_the_family():
    from kimi_serve.verify.agentic import DIALECT_PROBES, agentic_probes
    from kimi_serve.verify.family_probe import expected_preserve, for_family, resolve_family
    from kimi_serve.verify.probes import suite

    full = suite("full") + agentic_probes("full")
    k27 = for_family(full, fam.FAMILIES[fam.K27_CODE])
    assert not {p.name for p in k27} & set(DIALECT_PROBES.values())
    assert all(not p.template_kwargs for p in k27)  # the large argument keeps thinking on
    assert for_family(full, fam.family(None)) == full
    assert resolve_family(None, "kimi-k2.7-code").name == fam.K27_CODE
    assert resolve_family(fam.K26, "whatever").name == fam.K26 and resolve_family(None, "my-model").name == fam.K25
    k26 = fam.FAMILIES[fam.K26]
    assert expected_preserve(k26, None, None) is False and expected_preserve(k26, True, None) is True
    assert expected_preserve(k26, None, {"preserve_thinking": True}) is True
    assert expected_preserve(fam.FAMILIES[fam.K27_CODE], None, {"preserve_thinking": False}) is True


def test_raw_stop_id_is_the_familys():
    from kimi_serve.verify.raw import _meta_findings

    def meta(matched):
        return {
            "meta_info": {
                "finish_reason": {"type": "stop", "matched": matched},
                "prompt_tokens": 3,
                "completion_tokens": 2,
            }
        }

    k26 = fam.FAMILIES[fam.K26].eos_ids
    assert "raw_matched_stop" in {f.code for f in _meta_findings(meta(163585), k26)}
    assert "raw_matched_stop" not in {f.code for f in _meta_findings(meta(163585), fam.family(None).eos_ids)}
    assert "raw_matched_stop" not in {f.code for f in _meta_findings(meta(163586), k26)}


def _usage(**usage):
    return {"usage": usage, "sglext": {"input_ids": list(range(24))}}


@pytest.mark.parametrize(
    "data, code, clients",
    [
        ({"choices": []}, "usage_missing", "pydantic-ai's UsageLimits"),
        (_usage(prompt_tokens=24, completion_tokens=10, reasoning_tokens=12), "reasoning_tokens_over", "LangChain"),
        (
            _usage(prompt_tokens=24, completion_tokens=10, completion_tokens_details={"reasoning_tokens": 11}),
            "reasoning_tokens_over",
            "opencode",
        ),
        (_usage(prompt_tokens=20, completion_tokens=10), "prompt_tokens_mismatch", "kimi-cli"),
        (_usage(prompt_tokens=24, completion_tokens=10, total_tokens=30), "total_tokens_mismatch", "opencode"),
    ],
)
def test_token_accounting_findings_name_the_clients(data, code, clients):
    from kimi_serve.verify.accounting import usage_findings

    found = usage_findings(data)
    assert [f.code for f in found] == [code] and clients in found[0].message and found[0].fix


def test_token_accounting_holds():
    from kimi_serve.verify.accounting import usage_findings

    assert usage_findings(_usage(prompt_tokens=24, completion_tokens=47, total_tokens=71, reasoning_tokens=25)) == []
    assert usage_findings({"usage": {"prompt_tokens": 5, "completion_tokens": 1}}) == []  # no ids: not judged


def test_client_config_writes_the_familys_switches_and_limits(cli):
    res = cli("client-config", "--profile", "prod-k27-code", "--client", "opencode", "--json")
    text = json.dumps(json.loads(res.out))
    assert '"instant_mode": false' in text and '"temperature": 1.0' in text and '"top_p": 0.95' in text
    assert "-instant" not in text and "only thinks" in text
    py = cli("client-config", "--profile", "prod-k27-code", "--client", "openai")
    assert "temperature=1.0," in py.out and "top_p=0.95," in py.out and "thinking off:" not in py.out.split("\n\n")[0]
    k25 = cli("client-config", "--profile", "prod", "--client", "openai")
    assert "temperature=" not in k25.out and "# thinking off: extra_body" in k25.out
    k26 = cli("client-config", "--profile", "prod-k26", "--client", "langchain")
    assert "preserve_thinking (this server: off)" in k26.err + k26.out


def test_each_familys_stand_in_checkpoint_stops_on_the_familys_ids():
    from kimi_serve.check.family_rules import checkpoint_stop_ids
    from kimi_serve.simulator.stand_in import standin_model

    for name in (fam.K25, fam.K26, fam.K27_CODE):
        folder = standin_model(name)
        config = json.loads((folder / "config.json").read_text())
        generation = json.loads((folder / "generation_config.json").read_text())
        assert checkpoint_stop_ids(config, generation) == set(fam.FAMILIES[name].eos_ids), name
