"""Prompt-lookup drafts for speculative decoding, and the rule that keeps sampling exact.

An agent's turn copies much of its context: tool names, ids and arguments from the tools and the request, JSON
keys from earlier calls, the tags of the turn format. :class:`PromptLookup` proposes, for a row whose text ends
in some ``n`` tokens that occurred earlier in its prompt or completion, the tokens that followed that earlier
occurrence (the longest ``n`` from ``max_ngram`` down to ``min_ngram``, its latest occurrence). The engine feeds
the row's next token and its draft in one forward, which gives the model's distribution at every drafted position,
and :func:`accepted_length` keeps the longest run of drafted tokens that the model's own samples reproduce.

The rule is exact: at each drafted position a token is sampled from the model's distribution (the argmax when
greedy) given everything before it; a drafted token is kept only if the sample equals it, and the first sample
that differs is emitted in its place and ends the step. Every emitted token is therefore a sample of the model
given the tokens before it, as one-token-per-forward decoding would draw it: the output distribution, and the
log-probs, are those of plain decoding; only the number of forwards changes.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["PromptLookup", "accepted_length", "step_width"]


class PromptLookup:
    """Draft tokens for a growing token sequence by looking up its last ``n`` tokens in itself.

    ``tokens`` is the context so far (a prompt); :meth:`extend` appends generated tokens; :meth:`draft` returns up
    to ``k`` tokens that followed the latest earlier occurrence of the context's last ``n`` tokens, for the largest
    ``n`` in ``max_ngram .. min_ngram`` that occurred before (empty when none did). Each n-gram's latest position
    is kept in a dict, so a lookup costs a few dict reads whatever the length of the context.
    """

    def __init__(self, tokens: Sequence[int], max_ngram: int = 3, min_ngram: int = 2) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got min_ngram={min_ngram}, max_ngram={max_ngram}")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.tokens: list[int] = []
        self._latest: dict[tuple[int, ...], int] = {}  # n-gram -> index of its last token (a token follows it)
        self._indexed = 0  # n-grams ending before this index are in _latest
        self.extend(tokens)

    def extend(self, tokens: Sequence[int]) -> None:
        """Append ``tokens`` to the context."""
        self.tokens.extend(int(t) for t in tokens)
        ctx, latest = self.tokens, self._latest
        for end in range(self._indexed, len(ctx) - 1):  # an n-gram is indexed once a token follows it
            for n in range(self.min_ngram, min(self.max_ngram, end + 1) + 1):
                latest[tuple(ctx[end - n + 1 : end + 1])] = end
        self._indexed = max(self._indexed, len(ctx) - 1)

    def draft(self, k: int) -> list[int]:
        """Up to ``k`` tokens that followed the latest earlier occurrence of the longest matching suffix."""
        ctx = self.tokens
        if k <= 0:
            return []
        for n in range(min(self.max_ngram, len(ctx)), self.min_ngram - 1, -1):
            end = self._latest.get(tuple(ctx[len(ctx) - n :]))
            if end is not None:
                return ctx[end + 1 : end + 1 + k]
        return []


def accepted_length(draft: Sequence[int], sampled: Sequence[int]) -> int:
    """How many drafted tokens the samples reproduce: the first ``a`` with ``sampled[a] != draft[a]`` (or
    ``len(draft)``). ``sampled[j]`` is the model's sample at the position of ``draft[j]``, given the row's tokens
    and ``draft[:j]``; the step emits ``sampled[: a + 1]`` (``draft[:a]`` and the sample that ended the run)."""
    a = 0
    while a < len(draft) and sampled[a] == draft[a]:
        a += 1
    return a


def step_width(lengths: Sequence[int], rows: int) -> int:
    """The draft width of a decode step of ``rows`` rows whose drafts have ``lengths``: the longest width that at
    least half of the rows fill (0: no drafts this step). Every row computes the step's width, so a draft that
    few rows share would mostly compute padding; at this width at most half of the drafted positions are
    padding."""
    ordered = sorted(lengths, reverse=True)
    need = (rows + 1) // 2
    return ordered[need - 1] if 0 < need <= len(ordered) else 0
