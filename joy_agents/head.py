"""The output layer's input made contiguous, so that its product never copies the output weight.

A causal LM computes the logits of the positions it keeps (``logits_to_keep``): ``lm_head(hidden[:, -k:, :])``. That
slice does not have the strides of a new tensor, and when the output weight needs no gradient (a frozen base)
``torch.matmul`` folds a 3-d input into one 2-d product only when it has them (size-1 dimensions included).
Otherwise it runs a batched product, which broadcasts the output weight (vocabulary x hidden: 28 M numbers for
SmolLM2) to every row; in bfloat16 on a CPU the kernel copies the broadcast weight, once per row, on every prefill.
Copying the slice instead costs ``rows x k x hidden`` numbers.

:func:`use_contiguous_head` adds a forward pre-hook to the model's output layer that does that copy (a no-op for an
input laid out as a new tensor, as in a decode step); the team does this for every model it loads
(:class:`~joy_agents.policy.TeamPolicy`). Results are unchanged: the same product on the same numbers.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["use_contiguous_head"]

_MARK = "_joy_contiguous_input"


def _standard_strides(x: torch.Tensor) -> bool:
    """Whether ``x``'s strides are those of a new tensor of its shape, size-1 dimensions included (which
    ``is_contiguous`` ignores, and ``torch.matmul``'s folding does not)."""
    expected = 1
    for size, stride in zip(reversed(x.shape), reversed(x.stride()), strict=True):
        if stride != expected:
            return False
        expected *= size
    return True


def _contiguous(module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    x = args[0] if args else None
    if isinstance(x, torch.Tensor) and x.dim() > 2 and not _standard_strides(x):
        return (x.clone(memory_format=torch.contiguous_format), *args[1:])
    return None


def use_contiguous_head(model: torch.nn.Module) -> bool:
    """Give ``model``'s output layer (``get_output_embeddings()``, a linear layer) a contiguous input; whether it
    has one now (False for a model without such a layer). Adding it twice adds it once."""
    getter = getattr(model, "get_output_embeddings", None)
    head = getter() if callable(getter) else None
    if not isinstance(head, torch.nn.Linear):
        return False
    if not getattr(head, _MARK, False):
        head.register_forward_pre_hook(_contiguous)
        setattr(head, _MARK, True)
    return True
