"""Small real safetensors checkpoints for the cold-start tests, written by hand (the format is an 8-byte little-endian
header length, a JSON header naming each tensor's dtype, shape and byte range, then the bytes): no numpy or torch."""

from __future__ import annotations

import json
import os
import random
import struct
from pathlib import Path

TINY_LLAMA = Path(__file__).resolve().parent / "sglang_cpu" / "tiny-llama" / "config.json"


def write_shard(path: Path, tensors: dict[str, tuple[list[int], bytes]], dtype: str = "BF16") -> None:
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for _shape, data in tensors.values():
            f.write(data)


def write_index(model_dir: Path, weight_map: dict[str, str], total: int) -> None:
    (model_dir / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1)
    )


def opaque_checkpoint(model_dir: Path, shards: int, shard_bytes: int) -> list[Path]:
    """Shards of random bytes (one U8 tensor each) with an index: for byte-level tests (bandwidth, page cache)."""
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps({"model_type": "llama"}))
    paths, weight_map = [], {}
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        write_shard(model_dir / name, {f"blob.{i}": ([shard_bytes], os.urandom(shard_bytes))}, dtype="U8")
        weight_map[f"blob.{i}"] = name
        paths.append(model_dir / name)
    write_index(model_dir, weight_map, shards * shard_bytes)
    return paths


def _bf16(values: list[float]) -> bytes:
    return b"".join(struct.pack("<f", v)[2:4] for v in values)


def _fill(n_elems: int, pattern: bytes) -> bytes:
    need = 2 * n_elems
    return (pattern * (need // len(pattern) + 1))[:need]


def llama_checkpoint(
    model_dir: Path, *, hidden: int = 256, intermediate: int = 512, layers: int = 2, vocab: int = 32768, shards: int = 4
) -> int:
    """A loadable Llama (SGLang's LlamaForCausalLM names and shapes), bf16, small random weights, ``shards`` files
    with an index; returns its bytes. The defaults make ~40 MB."""
    model_dir.mkdir(parents=True, exist_ok=True)
    config = json.loads(TINY_LLAMA.read_text())
    heads, kv_heads = 4, 2
    config.update(
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        vocab_size=vocab,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
    )
    (model_dir / "config.json").write_text(json.dumps(config, indent=1))
    rng = random.Random(18)
    noise = _bf16([rng.gauss(0.0, 0.02) for _ in range(8192)])
    ones = _bf16([1.0])
    head_dim = hidden // heads
    shapes: dict[str, list[int]] = {"model.embed_tokens.weight": [vocab, hidden]}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update(
            {
                p + "self_attn.q_proj.weight": [heads * head_dim, hidden],
                p + "self_attn.k_proj.weight": [kv_heads * head_dim, hidden],
                p + "self_attn.v_proj.weight": [kv_heads * head_dim, hidden],
                p + "self_attn.o_proj.weight": [hidden, heads * head_dim],
                p + "mlp.gate_proj.weight": [intermediate, hidden],
                p + "mlp.up_proj.weight": [intermediate, hidden],
                p + "mlp.down_proj.weight": [hidden, intermediate],
                p + "input_layernorm.weight": [hidden],
                p + "post_attention_layernorm.weight": [hidden],
            }
        )
    shapes.update({"model.norm.weight": [hidden], "lm_head.weight": [vocab, hidden]})
    names = list(shapes)
    groups = [names[k::shards] for k in range(shards)]
    weight_map, total = {}, 0
    for k, group in enumerate(groups):
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        tensors = {}
        for name in group:
            shape = shapes[name]
            n = 1
            for d in shape:
                n *= d
            data = _fill(n, ones if name.endswith("norm.weight") else noise)
            tensors[name] = (shape, data)
            weight_map[name] = fname
            total += len(data)
        write_shard(model_dir / fname, tensors)
    write_index(model_dir, weight_map, total)
    return total
