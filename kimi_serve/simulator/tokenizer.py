"""The tokenizer the simulator serves with: the model directory's real one when it has one, else a bundled stand-in.

The stand-in (assets/standin-bpe.json) is a 20,480-token byte-level BPE cut by the same split as Kimi's tiktoken
pattern, padded to Kimi's 163584 base ranks, then Kimi's 256 special slots at their real ids (163586 ``<|im_end|>``,
163607 ``</think>``, ...), with a K2.5-style chat template (docs/simulator.md). Runs inside the SGLang venv.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kimi_serve.core.family import K25
from kimi_serve.core.family import family as family_of
from kimi_serve.simulator.stand_in import STANDIN_TOKENIZER, chat_template

BASE_RANKS = 163584
VOCAB_SIZE = 163840

# (id, token, special?) for the named slots; ids and flags from Kimi-K2 / K2.5 (K2-Instruct flags for tool markers).
_NAMED: list[tuple[int, str, bool]] = [
    (163584, "[BOS]", True),
    (163585, "[EOS]", True),
    (163586, "<|im_end|>", True),
    (163587, "<|im_user|>", True),
    (163588, "<|im_assistant|>", True),
    (163590, "<|start_header_id|>", True),
    (163591, "<|end_header_id|>", True),
    (163593, "[EOT]", True),
    (163594, "<|im_system|>", True),
    (163595, "<|tool_calls_section_begin|>", False),
    (163596, "<|tool_calls_section_end|>", False),
    (163597, "<|tool_call_begin|>", False),
    (163598, "<|tool_call_argument_begin|>", False),
    (163599, "<|tool_call_end|>", False),
    (163601, "<|im_middle|>", True),
    (163602, "<|media_begin|>", True),
    (163603, "<|media_content|>", True),
    (163604, "<|media_end|>", True),
    (163605, "<|media_pad|>", True),
    (163606, "<think>", True),
    (163607, "</think>", True),
    (163838, "[UNK]", True),
    (163839, "[PAD]", True),
]
# The pre-split of Kimi's (and cl100k's) tiktoken pattern, without its CJK branch: words with their leading
# space/punctuation, numbers in runs of at most 3 digits, punctuation runs with their newlines, whitespace runs.
# The stand-in's merges are learnt over it (scripts/build-simulator-tokenizer.py) and it serves with it.
SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json", "tiktoken.model", "tokenizer.model")


@dataclass(frozen=True)
class LoadedTokenizer:
    tokenizer: Any  # a transformers PreTrainedTokenizerBase
    description: str  # said in the log: which tokenizer serves


def load_tokenizer(model_dir: Path | None, family: str = K25) -> LoadedTokenizer:
    if model_dir is not None and any((model_dir / name).is_file() for name in _TOKENIZER_FILES):
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(model_dir), trust_remote_code=True)
        return LoadedTokenizer(tok, f"real tokenizer {type(tok).__name__} and chat template from {model_dir}")
    where = f"{model_dir} has no tokenizer files" if model_dir is not None else "no model directory"
    return LoadedTokenizer(
        build_standin(family),
        f"STAND-IN tokenizer (kimi-serve simulator: byte-level BPE + Kimi special-token ids, "
        f"{family_of(family).title}-style template; {where})",
    )


def standin_pre_tokenizer() -> Any:
    """SPLIT_PATTERN, then byte-level bytes (no second regex split): the stand-in's pre-tokenizer, built and served."""
    from tokenizers import Regex, pre_tokenizers

    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def build_standin(family: str = K25) -> Any:
    from tokenizers import AddedToken, Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    spec = json.loads(STANDIN_TOKENIZER.read_text(encoding="utf-8"))
    vocab: dict[str, int] = dict(spec["vocab"])
    for rank in range(len(vocab), BASE_RANKS):  # unused ranks, so that special ids land where Kimi has them
        vocab[f"<|standin_rank_{rank}|>"] = rank
    merges = [tuple(m.split(" ", 1)) for m in spec["merges"]]
    core = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    core.pre_tokenizer = standin_pre_tokenizer()
    core.decoder = decoders.ByteLevel()
    named = {i: (tok, special) for i, tok, special in _NAMED}
    for token_id in range(BASE_RANKS, VOCAB_SIZE):
        content, special = named.get(token_id, (f"<|reserved_token_{token_id}|>", True))
        core.add_tokens([AddedToken(content, special=special, normalized=False)])
        if core.token_to_id(content) != token_id:
            raise RuntimeError(f"stand-in tokenizer: {content} got id {core.token_to_id(content)}, wanted {token_id}")
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="[BOS]",
        eos_token="[EOS]",
        unk_token="[UNK]",
        pad_token="[PAD]",
        additional_special_tokens=["<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>"],
    )
    tok.chat_template = chat_template(family)
    return tok
