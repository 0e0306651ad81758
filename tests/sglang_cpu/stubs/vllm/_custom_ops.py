"""Stand-in for vLLM's CUDA `rotary_embedding` op, which SGLang's CPU rotary path calls: the same math in plain torch.

Only for the CPU test server (tests/sglang_cpu/README.md). In-place on ``query``/``key`` of shape [tokens, heads*head_size].
"""

from __future__ import annotations

import torch


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, head_size: int, is_neox: bool) -> None:
    heads = x.view(x.shape[0], -1, head_size)
    rot_dim = cos.shape[-1] * 2
    part = heads[..., :rot_dim].float()
    c, s = cos.unsqueeze(1).float(), sin.unsqueeze(1).float()
    if is_neox:
        first, second = part.chunk(2, dim=-1)
        rotated = torch.cat((first * c - second * s, second * c + first * s), dim=-1)
    else:
        even, odd = part[..., 0::2], part[..., 1::2]
        rotated = torch.stack((even * c - odd * s, odd * c + even * s), dim=-1).flatten(-2)
    heads[..., :rot_dim] = rotated.to(x.dtype)


def rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor | None,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
) -> None:
    cos, sin = cos_sin_cache[positions.long()].chunk(2, dim=-1)
    _rotate(query, cos, sin, head_size, is_neox)
    if key is not None:
        _rotate(key, cos, sin, head_size, is_neox)
