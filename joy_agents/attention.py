"""Attention of the team's models on a CPU: grouped-query attention without copying the keys and values.

transformers' ``sdpa`` attention gives a model with grouped-query attention (fewer key/value heads than query heads,
as in SmolLM2 and Qwen2.5) to ``torch.nn.functional.scaled_dot_product_attention`` with ``enable_gqa`` only on a GPU
without a mask. Otherwise, for more than one query token (a prefill, or a decode step with drafted tokens) it first
copies every key and value head once per query head of its group (``repeat_kv``): a decode step with drafts copies
the whole KV cache of every layer, three times over for SmolLM2. For one query token (a plain decode step)
transformers 5.20 and later fold the group's query heads together instead (``pack_gqa``); earlier versions copy
there too, on every step. PyTorch's CPU kernel takes ``enable_gqa`` with a mask and gives the same numbers (its heads
are read in place).

:func:`use_cpu_attention` switches a model to the attention ``"joy_sdpa"``: transformers' ``sdpa`` in every case but
one, where it calls the kernel with ``enable_gqa`` instead of copying: on a CPU, without gradients, with a mask, with
grouped heads and more than one query token, or one query token where transformers would copy (before 5.20). The
team does this for the models it loads on a CPU (:class:`~joy_agents.policy.TeamPolicy`); training passes
(gradients on) run transformers' own path.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

__all__ = ["ATTENTION", "cpu_gqa_attention", "transformers_packs_one_query", "use_cpu_attention"]

ATTENTION = "joy_sdpa"
"""The name the attention is registered under in transformers."""


def cpu_gqa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' ``sdpa`` attention (same arguments, same result), the grouped heads read in place on a CPU (see
    the module documentation)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    own = (
        groups > 1
        and (query.shape[2] > 1 or not transformers_packs_one_query())
        and query.device.type == "cpu"
        and attention_mask is not None
        and not torch.is_grad_enabled()
        and key.shape[-1] == value.shape[-1]
        and not any(kwargs.get(k) for k in ("softcap", "position_bias", "output_attentions"))
    )
    if not own:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True
    )
    return out.transpose(1, 2).contiguous(), None


@functools.cache
def transformers_packs_one_query() -> bool:
    """Whether transformers' ``sdpa`` attention reads grouped heads in place for one query token (``pack_gqa``,
    transformers 5.20 and later)."""
    from transformers.integrations import sdpa_attention

    return hasattr(sdpa_attention, "pack_gqa")


def use_cpu_attention(model: torch.nn.Module) -> bool:
    """Switch ``model`` (a transformers model whose attention is ``sdpa``) to :data:`ATTENTION`; whether it was
    switched. Registering the attention with transformers happens here, once, not at import. A transformers that
    lacks what this needs leaves the model as it was (``sdpa``: the same numbers, more copies)."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

        if ATTENTION not in AttentionInterface._global_mapping:
            AttentionInterface.register(ATTENTION, cpu_gqa_attention)
            ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION, sdpa_mask)
        model.set_attn_implementation(ATTENTION)
    except (ImportError, AttributeError, ValueError, KeyError):
        return False
    return config._attn_implementation == ATTENTION
