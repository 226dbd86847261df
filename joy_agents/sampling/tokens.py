"""Token sampling and stop rules, shared by the three samplers: one decode step from logits to tokens, and when
a row ends.

* :func:`sample_tokens` draws the next token of every row from raw logits (``temperature == 0``: greedy;
  otherwise ``softmax(logits / temperature)`` within the ``top_p`` nucleus, :func:`nucleus_logits`, drawn by
  :func:`draw_tokens`: one uniform number per row, not one random number per vocabulary entry) and returns
  its log-prob ``log_softmax(logits / temperature)`` (temperature 1 when greedy), computed from the raw logits and
  not renormalised over the nucleus: the quantity ``TeamPolicy.logprobs`` recomputes for the update.
  :class:`LogprobRecorder` applies the same rule inside ``model.generate`` (the ``generate`` sampler).
* :class:`StopRules` (:func:`stop_rules`, :func:`team_stop_rules`) says which ids end a role's rows (EOS and
  end-of-turn ids, stop strings spelled by a single token), which stop strings must be found in the decoded tail
  of a row, and which ids are left out of a sample's text. :meth:`StopRules.reason` ends one row (the
  ``continuous`` sampler), :class:`StopCriterion` a whole ``generate`` batch, vLLM gets the same ids and strings;
  :meth:`StopRules.texts` decodes the finished completions of all three. Only a row whose last token can complete
  a stop string (:func:`stop_end_candidates`) has its tail decoded.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from joy_agents.adapters import vocab_size

__all__ = [
    "LogprobRecorder",
    "StopCriterion",
    "StopRules",
    "candidate_list",
    "draw_tokens",
    "nucleus_logits",
    "sample_rows",
    "sample_tokens",
    "stop_end_candidates",
    "stop_rules",
    "take_tokens",
    "team_stop_rules",
]


def nucleus_logits(scaled: torch.Tensor, top_p: float) -> torch.Tensor:
    """``scaled`` (rows, vocab) with every token outside the ``top_p`` nucleus set to ``-inf`` (the most likely
    token always stays)."""
    sorted_logits, order = torch.sort(scaled, dim=-1, descending=False)
    cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    drop_sorted = cum <= (1.0 - top_p)
    drop_sorted[:, -1] = False  # the most likely token always stays
    drop = drop_sorted.scatter(1, order, drop_sorted)
    return scaled.masked_fill(drop, float("-inf"))


def sample_tokens(logits: torch.Tensor, temperature: float, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The next token of every row of raw ``logits`` (rows, vocab) and its log-prob (see the module
    documentation): two (rows,) tensors."""
    logits = logits.float()
    if temperature == 0:
        tokens = logits.argmax(-1)
        scaled = logits
    else:
        scaled = logits / temperature if temperature != 1.0 else logits
        kept = nucleus_logits(scaled, top_p) if top_p < 1.0 else scaled
        tokens = draw_tokens(kept.softmax(-1))
    picked = scaled.gather(1, tokens[:, None]).squeeze(1) - torch.logsumexp(scaled, dim=-1)
    return tokens, picked


DRAW_BLOCK = 1024
"""Vocabulary entries per block of :func:`draw_tokens`."""


def sample_rows(logits: torch.Tensor, settings: Sequence[Any | None]) -> tuple[torch.Tensor, torch.Tensor]:
    """The tokens and log-probs of every row's positions (``logits``: rows, width, vocab), each row with the
    temperature and ``top_p`` of its own settings (a :class:`~joy_agents.sampling.settings.SamplingConfig`; None: a
    free row, sampled with any): two (rows, width) tensors. Rows of one setting are sampled in one call, all of them
    when every row has the same, so a batch of one setting samples exactly as :func:`sample_tokens` does."""
    slots, width = logits.shape[:2]
    known = [s for s in settings if s is not None]
    kinds = {(s.temperature, s.top_p) for s in known}
    if len(kinds) == 1:
        (temperature, top_p), flat = kinds.pop(), logits.reshape(-1, logits.shape[-1])
        tokens, logprobs = sample_tokens(flat, temperature, top_p)  # (slots * width,)
        return tokens.view(slots, width), logprobs.view(slots, width)
    tokens = torch.zeros((slots, width), dtype=torch.long, device=logits.device)
    logprobs = torch.zeros((slots, width), dtype=torch.float32, device=logits.device)
    kind_of = [(s.temperature, s.top_p) if s is not None else None for s in settings]
    for kind in sorted(kinds):
        rows = [i for i, k in enumerate(kind_of) if k == kind]
        temperature, top_p = kind
        index = torch.tensor(rows, device=logits.device)
        picked, lps = sample_tokens(logits[index].reshape(-1, logits.shape[-1]), temperature, top_p)
        tokens[index], logprobs[index] = picked.view(len(rows), width), lps.view(len(rows), width)
    return tokens, logprobs


def take_tokens(
    tokens: list[int], logprobs: list[float], ids: Sequence[int], lps: Sequence[float], rules: StopRules, cap: int
) -> str | None:
    """Append a row's new ``ids`` (its sample, after the drafted tokens it kept) and their log-probs ``lps`` to its
    ``tokens`` and ``logprobs`` one at a time, up to the first that ends the row (:meth:`StopRules.reason` with the
    token cap ``cap``); returns why the row ended, or None while it runs on. The tokens after a stop are not taken."""
    reason = None
    for tok, lp in zip(ids, lps, strict=True):
        tokens.append(tok)
        logprobs.append(lp)
        reason = rules.reason(tokens, cap)
        if reason:
            break
    return reason


def draw_tokens(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token id per row of ``probs`` (rows, vocab: non-negative, each row with a positive sum, not necessarily
    1), drawn with probability proportional to its entry: (rows,).

    One uniform number per row, found in the row's cumulative distribution in two levels: the vocabulary in blocks
    of :data:`DRAW_BLOCK` entries, the block whose cumulative mass holds the number, then the entry within that block
    (each block's sum in float32, the running sums in float64: rounding moves at most about 1e-7 of a block's mass
    between its neighbours, against about 1e-3 for one float32 running sum over the whole vocabulary). This draws
    from the same distribution as ``torch.multinomial(probs, 1)``, which draws one exponential number per vocabulary
    entry: on a CPU with a 49k vocabulary that is most of a decode step's sampling time. An entry of 0 is never
    drawn."""
    rows, vocab = probs.shape
    pad = (-vocab) % DRAW_BLOCK
    blocks = (torch.nn.functional.pad(probs, (0, pad)) if pad else probs).view(rows, -1, DRAW_BLOCK)
    sums = blocks.sum(-1).double()  # (rows, blocks)
    cumulative = sums.cumsum(-1)
    u = torch.rand((rows, 1), dtype=torch.float64, device=probs.device, generator=generator) * cumulative[:, -1:]
    block = torch.searchsorted(cumulative, u, right=True).clamp_(max=cumulative.shape[1] - 1)  # (rows, 1)
    rest = (u - (cumulative.gather(1, block) - sums.gather(1, block))).clamp_(min=0)  # the mass left in the block
    inner = blocks[torch.arange(rows, device=probs.device), block.squeeze(1)].double().cumsum(-1)  # (rows, block)
    last = (inner < inner[:, -1:]).sum(-1, keepdim=True)  # the block's last positive entry (rounding guard)
    return (block * DRAW_BLOCK + torch.minimum(torch.searchsorted(inner, rest, right=True), last)).squeeze(1)


@dataclass(frozen=True)
class StopRules:
    """How a role's rows end (:func:`stop_rules`)."""

    end_ids: frozenset[int]
    """Ids that end a row: EOS / end-of-turn ids and the stop strings spelled by a single token."""
    text_stops: tuple[str, ...]
    """Stop strings found only in the decoded tail of a row."""
    hidden: frozenset[int]
    """Ids left out of a sample's text: end-of-turn and padding (special tokens), never content such as
    ``</answer>``, even when the model's ``generation_config`` lists it as an EOS id."""
    tokenizer: Any = field(default=None, repr=False, compare=False)
    """The tokenizer the rules are of (it decodes tails and texts)."""
    candidates: list[bool] | None = field(default=None, repr=False, compare=False)
    """Per token id, whether it can complete a text stop (:func:`stop_end_candidates`); None without text stops."""

    @property
    def tail(self) -> int:
        """Tokens of a row's tail decoded to look for a text stop: a stop of b bytes is covered by at most b
        tokens, and one more for a token that starts before it."""
        return max((len(s.encode("utf-8")) for s in self.text_stops), default=0) + 1

    def reason(self, tokens: list[int], max_new_tokens: int) -> str | None:
        """Why a row whose completion is ``tokens`` (its last token just sampled) ends: ``"stop"`` (an end id,
        or a text stop in its decoded tail), ``"length"`` (``max_new_tokens`` reached), or None."""
        tok = tokens[-1]
        if tok in self.end_ids:
            return "stop"
        cand = self.candidates
        if self.text_stops and cand is not None and (tok >= len(cand) or cand[tok]):
            text = self.tokenizer.decode(
                tokens[-self.tail :], skip_special_tokens=False, clean_up_tokenization_spaces=False
            )
            if any(s in text for s in self.text_stops):
                return "stop"
        if len(tokens) >= max_new_tokens:
            return "length"
        return None

    def texts(self, completions: Sequence[Sequence[int]]) -> list[str]:
        """The texts of finished completions: decoded with special tokens kept, the :attr:`hidden` ids left out."""
        return self.tokenizer.batch_decode(
            [[t for t in c if t not in self.hidden] for c in completions],
            skip_special_tokens=False,
            clean_up_tokenization_spaces=False,
        )


def stop_rules(tokenizer: Any, eos_ids: Sequence[int], stop: Sequence[str], vocab_size: int | None = None) -> StopRules:
    """The :class:`StopRules` of ``tokenizer`` with EOS ids ``eos_ids`` and stop strings ``stop`` (``vocab_size``:
    the model's embedding rows, when more than the tokenizer's). An added token (e.g. ``</answer>`` of the tiny
    tokenizer) is always encoded alone, so its id alone detects it; only other stop strings need the decoded
    tail."""
    single = set()
    for text in stop:
        enc = tokenizer.encode(text, add_special_tokens=False)
        if len(enc) == 1:
            single.add(int(enc[0]))
    added = tokenizer.get_added_vocab()
    specials = {int(t) for t in tokenizer.all_special_ids}
    text_stops = tuple(text for text in stop if text not in added)
    return StopRules(
        end_ids=frozenset(set(eos_ids) | single),
        text_stops=text_stops,
        hidden=frozenset((set(eos_ids) & specials) | {int(tokenizer.pad_token_id)}),
        tokenizer=tokenizer,
        candidates=candidate_list(tokenizer, text_stops, vocab_size) if text_stops else None,
    )


def team_stop_rules(team: Any, role: str, stop: Sequence[str]) -> StopRules:
    """The :class:`StopRules` of ``role`` of a :class:`~joy_agents.policy.TeamPolicy` (its tokenizer, its EOS and
    end-of-turn ids, :meth:`~joy_agents.policy.TeamPolicy.eos_ids`) with the stop strings ``stop``."""
    return stop_rules(team.tokenizer_for(role), team.eos_ids(role), stop, vocab_size(team.model_for(role)))


class LogprobRecorder:
    """Logits processor: records log_softmax(raw_logits / T) of each sampled token, applies temperature/top-p.

    Called once per generation step with the RAW logits (it is the only processor). The token sampled at
    step t is only known at step t+1 (last column of ``input_ids``), so the scaled logits of the previous step
    are kept (one batch x vocab buffer) and ``finish`` gathers the last step from the returned sequences.
    """

    def __init__(self, temperature: float, top_p: float) -> None:
        self.sampling = temperature > 0
        self.temperature = temperature if self.sampling else 1.0
        self.top_p = top_p
        self._prev: torch.Tensor | None = None
        self._prev_lse: torch.Tensor | None = None
        self.steps: list[torch.Tensor] = []

    def _gather_prev(self, tokens: torch.Tensor) -> None:
        assert self._prev is not None and self._prev_lse is not None
        picked = self._prev.gather(1, tokens.view(-1, 1).to(self._prev.device)).squeeze(1)
        self.steps.append(picked - self._prev_lse)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self._prev is not None:
            self._gather_prev(input_ids[:, -1])
        scaled = scores.float()
        if self.temperature != 1.0:
            scaled = scaled / self.temperature
        self._prev = scaled
        self._prev_lse = torch.logsumexp(scaled, dim=-1)
        if not self.sampling:
            return scores
        if self.top_p < 1.0:
            return nucleus_logits(scaled, self.top_p)
        return scaled

    def finish(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """(rows, steps) log-probs of ``new_tokens`` (the generated columns)."""
        n = new_tokens.shape[1]
        if n == 0:
            return torch.zeros(new_tokens.shape[0], 0)
        if len(self.steps) == n - 1:
            self._gather_prev(new_tokens[:, -1])
        if len(self.steps) != n:
            raise RuntimeError(
                f"internal error: recorded {len(self.steps)} log-prob steps for {n} generated tokens; another "
                "logits processor or a generation mode with several tokens per step (assisted decoding) was used"
            )
        self._prev = self._prev_lse = None
        return torch.stack(self.steps, dim=1)


_END_CANDIDATES: weakref.WeakKeyDictionary[Any, dict[tuple[tuple[str, ...], int], Any]] = weakref.WeakKeyDictionary()


def stop_end_candidates(tokenizer: Any, stop_strings: Sequence[str], vocab_size: int | None = None) -> torch.Tensor:
    """A boolean mask over token ids: ``True`` for the tokens that can complete one of ``stop_strings``.

    A stop string first appears in a row's text when the token just generated holds its last character (the
    token's own text contains a suffix of the stop, or the whole stop), so only rows whose last token contains
    the last character of a stop string need their tail decoded. Tokens that decode alone to an incomplete
    UTF-8 sequence (``\ufffd``) count when a stop ends in a non-ASCII character, and ids beyond the
    tokenizer (a padded embedding) always count. Computed once per tokenizer and stop strings (one
    ``batch_decode`` of the vocabulary).
    """
    n = max(len(tokenizer), int(vocab_size or 0))
    key = (tuple(stop_strings), n)
    try:
        per_tok = _END_CANDIDATES.setdefault(tokenizer, {})
    except TypeError:  # not weak-referenceable: no cache
        per_tok = {}
    if key in per_tok:
        return per_tok[key]
    ends = {st[-1] for st in stop_strings if st}
    wide = any(not c.isascii() for c in ends)
    texts = tokenizer.batch_decode(
        [[i] for i in range(len(tokenizer))], skip_special_tokens=False, clean_up_tokenization_spaces=False
    )
    mask = torch.ones(n, dtype=torch.bool)
    for i, text in enumerate(texts):
        mask[i] = any(c in text for c in ends) or (wide and "\ufffd" in text)
    per_tok[key] = mask
    return mask


def candidate_list(tokenizer: Any, stop_strings: Sequence[str], vocab_size: int | None = None) -> list[bool]:
    """:func:`stop_end_candidates` as a list (one Python bool per id: what a per-row check indexes fastest),
    computed once per tokenizer and stop strings."""
    mask = stop_end_candidates(tokenizer, stop_strings, vocab_size)
    key = (tuple(stop_strings), -len(mask))  # beside the masks in the tokenizer's cache
    try:
        per_tok = _END_CANDIDATES.setdefault(tokenizer, {})
    except TypeError:
        per_tok = {}
    if key not in per_tok:
        per_tok[key] = mask.tolist()
    return per_tok[key]  # type: ignore[return-value]


class StopCriterion:
    """Per-row stop detection: EOS / single-token stops by id, every stop string in the decoded tail.

    Records ``stop_len[row]``: number of generated tokens when the row stopped (-1 while running).
    Only running rows whose last token can complete a stop string (:func:`stop_end_candidates`) are decoded,
    and only their last few tokens; with no stop string, no row is ever decoded.
    """

    def __init__(
        self,
        tokenizer: Any,
        stop_ids: list[int],
        stop_strings: tuple[str, ...],
        prompt_len: int,
        rows: int,
        device: torch.device,
        vocab_size: int | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.stop_ids = torch.tensor(sorted(set(stop_ids)), dtype=torch.long, device=device)
        self.stop_strings = stop_strings
        self.prompt_len = prompt_len
        # a stop string of b bytes is covered by at most b tokens; one more for a token that starts before it
        self.tail = max((len(s.encode("utf-8")) for s in stop_strings), default=0) + 1
        self.done = torch.zeros(rows, dtype=torch.bool, device=device)
        self.stop_len = torch.full((rows,), -1, dtype=torch.long, device=device)
        self.candidates = stop_end_candidates(tokenizer, stop_strings, vocab_size).to(device) if stop_strings else None
        self.decoded_rows = 0
        """Row tails decoded so far (a measure of the text matching's cost)."""

    def __call__(self, input_ids: torch.Tensor, scores: Any = None, **kwargs: Any) -> torch.Tensor:
        length = input_ids.shape[1]
        n_new = length - self.prompt_len
        last = input_ids[:, -1]
        if self.stop_ids.numel():
            hit = torch.isin(last, self.stop_ids) & ~self.done
        else:
            hit = torch.zeros_like(self.done)
        if self.candidates is not None:
            ends = self.candidates[last.clamp(0, self.candidates.numel() - 1)] | (last >= self.candidates.numel())
            running = (~self.done & ~hit & ends).nonzero().flatten()
            if running.numel():
                start = max(self.prompt_len, length - self.tail)
                tails = self.tokenizer.batch_decode(
                    input_ids[running, start:].tolist(),
                    skip_special_tokens=False,
                    clean_up_tokenization_spaces=False,
                )
                self.decoded_rows += len(tails)
                found = [i for i, text in enumerate(tails) if any(s in text for s in self.stop_strings)]
                if found:
                    hit[running[found]] = True
        self.stop_len[hit] = n_new
        self.done |= hit
        return self.done.clone()
