"""Shared prefill: the parts of a batch's prompts that several rows share, run once.

A prompt that several rows share (the G samples of a node, or G episodes of a task at the same turn) runs once,
and so does the start that all of a batch's prompts share (a role's system prompt and tools, when at least
``MIN_SHARED_PREFIX`` tokens): :func:`prompt_layout` lays the distinct prompts out, :func:`prefill_shared` runs
them and copies the KV cache to the batch's rows. :func:`length_buckets` cuts prompts of unequal lengths into
groups that pad little. :func:`prompt_batches` cuts teacher-forcing work into micro-batches that keep the rows of
one prompt together.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from joy_agents.adapters import hf_model

__all__ = [
    "BUCKET_OVERHEAD",
    "MIN_SHARED_PREFIX",
    "PromptLayout",
    "cache_argument",
    "common_prefix_length",
    "length_buckets",
    "plain_layout",
    "prefill_shared",
    "prompt_batches",
    "prompt_layout",
    "unique_rows",
]


def unique_rows(rows: Sequence[Sequence[int]]) -> tuple[list[list[int]], list[int]]:
    """The distinct rows of ``rows`` in order of first appearance, and for each row the index of its copy."""
    first: dict[tuple[int, ...], int] = {}
    unique: list[list[int]] = []
    index: list[int] = []
    for r in rows:
        key = tuple(r)
        if key not in first:
            first[key] = len(unique)
            unique.append(list(r))
        index.append(first[key])
    return unique, index


def common_prefix_length(rows: Sequence[Sequence[int]]) -> int:
    """How many first tokens every row of ``rows`` shares."""
    if not rows:
        return 0
    first = rows[0]
    n = min(len(r) for r in rows)
    for r in rows[1:]:
        k = 0
        while k < n and r[k] == first[k]:
            k += 1
        n = k
    return n


MIN_SHARED_PREFIX = 16
"""Shortest common prefix of different prompts worth running once for all of them (:func:`prompt_layout`)."""


@dataclass
class PromptLayout:
    """Distinct prompts laid out to run their shared parts once (:func:`prompt_layout`).

    Row ``u`` of ``ids`` is ``[common tokens][padding][rest of prompt u]``: the first ``common`` columns are the
    same in every row, every prompt ends in the last column, and ``positions`` count real tokens only, so the
    padding in the middle changes nothing (it is masked out). ``index[r]`` is the distinct prompt of row ``r``
    of the batch the layout serves.
    """

    ids: torch.Tensor  # (U, W)
    mask: torch.Tensor  # (U, W)
    positions: torch.Tensor  # (U, W)
    common: int
    index: torch.Tensor  # (R,)


def prompt_layout(
    rows: Sequence[Sequence[int]], pad_id: int, device: torch.device | str = "cpu", min_common: int = MIN_SHARED_PREFIX
) -> PromptLayout | None:
    """The :class:`PromptLayout` of a batch of prompts ``rows`` when sharing saves work (some prompts repeat, or
    all share at least ``min_common`` first tokens), else None. A common prefix shorter than ``min_common`` is
    not split off; the common part always leaves every prompt at least its last token."""
    unique, index = unique_rows(rows)
    width = max(len(u) for u in unique)
    if width < 2:
        return None
    common = min(common_prefix_length(unique), min(len(u) for u in unique) - 1)
    if len(unique) > 1 and common < min_common:
        common = 0
    if len(unique) == len(rows) and common == 0:
        return None
    rest = max(len(u) for u in unique) - common
    width = common + rest
    ids = torch.full((len(unique), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(unique), width), dtype=torch.long)
    for i, u in enumerate(unique):
        ids[i, :common] = torch.tensor(u[:common], dtype=torch.long)
        mask[i, :common] = 1
        tail = u[common:]
        ids[i, width - len(tail) :] = torch.tensor(tail, dtype=torch.long)
        mask[i, width - len(tail) :] = 1
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    return PromptLayout(
        ids.to(device), mask.to(device), positions.to(device), common, torch.tensor(index, device=device)
    )


def plain_layout(rows: Sequence[Sequence[int]], pad_id: int, device: torch.device | str = "cpu") -> PromptLayout:
    """The :class:`PromptLayout` of ``rows`` with nothing shared: each row left-padded on its own."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(list(r), dtype=torch.long)
        mask[i, width - len(r) :] = 1
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    index = torch.arange(len(rows), device=device)
    return PromptLayout(ids.to(device), mask.to(device), positions.to(device), 0, index)


BUCKET_OVERHEAD = 32
"""Tokens of work one more prefill call is taken to cost (its fixed work and the shared prefix run again), in
:func:`length_buckets`."""


def length_buckets(
    rows: Sequence[Sequence[int]], overhead: int = BUCKET_OVERHEAD, shared: bool = True
) -> list[list[int]]:
    """The indices of ``rows`` (prompts) cut into groups, each to be prefilled in one call, so that padding costs
    little: a batch pads every prompt to its longest, so where prompts differ by up to 100 tokens after a start they
    share, padding can be half of the work after that start. Rows are sorted by length (identical prompts next to each
    other, computed once by :func:`prompt_layout`), and the cut points minimise the tokens computed: per group
    ``overhead`` plus the prefix all rows share plus each distinct prompt's rest padded to the group's longest
    (``shared=False``: every row counts whole, for a forward that runs each row as it is). Groups come shortest
    first; one group when cutting saves nothing."""
    n = len(rows)
    if n <= 1:
        return [list(range(n))] if n else []
    order = sorted(range(n), key=lambda i: (len(rows[i]), tuple(rows[i])))
    common = common_prefix_length([rows[i] for i in order]) if shared else 0
    lengths = [len(rows[i]) - common for i in order]
    distinct = [0]  # distinct[j]: distinct prompts among the first j sorted rows
    for j, i in enumerate(order):
        distinct.append(distinct[-1] + (j == 0 or not shared or rows[i] != rows[order[j - 1]]))
    best = [0] + [None] * n  # best[j]: the least cost of the first j sorted rows, and where its last group starts
    start = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j):
            # rows i..j-1: the first of them may repeat the row before it, so count it as distinct
            count = distinct[j] - distinct[i + 1] + 1
            cost = best[i] + overhead + common + count * lengths[j - 1]
            if best[j] is None or cost < best[j]:
                best[j], start[j] = cost, i
    groups: list[list[int]] = []
    j = n
    while j > 0:
        groups.append([order[k] for k in range(start[j], j)])
        j = start[j]
    return groups[::-1]


@functools.cache
def cache_argument(model_class: type) -> str:
    """The name of ``model_class.forward``'s KV-cache argument: ``cache`` in newer transformers, before that
    ``past_key_values``."""
    import inspect

    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def _cache_of(output: Any) -> Any:
    cache = getattr(output, "cache", None)
    return output.past_key_values if cache is None else cache


def prefill_shared(model: torch.nn.Module, layout: PromptLayout) -> tuple[Any, str]:
    """Run every column of ``layout`` but the last through ``model`` with each shared part computed once: the
    common prefix for one row, then each distinct prompt's rest, then the KV cache copied out to the batch's
    rows (``layout.index``). Returns ``(cache, name of the model's cache argument)``. Gradients flow through the
    cache when enabled, so a loss on the rows reaches the shared tokens' computation once per row."""
    hf = hf_model(model)
    arg = cache_argument(type(hf))
    width, common, n_unique = layout.ids.shape[1], layout.common, layout.ids.shape[0]
    cache = None
    if common > 0:
        out = model(
            input_ids=layout.ids[:1, :common],
            attention_mask=layout.mask[:1, :common],
            position_ids=layout.positions[:1, :common],
            use_cache=True,
            logits_to_keep=1,
        )
        cache = _cache_of(out)
        if n_unique > 1:
            cache.batch_repeat_interleave(n_unique)
    if width - 1 > common:
        extra = {arg: cache} if cache is not None else {}
        out = model(
            input_ids=layout.ids[:, common : width - 1],
            attention_mask=layout.mask[:, : width - 1],
            position_ids=layout.positions[:, common : width - 1],
            use_cache=True,
            logits_to_keep=1,
            **extra,
        )
        cache = _cache_of(out)
    if cache is None:
        raise RuntimeError("internal error: prefill_shared got a layout without a prefix (width < 2)")
    cache.reorder_cache(layout.index)
    return cache, arg


def prompt_batches(items: Sequence[Any], size: int, prompt: Any = None) -> list[list[Any]]:
    """``items`` cut into micro-batches of at most ``size``, those with the same prompt next to each other and in
    one micro-batch where they fit, so :meth:`TeamPolicy.logprobs` runs each prompt once per micro-batch.

    ``prompt(item)`` gives an item's prompt ids (default ``item.prompt_ids``; for ``(sample, value)`` pairs the
    sample's). Items keep their order within a prompt; prompts are taken in order of first appearance and packed
    greedily; a prompt with more than ``size`` items fills whole micro-batches."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be an int >= 1, got {size!r}")

    def default(item: Any) -> Sequence[int]:
        return item[0].prompt_ids if isinstance(item, tuple) else item.prompt_ids

    key_of = prompt or default
    groups: dict[tuple[int, ...], list[Any]] = {}
    for item in items:
        groups.setdefault(tuple(key_of(item)), []).append(item)
    batches: list[list[Any]] = []
    current: list[Any] = []
    for group in groups.values():
        if len(current) + len(group) > size and current:
            batches.append(current)
            current = []
        while len(group) > size:
            batches.append(group[:size])
            group = group[size:]
        current.extend(group)
    if current:
        batches.append(current)
    return batches
