"""Kept prefixes: the KV cache of finished rows, reused by later prompts of the same role that start with them.

When a row of the continuous engine finishes, the keys and values of its prompt and completion (all but the last
token) are kept in its model's :class:`PrefixCache`, up to a budget of tokens (least recently used first out). A
later prompt of the same role that shares at least ``MIN_REUSE`` first tokens with a kept prefix (the episode's
next turn: its prompt is the last one plus the turn and what came back; any prompt with the same system prompt
and tools) takes those keys and values (:meth:`PrefixCache.cache_of`) and prefills only the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers.cache_utils import DynamicCache

__all__ = ["MIN_REUSE", "KeptPrefix", "PrefixCache", "common_prefix"]

MIN_REUSE = 16
"""Fewest first tokens a prompt must share with a kept prefix for its cache to be reused."""


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """How many first tokens ``a`` and ``b`` share."""
    k = min(len(a), len(b))
    same = a[:k] == b[:k]
    return k if bool(same.all()) else int(same.argmin())


@dataclass(eq=False)
class KeptPrefix:
    """The KV cache of a finished row's tokens."""

    role: str
    tokens: np.ndarray  # (L,)
    keys: list[torch.Tensor]  # per layer (heads, L, dim)
    values: list[torch.Tensor]
    used: int = 0
    """When it was last kept or reused (the cache's clock)."""


class PrefixCache:
    """The kept prefixes of one model, at most ``limit`` tokens in all (see the module documentation)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.entries: list[KeptPrefix] = []
        self.tokens = 0
        self._clock = 0

    def __len__(self) -> int:
        """How many prefixes are kept."""
        return len(self.entries)

    def __iter__(self) -> Iterator[KeptPrefix]:
        return iter(self.entries)

    def clear(self) -> None:
        """Drop every kept prefix (the weights changed, or memory ran out)."""
        self.entries, self.tokens = [], 0

    def find(self, role: str, context: list[int]) -> tuple[KeptPrefix, int] | None:
        """The kept prefix of ``role`` sharing the most first tokens with ``context`` (all but its last token, the
        one a decode step feeds), and how many; None under ``MIN_REUSE`` tokens."""
        if not self.entries:
            return None
        need = np.asarray(context[:-1])
        best, length = None, 0
        for entry in self.entries:
            if entry.role == role:
                n = common_prefix(entry.tokens, need)
                if n > length:
                    best, length = entry, n
        if best is None or length < MIN_REUSE:
            return None
        return best, length

    def keep(self, role: str, tokens: list[int], kv: Callable[[int], tuple[list[Any], list[Any]]]) -> None:
        """Keep the KV cache of ``tokens`` of ``role`` (``kv(n)`` gives the per-layer keys and values of the first
        ``n``) unless it is over the budget or already kept; :meth:`evict` then brings the total under it."""
        kept = np.asarray(tokens)
        if len(kept) > self.limit or any(
            e.role == role and len(e.tokens) == len(kept) and bool((e.tokens == kept).all()) for e in self.entries
        ):
            return
        keys, values = kv(len(kept))
        self._clock += 1
        self.entries.append(KeptPrefix(role, kept, keys, values, self._clock))
        self.tokens += len(kept)

    def evict(self) -> None:
        """Drop the least recently used prefixes until the kept tokens fit the budget."""
        while self.tokens > self.limit:
            oldest = min(self.entries, key=lambda e: e.used)
            self.entries.remove(oldest)
            self.tokens -= len(oldest.tokens)

    def cache_of(self, found: list[tuple[KeptPrefix, int]], config: Any) -> tuple[DynamicCache, int]:
        """A cache of one row per ``(prefix, n)`` holding the prefix's first ``n`` keys and values, right-aligned to
        the longest ``n`` (returned too); the prefixes count as used now."""
        kept = max(n for _, n in found)
        cache = DynamicCache(config=config)
        for layer in range(len(found[0][0].keys)):
            keys = torch.stack([_left_pad_to(e.keys[layer][:, :n], kept, 1) for e, n in found])  # (n, H, K, D)
            values = torch.stack([_left_pad_to(e.values[layer][:, :n], kept, 1) for e, n in found])
            cache.update(keys, values, layer)
        for entry, _ in found:
            self._clock += 1
            entry.used = self._clock
        return cache, kept


def _left_pad_to(t: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    extra = width - t.shape[dim]
    if extra <= 0:
        return t
    shape = list(t.shape)
    shape[dim] = extra
    return torch.cat([t.new_zeros(shape), t], dim=dim)
