"""The loss of the ``sft`` trainer: cross-entropy on the labelled tokens only, the vocabulary projected only where
a label is, a batch's shared prefix run once (:func:`~joy_trainers.sft_batches.collate_shared_prefix`). Pure
functions of a model and a collated batch."""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch
import torch.nn.functional as F


def prefix_sharing_supported(model: Any) -> bool:
    """Whether :func:`completion_loss` can run a batch's shared prefix separately for ``model``: the plain
    output-embedding head (see there) and not wrapped for DDP / FSDP (two forward calls per step)."""
    if hasattr(model, "module"):
        return False
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(inner, "config", None)
    return (
        model.get_output_embeddings() is not None
        and getattr(config, "final_logit_softcapping", None) is None
        and getattr(config, "logit_scale", None) is None
    )


@functools.cache
def _cache_argument(model_class: type) -> str:
    """The name of ``model_class.forward``'s argument that takes a KV cache: ``cache`` in newer transformers,
    before that ``past_key_values`` (looked up once per class, not at every step)."""
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def completion_loss(model: Any, inputs: dict[str, Any], num_items: Any = None) -> Any:
    """Cross-entropy on the labelled tokens only.

    The vocabulary projection dominates a small model's cost and most positions carry no label, so it is
    applied only where it is needed: for a model whose logits are its output embedding of the final hidden
    state (Qwen2, Llama, Mistral, ...), to the labelled positions alone; otherwise (logit scaling or
    soft-capping, or a model inside a DDP / FSDP wrapper) to the last ``keep`` positions (see
    :func:`~joy_trainers.sft_batches.collate_left`).

    A batch from :func:`~joy_trainers.sft_batches.collate_shared_prefix` (``prefix_ids``) first runs the prefix
    once, repeats its keys and values for every row and runs the rows on top of them: the same loss and gradients
    as the whole rows.
    A model that recomputes activations (checkpointing turns its KV cache off while training) runs such a batch
    as whole rows instead (:func:`expand_prefix`).

    The head runs in its own dtype: under mixed precision (``bf16=True``) Accelerate hands back the model's
    outputs in float32, and a bf16 head meets them.
    """
    if "prefix_ids" in inputs and _checkpointing(model):
        inputs = expand_prefix(inputs)
    labels = inputs["labels"][:, 1:]  # position t predicts token t+1
    plain_head = prefix_sharing_supported(model)
    keep = 1 if plain_head else int(inputs["keep"])
    extra: dict[str, Any] = {}
    if "prefix_ids" in inputs:
        if not plain_head:
            raise ValueError(
                "a batch with prefix_ids needs a model with a plain output-embedding head outside DDP / FSDP; "
                "collate it with collate_left (SFTConfig(shared_prefix=False))"
            )
        prefix = model(input_ids=inputs["prefix_ids"], use_cache=True, logits_to_keep=1)
        cache = getattr(prefix, "cache", None)
        cache = prefix.past_key_values if cache is None else cache
        cache.batch_repeat_interleave(inputs["input_ids"].size(0))
        inner = model.get_base_model() if hasattr(model, "get_base_model") else model
        extra = {_cache_argument(type(inner)): cache, "use_cache": True}
    out = model(
        input_ids=inputs["input_ids"],
        attention_mask=inputs["attention_mask"],
        position_ids=inputs["position_ids"],
        logits_to_keep=keep,
        output_hidden_states=plain_head,
        **extra,
    )
    if plain_head:
        head = model.get_output_embeddings()
        hidden = out.hidden_states[-1][:, :-1]  # (B, W-1, H)
        if "label_index" in inputs:  # the labelled positions, found by the collator: no host sync here
            index = inputs["label_index"]
            hidden = hidden.reshape(-1, hidden.size(-1)).index_select(0, index)  # (labels, H)
            labels = labels.reshape(-1).index_select(0, index)
        else:
            selected = labels != -100
            hidden, labels = hidden[selected], labels[selected]
        logits = head(hidden.to(head.weight.dtype))  # (labels, V)
    else:
        logits = out.logits[:, :-1, :].reshape(-1, out.logits.size(-1))  # the last keep-1 positions
        labels = (labels[:, -keep + 1 :] if keep > 1 else labels[:, :0]).reshape(-1)
    total = F.cross_entropy(logits.float(), labels, reduction="sum")
    count = (labels != -100).sum()
    denom = num_items if num_items is not None else count.clamp(min=1)
    return total / denom


def _checkpointing(model: Any) -> bool:
    """Whether ``model`` recomputes activations in this (training) forward pass, which turns its cache off."""
    return model.training and any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())


def expand_prefix(inputs: dict[str, Any]) -> dict[str, Any]:
    """A :func:`~joy_trainers.sft_batches.collate_shared_prefix` batch as whole rows: the prefix put back in front
    of every row (the attention mask already covers it, positions start at 0); the same loss as the shared run."""
    prefix = inputs["prefix_ids"]  # (1, P)
    rows, n = inputs["input_ids"].size(0), prefix.size(1)
    out = {k: v for k, v in inputs.items() if k != "prefix_ids"}
    out["input_ids"] = torch.cat([prefix.expand(rows, n), inputs["input_ids"]], dim=1)
    out["labels"] = torch.cat([inputs["labels"].new_full((rows, n), -100), inputs["labels"]], dim=1)
    positions = inputs["position_ids"]
    start = torch.arange(n, dtype=positions.dtype, device=positions.device).expand(rows, n)
    out["position_ids"] = torch.cat([start, positions], dim=1)
    if "label_index" in inputs:  # flat positions in (B, W-1) move to (B, W-1+n)
        index, width = inputs["label_index"], inputs["input_ids"].size(1) - 1
        out["label_index"] = (index // width) * (width + n) + index % width + n
    return out
