"""Batches of the sft trainer: the order of rows (length-bucketed windows, optionally grouped by a shared
start) and the collators (left padding; a batch's shared prefix run once). Pure functions of token ids."""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Sequence
from typing import Any

import torch


def bucketed_order(
    lengths: list[int],
    batch_size: int,
    epochs: float,
    seed: int,
    chunk: int = 8,
    groups: Sequence[Hashable] | None = None,
) -> list[int]:
    """Example indices for ``epochs`` passes, in batches of similar lengths that still mix examples well.

    Each pass shuffles, cuts the order into windows of ``chunk * batch_size``, sorts each window by length,
    cuts it into batches and shuffles the batches. Little padding, and unlike sorting the whole dataset
    (transformers' ``group_by_length``, which puts one role's long examples in the same batches and makes
    the loss jump from batch to batch) consecutive batches still come from all over the data.

    With ``groups`` (a key per example, e.g. from :func:`prefix_groups`), every batch holds examples of one
    group: each group is cut into windows and batches on its own, and a group's short last batch is filled
    up with other examples of that group (seen twice in the pass), so that a loader cutting the order into
    ``batch_size`` rows finds exactly these batches. A pass is then a little longer than the data.
    """
    if batch_size < 1 or epochs <= 0:
        raise ValueError(f"batch_size must be >= 1 and epochs > 0, got {batch_size!r}, {epochs!r}")
    if groups is not None and len(groups) != len(lengths):
        raise ValueError(f"groups must have one key per example: {len(groups)} keys for {len(lengths)} lengths")
    rng = random.Random(f"sft-order/{seed}")
    order: list[int] = []
    passes = math.ceil(epochs)
    for p in range(passes):
        idx = list(range(len(lengths)))
        rng.shuffle(idx)
        members: dict[Hashable, list[int]] = {}
        for i in idx:
            members.setdefault(None if groups is None else groups[i], []).append(i)
        window = chunk * batch_size
        batches = []
        for part_idx in members.values():
            if groups is not None and len(part_idx) % batch_size:
                part_idx = part_idx + rng.sample(part_idx * batch_size, batch_size - len(part_idx) % batch_size)
            for start in range(0, len(part_idx), window):
                part = sorted(part_idx[start : start + window], key=lambda i: lengths[i])
                batches += [part[b : b + batch_size] for b in range(0, len(part), batch_size)]
        rng.shuffle(batches)
        this = [i for b in batches for i in b]
        share = min(1.0, epochs - p)
        order += this if share == 1.0 else this[: max(1, int(round(share * len(this))))]  # epochs > 0: a row at least
    return order


def typical_rows(lengths: Sequence[int], batch_tokens: int) -> int:
    """Rows of a ``batch_tokens`` batch of median-length rows (at least 1)."""
    return max(1, batch_tokens // max(1, sorted(lengths)[len(lengths) // 2])) if lengths else 1


def token_batches(
    lengths: list[int],
    batch_tokens: int,
    epochs: float,
    seed: int,
    chunk: int = 8,
    groups: Sequence[Hashable] | None = None,
) -> list[list[int]]:
    """Batches of example indices for ``epochs`` passes, each as many rows as fit in ``batch_tokens`` tokens
    (rows x its longest row, padding included; a row longer than that is a batch alone).

    As :func:`bucketed_order`, but sized by tokens: each pass shuffles, sorts windows of about ``chunk`` batches by
    length and cuts them greedily, then shuffles the batches; short rows make wide batches, long rows narrow
    ones, so every step carries about the same work. With ``groups`` (:func:`prefix_groups`) a batch holds rows of
    one group only. A partial last pass keeps its first batches.
    """
    if batch_tokens < 1 or epochs <= 0:
        raise ValueError(f"batch_tokens must be >= 1 and epochs > 0, got {batch_tokens!r}, {epochs!r}")
    if groups is not None and len(groups) != len(lengths):
        raise ValueError(f"groups must have one key per example: {len(groups)} keys for {len(lengths)} lengths")
    if not lengths:
        return []
    rng = random.Random(f"sft-token-batches/{seed}")
    window = chunk * typical_rows(lengths, batch_tokens)
    out: list[list[int]] = []
    for p in range(math.ceil(epochs)):
        idx = list(range(len(lengths)))
        rng.shuffle(idx)
        members: dict[Hashable, list[int]] = {}
        for i in idx:
            members.setdefault(None if groups is None else groups[i], []).append(i)
        batches: list[list[int]] = []
        for part_idx in members.values():
            for start in range(0, len(part_idx), window):
                current: list[int] = []
                for i in sorted(part_idx[start : start + window], key=lambda i: lengths[i]):
                    if current and (len(current) + 1) * lengths[i] > batch_tokens:
                        batches.append(current)
                        current = []
                    current.append(i)
                if current:
                    batches.append(current)
        rng.shuffle(batches)
        share = min(1.0, epochs - p)
        out += batches if share == 1.0 else batches[: max(1, int(round(share * len(batches))))]
    return out


def prefix_groups(rows: Sequence[Sequence[int]], batch_size: int, width: int = 64) -> list[Hashable]:
    """A group key per row for :func:`bucketed_order`: rows that start with the same ``width`` tokens (one
    role's system prompt and tools) share a key when at least ``batch_size`` rows do; every other row (cut
    from the left, or of a rare start) gets the key ``None``, so those rows are batched together as before."""
    if width < 1:
        raise ValueError(f"width must be >= 1, got {width!r}")
    keys = [tuple(r[:width]) if len(r) > width else None for r in rows]
    counts: dict[Hashable, int] = {}
    for k in keys:
        counts[k] = counts.get(k, 0) + 1
    return [k if k is not None and counts[k] >= batch_size else None for k in keys]


def collate_left(batch: list[dict[str, list[int]]], pad_id: int) -> dict[str, Any]:
    """Left-pad a batch of ``input_ids`` / ``labels`` so that every completion ends at the last position.

    Position ids count real tokens only (as at generation time), so padding changes nothing.
    ``keep`` is how many final positions can carry a label: the loss only needs logits there; ``label_index``
    are the flat positions of ``(rows, width - 1)`` that predict a labelled token.
    """
    width = max(len(b["input_ids"]) for b in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    keep = 1
    for i, b in enumerate(batch):
        n = len(b["input_ids"])
        ids[i, width - n :] = torch.tensor(b["input_ids"])
        labels[i, width - n :] = torch.tensor(b["labels"])
        mask[i, width - n :] = 1
        first = next((j for j, v in enumerate(b["labels"]) if v != -100), n)
        keep = max(keep, n - first + 1)
    keep = min(keep, width)  # a label on a row's first token has no earlier position to predict it
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    # the flat positions of (rows, width - 1) whose next token is labelled: the loss gathers only those, and
    # finding them here (on the CPU, in the data loader) spares the training step a host sync
    label_index = (labels[:, 1:] != -100).reshape(-1).nonzero().squeeze(1)
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "position_ids": positions,
        "labels": labels,
        "keep": keep,
        "label_index": label_index,
    }


def shared_prefix_length(batch: Sequence[dict[str, list[int]]]) -> int:
    """How many first tokens every row of ``batch`` has in common and can run once: the common prefix of
    the ``input_ids``, short of each row's first label (the position before a label must stay in the row)
    and of each row's last token."""
    if not batch:
        return 0
    first = batch[0]["input_ids"]
    n = min(len(b["input_ids"]) for b in batch) - 1
    for b in batch:
        labelled = next((j for j, v in enumerate(b["labels"]) if v != -100), len(b["labels"]))
        n = min(n, labelled - 1)
    n = max(n, 0)
    for b in batch[1:]:
        ids = b["input_ids"]
        k = 0
        while k < n and ids[k] == first[k]:
            k += 1
        n = k
    return n


def collate_shared_prefix(batch: list[dict[str, list[int]]], pad_id: int, min_prefix: int = 16) -> dict[str, Any]:
    """:func:`collate_left` for a batch whose rows start with the same tokens (one role's system prompt and
    tools): those tokens go once into ``prefix_ids`` (1 x P) and the rows keep the rest, so the forward
    and backward pass run the prefix once instead of once per row (:func:`completion_loss`). A batch of one
    row or with a common prefix under ``min_prefix`` tokens is collated by :func:`collate_left`."""
    n = shared_prefix_length(batch)
    if len(batch) < 2 or n < min_prefix:
        return collate_left(batch, pad_id)
    out = collate_left([{"input_ids": b["input_ids"][n:], "labels": b["labels"][n:]} for b in batch], pad_id)
    out["prefix_ids"] = torch.tensor([batch[0]["input_ids"][:n]], dtype=torch.long)
    mask = out["attention_mask"]
    out["attention_mask"] = torch.cat([torch.ones((len(batch), n), dtype=mask.dtype), mask], dim=1)
    out["position_ids"] = out["position_ids"] + n
    return out
