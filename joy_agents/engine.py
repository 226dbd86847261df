"""Continuous batching: every live request of the team in one decode batch, whatever its role.

:class:`ContinuousSampler` is the generation engine of the rollouts (``RolloutConfig.engine="continuous"``,
the default). Requests (a role and its prompt ids) are submitted at any time; each :meth:`~ContinuousSampler.step`
runs ONE decode forward per model over every running row and returns the samples that finished in it:

* **one batch for all roles**: roles that share the base model (one LoRA adapter each) decode together, each
  row through its own adapter (:class:`~joy_agents.stacked_lora.StackedLoRA`: every role's adapter in a few
  kernels per layer; PEFT's ``adapter_names=`` for LoRA variants it does not cover); a role with a separate
  model has a batch (a *lane*) of its own;
* **rows that finish make room**: a row leaves the batch at its stop token or its token cap and frees its slot of
  the KV cache, and waiting requests join at the next step (their prompts prefilled, a prompt shared by several
  rows and the start that the joiners of a role share computed once, :func:`~joy_agents.prefill.prefill_shared`);
  so nothing waits for the slowest row, and an episode whose turn ended submits its next turn while the others
  decode. The cache lives in slots with room to grow (:mod:`joy_agents.kv_slots`): a decode step writes one
  column in place, a joiner writes its own slot;
* **kept prefixes**: the KV cache of finished rows is kept (up to ``prefix_tokens``), and a prompt of the same
  role that starts with a kept row's tokens (the episode's next turn, or any prompt with the same system prompt
  and tools) prefills only the rest;
* **drafted tokens** (``draft_tokens`` > 0): while few rows run (``draft_max_rows``), each row's next token goes
  in with up to ``draft_tokens`` tokens that prompt lookup proposes (:mod:`joy_agents.drafts`: what followed the
  last occurrence of the row's last tokens in its own prompt or completion); the one forward gives the model's
  sample at every drafted position, and the row keeps the drafted tokens up to the first sample that differs,
  which it keeps in their place. The samples and log-probs are those of one token per forward; an agent's turn
  copies ids, names and JSON from its context, so the long tail of a rollout (a few long episodes decoding
  alone) runs in fewer forwards. A step's drafts are cut to the width that at least half of the running rows
  fill, so that padding never outweighs the drafted positions. The columns of rejected drafts are masked out,
  and cut at the next compaction.

Sampling is that of :meth:`~joy_agents.policy.TeamPolicy.generate`: ``temperature == 0`` is greedy, otherwise
``softmax(logits / temperature)`` within the ``top_p`` nucleus; ``Sample.logprobs`` are ``log_softmax(logits /
temperature)`` of the raw logits at the sampled tokens (temperature 1 when greedy), the quantity
``TeamPolicy.logprobs`` recomputes for the update; stops are the same (end-of-turn and EOS ids, ``stop``
strings found in the decoded tail of a row whose last token can complete one; a stop inside a row's kept draft
ends the row there). Each step copies its sampled tokens to the host once (the scheduler needs them to retire
rows and check drafts); keeping a finished row's prefix and a compaction add one copy each, only in the steps
where they happen.

Models whose cache is not a plain per-layer key/value cache (sliding-window or other special attention layers)
are refused by :func:`continuous_supported`; the rollout engine then uses ``generate`` per role. Not here yet: a
static cache with compiled or CUDA-graph decode steps (on a GPU, the ``vllm`` engine has them:
:mod:`joy_agents.vllm_engine`).
"""

from __future__ import annotations

import collections
import contextlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from joy_agents.adapters import _hf_model, _vocab_size
from joy_agents.config import Sample, SamplingConfig
from joy_agents.decoding import nucleus_logits, stop_end_candidates, stop_rules
from joy_agents.drafts import PromptLookup, accepted_length, step_width
from joy_agents.engine_stats import EngineStats
from joy_agents.kv_slots import SlotBatch
from joy_agents.policy import TeamPolicy, _as_id_list
from joy_agents.prefill import _cache_argument, plain_layout, prefill_shared, prompt_layout
from joy_agents.stacked_lora import StackedLoRA

ENGINES = ("continuous", "generate", "vllm")
"""Generation engines of the rollouts (``RolloutConfig.engine``) and of :func:`sample_many`."""

MIN_REUSE = 16
"""Fewest first tokens a prompt must share with a kept prefix for its cache to be reused."""

__all__ = ["ContinuousSampler", "EngineStats", "StackedLoRA", "continuous_supported", "sample_many"]


def continuous_supported(team: Any) -> bool:
    """Whether ``team`` is a :class:`~joy_agents.policy.TeamPolicy` whose every model keeps a plain key/value cache
    per layer (full attention in every layer), the cache :class:`ContinuousSampler` rearranges. Another policy
    object (anything with ``generate`` and ``fit_prompt``) is sampled per role."""
    if not isinstance(team, TeamPolicy):
        return False
    for role in team.roles:
        config = _hf_model(team.model_for(role)).config
        if hasattr(config, "get_text_config"):
            config = config.get_text_config()
        kinds = set(getattr(config, "layer_types", None) or ["full_attention"])
        if kinds != {"full_attention"} or getattr(config, "use_sliding_window", False):
            return False
        # the cache the model itself would build (a sliding window named only by ``sliding_window``, ...)
        if any(type(layer) is not DynamicLayer for layer in DynamicCache(config=config).layers):
            return False
    return True


def _check_count(name: str, value: Any, minimum: int, meaning: str = "") -> None:
    """Refuse ``value`` unless it is an int >= ``minimum`` (``meaning`` explains a special value)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}{meaning}, got {value!r}")


@dataclass
class _Row:
    key: Any
    role: str
    prompt: list[int]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    lookup: PromptLookup | None = None


@dataclass(eq=False)
class _Prefix:
    """The KV cache of a finished row's tokens, kept for later prompts of the same role that start with them."""

    role: str
    tokens: np.ndarray  # (L,)
    keys: list[torch.Tensor]  # per layer (heads, L, dim)
    values: list[torch.Tensor]
    used: int = 0


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """How many first tokens ``a`` and ``b`` share."""
    k = min(len(a), len(b))
    same = a[:k] == b[:k]
    return k if bool(same.all()) else int(same.argmin())


class _Lane:
    """The running batch of one model (:class:`~joy_agents.kv_slots.SlotBatch`), its waiting rows and kept
    prefixes."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, shared: bool, device: torch.device) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.shared = shared  # a PeftModel holding several roles' adapters
        self.batch = SlotBatch(_hf_model(model).config, device, int(tokenizer.pad_token_id))
        self.waiting: collections.deque[_Row] = collections.deque()
        self.prefixes: list[_Prefix] = []
        self.prefix_tokens = 0
        self._parameters = list(model.parameters())
        self.version = self.weights_version()

    def weights_version(self) -> int:
        """Grows whenever a weight of the model changes in place (an optimizer step, ``load_state_dict``)."""
        return sum(p._version for p in self._parameters)

    @property
    def running(self) -> int:
        return len(self.batch.live)


def _left_pad_to(t: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    extra = width - t.shape[dim]
    if extra <= 0:
        return t
    shape = list(t.shape)
    shape[dim] = extra
    return torch.cat([t.new_zeros(shape), t], dim=dim)


class ContinuousSampler:
    """Continuous batching over a :class:`~joy_agents.policy.TeamPolicy` (see the module documentation).

    ``max_rows`` caps the rows decoded together per model; more requests wait for a free row.
    ``prefix_tokens`` caps the tokens of finished rows whose KV cache is kept (least recently used first out) for
    later prompts of the same role that start with the same tokens: the next turn of an episode (its prompt is the
    last one plus the turn and what came back) and the system prompt and tools every prompt of a role starts with
    prefill only what they add. ``draft_tokens`` (0: none) drafts up to that many tokens per row and step by prompt
    lookup while a model decodes at most ``draft_max_rows`` rows (see the module documentation).

    A sampler may live across updates of the weights made between batches of requests (while no row runs): a
    weight changed in place is noticed when rows next join, and the kept prefixes and stacked adapters, computed
    with the old weights, are dropped. :meth:`close` (or leaving ``with``) frees every cache.
    """

    def __init__(
        self,
        team: Any,
        sampling: SamplingConfig,
        max_rows: int = 256,
        prefix_tokens: int = 32768,
        draft_tokens: int = 0,
        draft_max_rows: int = 64,
    ) -> None:
        if not isinstance(sampling, SamplingConfig):
            raise TypeError(f"sampling must be a SamplingConfig, got {type(sampling).__name__}")
        _check_count("max_rows", max_rows, 1)
        _check_count("prefix_tokens", prefix_tokens, 0, " (0: keep none)")
        _check_count("draft_tokens", draft_tokens, 0, " (0: no drafts)")
        _check_count("draft_max_rows", draft_max_rows, 1)
        self.draft_tokens, self.draft_max_rows = draft_tokens, draft_max_rows
        self.team = team
        self.prefix_tokens = prefix_tokens
        self.sampling = sampling
        self.max_rows = max_rows
        self.stats = EngineStats()
        self._lanes: dict[int, _Lane] = {}
        self._role_lane: dict[str, _Lane] = {}
        self._ends: dict[int, tuple[set[int], tuple[str, ...], list[bool] | None, set[int], int]] = {}
        self._training: list[torch.nn.Module] = []
        self._stack: StackedLoRA | None = None
        self._clock = 0

    # ------------------------------------------------------------------ requests
    def submit(self, role: str, prompt_ids: list[int], key: Any, num_samples: int = 1) -> None:
        """Queue ``num_samples`` samples of ``prompt_ids`` by ``role``; each comes back from :meth:`step` as
        ``(key, sample)``."""
        self.team._check_role(role)
        prompt = _as_id_list("prompt_ids", prompt_ids)
        _check_count("num_samples", num_samples, 1)
        if len(prompt) < 2:
            raise ValueError(f"a prompt needs at least 2 tokens for continuous batching, got {len(prompt)}")
        self.team._check_ids(role, [prompt], extra=self.sampling.max_new_tokens)
        lane = self._lane(role)
        for _ in range(num_samples):
            lane.waiting.append(_Row(key=key, role=role, prompt=prompt))

    @property
    def busy(self) -> bool:
        """Whether requests are running or waiting."""
        return any(lane.running or lane.waiting for lane in self._lanes.values())

    def _lane(self, role: str) -> _Lane:
        if role not in self._role_lane:
            model = self.team.model_for(role)
            if id(model) not in self._lanes:
                shared = model is getattr(self.team, "_shared", None)
                self._lanes[id(model)] = _Lane(model, self.team.tokenizer_for(role), shared, self.team.device)
            self._role_lane[role] = self._lanes[id(model)]
        return self._role_lane[role]

    def _end_rules(self, lane: _Lane, role: str) -> tuple[set[int], tuple[str, ...], list[bool] | None, set[int], int]:
        """A lane's stop ids, text stops, stop-candidate table, ids hidden from texts and tail length."""
        if id(lane) not in self._ends:
            tok = lane.tokenizer
            rules = stop_rules(tok, self.team._eos_ids(role), self.sampling.stop)
            text_stops = rules.text_stops
            vocab = _vocab_size(lane.model)
            candidates = stop_end_candidates(tok, text_stops, vocab).tolist() if text_stops else None
            tail = max((len(s.encode("utf-8")) for s in text_stops), default=0) + 1
            self._ends[id(lane)] = (set(rules.end_ids), text_stops, candidates, set(rules.hidden), tail)
        return self._ends[id(lane)]

    # ------------------------------------------------------------------ one step
    def step(self) -> list[tuple[Any, Sample]]:
        """Admit waiting requests, run one decode forward per model with rows, return the finished samples."""
        finished: list[tuple[Any, Sample]] = []
        with torch.no_grad():
            for lane in self._lanes.values():
                if not (lane.running or lane.waiting):
                    continue
                if lane.model.training:  # switched once per sampler (walking the modules costs), restored by close
                    self._training.append(lane.model)
                    lane.model.eval()
                self._admit(lane)
                finished += self._decode(lane)
        return finished

    def close(self) -> None:
        """Give the models back their training mode (sampling runs them in eval mode) and free the caches: the
        running rows, the kept prefixes and the stacked adapters. Requests still running or waiting are dropped."""
        for model in self._training:
            model.train()
        self._training = []
        self._lanes, self._role_lane, self._ends, self._stack = {}, {}, {}, None

    def __enter__(self) -> ContinuousSampler:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _admit(self, lane: _Lane) -> None:
        room = self.max_rows - lane.running
        if room <= 0 or not lane.waiting:
            return
        version = lane.weights_version()
        if version != lane.version:  # the weights changed: kept caches and the stacked adapters are stale
            lane.prefixes, lane.prefix_tokens, lane.version = [], 0, version
            if lane.shared:
                self._stack = None
        joiners = [lane.waiting.popleft() for _ in range(min(room, len(lane.waiting)))]
        self.stats.prompt_tokens += sum(len(r.prompt) for r in joiners)
        by_role: dict[str, list[_Row]] = {}
        reusing: dict[str, list[tuple[_Row, _Prefix, int]]] = {}
        for row in joiners:
            found = self._find_prefix(lane, row)
            if found is None:
                by_role.setdefault(row.role, []).append(row)
            else:
                reusing.setdefault(row.role, []).append((row, *found))
        for role, rows in by_role.items():
            self._prefill(lane, role, rows)
        for role, items in reusing.items():
            self._extend(lane, role, items)

    def _adapter(self, lane: _Lane, role: str) -> Any:
        """A context in which ``lane.model`` runs ``role``'s adapter for every row."""
        stacked = self._stacked(lane) if lane.shared else None
        if stacked is None:
            self.team._activate(role)
            return contextlib.nullcontext()
        stacked.set_rows([role])  # one role: its mask broadcasts over any number of rows
        return stacked

    def _prefill(self, lane: _Lane, role: str, rows: list[_Row]) -> None:
        """Prefill the prompts of ``rows`` (all ``role``'s), shared parts once, and add them to the batch."""
        device = self.team.device
        pad_id = int(lane.tokenizer.pad_token_id)
        prompts = [r.prompt for r in rows]
        layout = prompt_layout(prompts, pad_id, device) if self.team.config.share_prefix else None
        layout = layout or plain_layout(prompts, pad_id, device)
        with self._adapter(lane, role):
            cache, _ = prefill_shared(lane.model, layout)
        self.stats.prefill_forwards += 1 + (layout.common > 0)
        width = layout.ids.shape[1]
        mask = layout.mask[layout.index, : width - 1]  # (n, W-1)
        last = layout.ids[layout.index, width - 1]  # (n,)
        pos = layout.positions[layout.index, width - 1]  # (n,)
        lane.batch.add(rows, cache, mask, last, pos)

    def _find_prefix(self, lane: _Lane, row: _Row) -> tuple[_Prefix, int] | None:
        """The kept prefix of ``row``'s role sharing the most first tokens with its prompt (all but the last
        token), and how many; None under ``MIN_REUSE`` tokens."""
        if not lane.prefixes:
            return None
        need = np.asarray(row.prompt[:-1])
        best, length = None, 0
        for entry in lane.prefixes:
            if entry.role == row.role:
                n = common_prefix(entry.tokens, need)
                if n > length:
                    best, length = entry, n
        if best is None or length < MIN_REUSE:
            return None
        return best, length

    def _extend(self, lane: _Lane, role: str, items: list[tuple[_Row, _Prefix, int]]) -> None:
        """Add rows whose prompts start with kept prefixes: each row's kept keys and values (right-aligned), then
        one forward over the rest of every prompt but its last token, padding between them masked out."""
        device = self.team.device
        pad_id = int(lane.tokenizer.pad_token_id)
        self.stats.reused_tokens += sum(n for _, _, n in items)
        kept = max(n for _, _, n in items)
        rests = [row.prompt[n:-1] for row, _, n in items]
        width = max(len(r) for r in rests)
        layers = len(items[0][1].keys)
        cache = DynamicCache(config=_hf_model(lane.model).config)
        for layer in range(layers):
            keys = torch.stack([_left_pad_to(e.keys[layer][:, :n], kept, 1) for _, e, n in items])  # (n, H, K, D)
            values = torch.stack([_left_pad_to(e.values[layer][:, :n], kept, 1) for _, e, n in items])
            cache.update(keys, values, layer)
        for _, entry, _ in items:
            self._clock += 1
            entry.used = self._clock
        mask = torch.zeros((len(items), kept + width), dtype=torch.long)
        ids = torch.full((len(items), width), pad_id, dtype=torch.long)
        positions = torch.zeros((len(items), width), dtype=torch.long)
        for i, ((_, _, n), rest) in enumerate(zip(items, rests, strict=True)):
            mask[i, kept - n : kept] = 1
            if rest:
                ids[i, width - len(rest) :] = torch.tensor(rest)
                mask[i, kept + width - len(rest) :] = 1
                positions[i, width - len(rest) :] = torch.arange(n, n + len(rest))
        mask, ids, positions = mask.to(device), ids.to(device), positions.to(device)
        if width:
            with self._adapter(lane, role):
                lane.model(
                    input_ids=ids,
                    attention_mask=mask,
                    position_ids=positions,
                    use_cache=True,
                    logits_to_keep=1,
                    **{_cache_argument(type(_hf_model(lane.model))): cache},
                )
            self.stats.prefill_forwards += 1
        rows = [row for row, _, _ in items]
        last = torch.tensor([row.prompt[-1] for row in rows], device=device)
        pos = torch.tensor([len(row.prompt) - 1 for row in rows], device=device)
        lane.batch.add(rows, cache, mask, last, pos)

    def _keep_prefixes(self, lane: _Lane, finished: list[int]) -> None:
        """Keep the KV cache of the finished slots' rows (their prompt and completion but the last token)."""
        for i in finished:
            row = lane.batch.rows[i]
            tokens = np.asarray((row.prompt + row.tokens)[:-1])
            if len(tokens) > self.prefix_tokens or any(
                e.role == row.role and len(e.tokens) == len(tokens) and bool((e.tokens == tokens).all())
                for e in lane.prefixes
            ):
                continue
            keys, values = lane.batch.row_kv(i, limit=len(tokens))
            self._clock += 1
            lane.prefixes.append(_Prefix(row.role, tokens, keys, values, self._clock))
            lane.prefix_tokens += len(tokens)
        while lane.prefix_tokens > self.prefix_tokens:
            oldest = min(lane.prefixes, key=lambda e: e.used)
            lane.prefixes.remove(oldest)
            lane.prefix_tokens -= len(oldest.tokens)

    def _drafts(self, batch: Any, live: list[int]) -> dict[int, list[int]]:
        """Each live row's prompt-lookup draft (:class:`~joy_agents.drafts.PromptLookup`), capped so that the
        step's tokens stay within the row's token cap, and cut to the width at least half of the rows fill
        (:func:`~joy_agents.drafts.step_width`)."""
        drafts: dict[int, list[int]] = {}
        for i in live:
            row = batch.rows[i]
            room = min(self.draft_tokens, self.sampling.max_new_tokens - len(row.tokens) - 1)
            if room <= 0:
                continue
            if row.lookup is None:
                row.lookup = PromptLookup(row.prompt + row.tokens)
            draft = row.lookup.draft(room)
            if draft:
                drafts[i] = draft
        width = step_width([len(d) for d in drafts.values()], len(live))
        return {i: d[:width] for i, d in drafts.items()} if width else {}

    def _decode(self, lane: _Lane) -> list[tuple[Any, Sample]]:
        batch = lane.batch
        live = batch.live
        first = batch.rows[live[0]].role
        roles = [r.role if r is not None else first for r in batch.rows]  # a free slot runs any role
        extra: dict[str, Any] = {_cache_argument(type(_hf_model(lane.model))): batch.cache}
        stacked = self._stacked(lane) if lane.shared else None
        if stacked is not None:
            stacked.set_rows(roles if len(set(roles)) > 1 else roles[:1])  # each row through its role's adapter
        elif lane.shared and len(set(roles)) > 1:
            extra["adapter_names"] = roles  # PEFT's mixed batches (LoRA variants)
        else:
            self.team._activate(first)
        drafts = self._drafts(batch, live) if self.draft_tokens and len(live) <= self.draft_max_rows else {}
        input_ids, mask, positions = batch.inputs(drafts)
        width = input_ids.shape[1]
        with stacked or contextlib.nullcontext():
            out = lane.model(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=positions,
                use_cache=True,
                logits_to_keep=width,
                **extra,
            )
        self.stats.decode_forwards += 1
        self.stats.rows_decoded += len(roles)
        self.stats.draft_positions += len(roles) * (width - 1)
        logits = out.logits[:, -width:]
        tokens, logprobs = self._sample(logits.reshape(-1, logits.shape[-1]))  # (B * width,)
        tokens, logprobs = tokens.view(len(roles), width), logprobs.view(len(roles), width)
        host = torch.stack([tokens.to(logprobs.dtype), logprobs]).tolist()  # the one host copy of the step
        ids, lps = [[int(t) for t in row] for row in host[0]], host[1]  # ids < 2**24 are exact in float32
        accepted = [accepted_length(drafts.get(i, ()), ids[i]) for i in range(len(roles))]
        batch.advance(tokens[:, 0] if width == 1 else tokens, accepted)
        ends, text_stops, candidates, hidden, tail = self._end_rules(lane, first)
        done: list[tuple[int, str]] = []
        for i in live:
            row, kept = batch.rows[i], accepted[i]
            if i in drafts:
                self.stats.draft_tokens += len(drafts[i])
                self.stats.draft_tokens_kept += kept
            start = len(row.tokens)
            reason = None
            for tok, lp in zip(ids[i][: kept + 1], lps[i][: kept + 1], strict=True):
                row.tokens.append(tok)
                row.logprobs.append(lp)
                reason = self._stop_reason(lane, row, tok, ends, text_stops, candidates, tail)
                if reason:
                    break
            if reason:
                done.append((i, reason))
            elif row.lookup is not None:
                row.lookup.extend(row.tokens[start:])
        if not done:
            if drafts:
                batch.remove([])  # the compaction check: drafted columns no row kept
            return []
        finished = []
        texts = lane.tokenizer.batch_decode(
            [[t for t in batch.rows[i].tokens if t not in hidden] for i, _ in done],
            skip_special_tokens=False,
            clean_up_tokenization_spaces=False,
        )
        for (i, reason), text in zip(done, texts, strict=True):
            row = batch.rows[i]
            finished.append((row.key, Sample(list(row.prompt), row.tokens, row.logprobs, text, reason)))
            self.stats.tokens_kept += len(row.tokens)
            self.stats.samples += 1
        if self.prefix_tokens:
            self._keep_prefixes(lane, [i for i, _ in done])
        batch.remove([i for i, _ in done])
        return finished

    def _stop_reason(
        self,
        lane: _Lane,
        row: _Row,
        tok: int,
        ends: set[int],
        text_stops: tuple[str, ...],
        candidates: list[bool] | None,
        tail: int,
    ) -> str | None:
        """``"stop"`` if ``tok`` (just appended to ``row``) ends the turn, ``"length"`` at the token cap, else None."""
        if tok in ends:
            return "stop"
        if text_stops and candidates is not None and (tok >= len(candidates) or candidates[tok]):
            text = lane.tokenizer.decode(
                row.tokens[-tail:], skip_special_tokens=False, clean_up_tokenization_spaces=False
            )
            if any(s in text for s in text_stops):
                return "stop"
        if len(row.tokens) >= self.sampling.max_new_tokens:
            return "length"
        return None

    def _stacked(self, lane: _Lane) -> StackedLoRA | None:
        """The lane's :class:`StackedLoRA` (built once per sampler), or None where it does not apply."""
        if self._stack is None:
            roles = tuple(r for r in self.team.roles if self.team.model_for(r) is lane.model)
            self._stack = StackedLoRA(lane.model, roles)
        return self._stack if self._stack.supported else None

    def _sample(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens and their log-probs (see the module documentation) from raw logits (B, V)."""
        logits = logits.float()
        temperature = self.sampling.temperature
        if temperature == 0:
            tokens = logits.argmax(-1)
            scaled = logits
        else:
            scaled = logits / temperature if temperature != 1.0 else logits
            kept = nucleus_logits(scaled, self.sampling.top_p) if self.sampling.top_p < 1.0 else scaled
            tokens = torch.multinomial(kept.softmax(-1), 1).squeeze(1)
        picked = scaled.gather(1, tokens[:, None]).squeeze(1) - torch.logsumexp(scaled, dim=-1)
        return tokens, picked


def sample_many(
    team: Any,
    requests: list[tuple[str, list[int]]],
    sampling: SamplingConfig,
    num_samples: int = 1,
    max_rows: int = 256,
    engine: str = "continuous",
    draft_tokens: int = 0,
    draft_max_rows: int = 64,
) -> list[list[Sample]]:
    """``num_samples`` samples of each ``(role, prompt_ids)`` request; ``result[i][j]`` is sample ``j`` of request
    ``i``. The ``continuous`` engine decodes every role in the same batches (:class:`ContinuousSampler`);
    ``vllm`` sends all requests in one vLLM call (:mod:`joy_agents.vllm_engine`); ``generate`` (or a model the
    continuous engine does not support) makes one ``team.generate`` call per role. ``draft_tokens`` and
    ``draft_max_rows``: the continuous engine's prompt-lookup drafts (:class:`ContinuousSampler`)."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    _check_count("num_samples", num_samples, 1)
    _check_count("draft_tokens", draft_tokens, 0, " (0: no drafts)")
    _check_count("draft_max_rows", draft_max_rows, 1)
    if engine == "vllm":
        from joy_agents.vllm_engine import vllm_engine

        return vllm_engine(team).generate([(role, list(prompt), num_samples) for role, prompt in requests], sampling)
    if engine == "continuous" and continuous_supported(team):
        out: list[list[Any]] = [[None] * num_samples for _ in requests]
        with ContinuousSampler(
            team, sampling, max_rows=max_rows, draft_tokens=draft_tokens, draft_max_rows=draft_max_rows
        ) as sampler:
            for i, (role, prompt) in enumerate(requests):
                for j in range(num_samples):
                    sampler.submit(role, prompt, (i, j))
            while sampler.busy:
                for (i, j), sample in sampler.step():
                    out[i][j] = sample
        return out
    by_role: dict[str, list[int]] = {}
    for i, (role, _) in enumerate(requests):
        by_role.setdefault(role, []).append(i)
    result: list[list[Sample]] = [[] for _ in requests]
    for role, idx in by_role.items():
        groups = team.generate(role, [requests[i][1] for i in idx], sampling, num_samples=num_samples)
        for i, group in zip(idx, groups, strict=True):
            result[i] = group
    return result
