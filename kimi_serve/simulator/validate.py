"""SGLang's own request checks on the simulator's request path, as 0.5.23's ``TokenizerManager`` runs them:
``_validate_one_request`` (context length, ``--allow-auto-truncate``), then ``SamplingParams`` under the server's
preferred params, ``normalize`` and ``verify``. Each raises SGLang's ``ValueError``, the serving layer's HTTP 400.
Runs inside the SGLang venv.
"""

from __future__ import annotations

import types
from typing import Any

_METHODS = (
    "_validate_one_request",
    "_validate_joint_schema_request",
    "_validate_token_ids_logprob",
    "_validate_for_matryoshka_dim",
)


class RequestChecks:
    """Carries exactly the ``TokenizerManager`` attributes SGLang's validation methods read."""

    def __init__(self, model_config: Any, tokenizer: Any) -> None:
        from sglang.srt.managers.tokenizer_manager import TokenizerManager
        from sglang.srt.managers.utils import compute_num_reserved_tokens
        from sglang.srt.runtime_context import get_serving

        serving = get_serving()
        self.model_config = model_config
        self.tokenizer = tokenizer
        self.context_len = model_config.context_len
        self.num_reserved_tokens = compute_num_reserved_tokens()
        self.allow_auto_truncate = serving.allow_auto_truncate
        self.validate_total_tokens = True
        self.max_req_input_len = None
        self.preferred_sampling_params = _preferred(serving.preferred_sampling_params)
        self.is_generation = True
        for name in _METHODS:  # SGLang's own code, bound to this object
            setattr(self, name, types.MethodType(getattr(TokenizerManager, name), self))

    def sampling_params(self, obj: Any, input_ids: list[int]) -> Any:
        """SGLang's checks for one tokenized request; its normalized, verified ``SamplingParams``."""
        from sglang.srt.sampling.sampling_params import SamplingParams

        self._validate_one_request(obj, input_ids)  # type: ignore[attr-defined]  # bound in __init__; may lower max_new_tokens (auto-truncate), as SGLang
        kwargs = {**self.preferred_sampling_params, **obj.sampling_params}
        params = SamplingParams(**kwargs)
        params.normalize(self.tokenizer)
        params.verify(self.model_config.vocab_size)
        return params


def _preferred(value: Any) -> dict[str, Any]:
    import json

    if not value:
        return {}
    return dict(json.loads(value)) if isinstance(value, str) else dict(value)
