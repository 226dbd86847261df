"""Continuous batching: every live request of the team in one decode batch, whatever its role.

:class:`ContinuousSampler` is the default generation engine of the rollouts
(``GenerationSettings(engine="continuous")``). Requests (a role and its prompt ids) are submitted at any time; each
:meth:`~ContinuousSampler.step` runs ONE decode forward per model over every running row and returns the samples that
finished in it:

* **one batch for all roles**: roles that share the base model (one LoRA adapter each) decode together, each
  row through its own adapter (:class:`~joy_agents.sampling.stacked_lora.StackedLoRA`: every role's adapter in a few
  kernels per layer; PEFT's ``adapter_names=`` for LoRA variants it does not cover); a role with a separate
  model has a batch (a *lane*) of its own;
* **rows that finish make room**: a row leaves the batch at its stop token or its token cap and frees its slot of
  the KV cache, and waiting requests join at the next step (their prompts prefilled, a prompt shared by several
  rows and the start that the joiners of a role share computed once, :func:`~joy_agents.prefill.prefill_shared`,
  prompts of very different lengths in separate prefills so that padding stays small,
  :func:`~joy_agents.prefill.length_buckets`);
  so nothing waits for the slowest row, and an episode whose turn ended submits its next turn while the others
  decode. The cache lives in slots with room to grow (:mod:`joy_agents.sampling.kv_slots`): a decode step writes one
  column in place, a joiner writes its own slot;
* **kept prefixes**: the KV cache of finished rows is kept (up to ``prefix_tokens``), and a prompt of the same
  role that starts with a kept row's tokens (the episode's next turn, or any prompt with the same system prompt
  and tools) prefills only the rest (:mod:`joy_agents.sampling.prefix_cache`);
* **drafted tokens** (``draft_tokens`` > 0): while few rows run (``draft_max_rows``), each row's next token goes in
  with up to ``draft_tokens`` tokens that prompt lookup proposes (:mod:`joy_agents.sampling.drafts`: what followed
  the last occurrence of the row's last tokens in its own prompt or completion); the one forward gives the model's
  sample at every drafted position, and the row keeps the drafted tokens up to the first sample that differs, which
  it keeps in their place. The samples and log-probs are those of one token per forward; an agent's turn copies ids,
  names and JSON from its context, so the long tail of a rollout (a few long episodes decoding alone) runs in fewer
  forwards. A step's drafts are cut to the width that at least half of the running rows fill, so that padding never
  outweighs the drafted positions. The columns of rejected drafts are masked out, and cut at the next compaction.

Sampling and stops are those of every engine (:mod:`joy_agents.sampling.tokens`): tokens and log-probs by
:func:`~joy_agents.sampling.tokens.sample_tokens` from the raw logits, a row ended by
:meth:`StopRules.reason <joy_agents.sampling.tokens.StopRules.reason>` (end-of-turn and EOS ids, ``stop`` strings
found in the decoded tail of a row whose last token can complete one; a stop inside a row's kept draft ends the row
there). Each row samples with its request's own settings (temperature, ``top_p``, token cap, stop texts): the rows
of one setting are sampled in one call, so requests of an RL step's phases share a decode batch. Each step copies its
sampled tokens to the host once (the scheduler needs them to retire rows and check
drafts); keeping a finished row's prefix and a compaction add one copy each, only in the steps where they happen.

**Out of memory.** When a prefill or a decode step raises ``torch.OutOfMemoryError``, the lane takes back every
request it holds (the running rows keep the tokens they have, and go on from there when they join again: their
prompt and tokens are prefilled), drops its kept prefixes, halves the rows it admits at once (a prefill) or the
rows it decodes together (a decode step), says so in one warning line and goes on at the next step; it raises a
one-line error only when a single row does not fit. Nothing is lost: greedy outputs equal those of a run that had
the memory.

Models whose cache is not a plain per-layer key/value cache (sliding-window or other special attention layers)
are refused by :func:`continuous_supported`; the factory then makes the ``generate`` sampler
(:func:`~joy_agents.sampling.base.make_sampler`). Not here yet: a static cache with compiled or CUDA-graph
decode steps (on a GPU, the ``vllm`` engine has them: :mod:`joy_agents.sampling.vllm`).
"""

from __future__ import annotations

import collections
import contextlib
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from joy_agents.adapters import hf_model
from joy_agents.config import Sample, SamplingConfig, as_id_list
from joy_agents.policy import TeamPolicy
from joy_agents.prefill import cache_argument, length_buckets, plain_layout, prefill_shared, prompt_layout
from joy_agents.sampling.drafts import PromptLookup, accepted_length, step_width
from joy_agents.sampling.kv_slots import SlotBatch
from joy_agents.sampling.prefix_cache import KeptPrefix, PrefixCache
from joy_agents.sampling.settings import GenerationSettings, check_count, request_sampling
from joy_agents.sampling.stacked_lora import StackedLoRA
from joy_agents.sampling.stats import EngineStats
from joy_agents.sampling.tokens import StopRules, sample_tokens, team_stop_rules

__all__ = ["ContinuousSampler", "continuous_supported"]


def continuous_supported(team: Any) -> bool:
    """Whether ``team`` is a :class:`~joy_agents.policy.TeamPolicy` whose every model keeps a plain key/value cache
    per layer (full attention in every layer), the cache :class:`ContinuousSampler` rearranges. Another policy
    object (anything with ``generate`` and ``fit_prompt``) is sampled per role."""
    if not isinstance(team, TeamPolicy):
        return False
    for role in team.roles:
        config = hf_model(team.model_for(role)).config
        if hasattr(config, "get_text_config"):
            config = config.get_text_config()
        kinds = set(getattr(config, "layer_types", None) or ["full_attention"])
        if kinds != {"full_attention"} or getattr(config, "use_sliding_window", False):
            return False
        # the cache the model itself would build (a sliding window named only by ``sliding_window``, ...)
        if any(type(layer) is not DynamicLayer for layer in DynamicCache(config=config).layers):
            return False
    return True


@dataclass
class _Row:
    key: Any
    role: str
    prompt: list[int]
    sampling: SamplingConfig
    rules: StopRules
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    lookup: PromptLookup | None = None

    @property
    def context(self) -> list[int]:
        """What the row's next prefill runs: its prompt, and the tokens it kept before memory ran out."""
        return self.prompt + self.tokens if self.tokens else self.prompt


class _Lane:
    """The running batch of one model (:class:`~joy_agents.sampling.kv_slots.SlotBatch`), its waiting rows, kept
    prefixes and the rows it may admit at once and decode together (halved when memory runs out)."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, shared: bool, device: torch.device, rows: int) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.shared = shared  # a PeftModel holding several roles' adapters
        self.device = device
        self.batch = self.new_batch()
        self.waiting: collections.deque[_Row] = collections.deque()
        self.prefixes: PrefixCache | None = None
        self.max_rows = rows
        self.max_joiners = rows
        self._parameters = list(model.parameters())
        self.version = self.weights_version()

    def new_batch(self) -> SlotBatch:
        return SlotBatch(hf_model(self.model).config, self.device, int(self.tokenizer.pad_token_id))

    def weights_version(self) -> int:
        """Grows whenever a weight of the model changes in place (an optimizer step, ``load_state_dict``)."""
        return sum(p._version for p in self._parameters)

    @property
    def running(self) -> int:
        return len(self.batch.live)


class ContinuousSampler:
    """Continuous batching over a :class:`~joy_agents.policy.TeamPolicy` (see the module documentation).

    The options are those of :class:`~joy_agents.sampling.settings.GenerationSettings` (and default to its
    defaults): ``max_rows`` (its ``max_batch_rows``) caps the rows decoded together per model; more requests wait
    for a free row.
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
        max_rows: int = GenerationSettings.max_batch_rows,
        prefix_tokens: int = GenerationSettings.prefix_tokens,
        draft_tokens: int = GenerationSettings.draft_tokens,
        draft_max_rows: int = GenerationSettings.draft_max_rows,
    ) -> None:
        if not isinstance(sampling, SamplingConfig):
            raise TypeError(f"sampling must be a SamplingConfig, got {type(sampling).__name__}")
        check_count("max_rows", max_rows, 1)
        check_count("prefix_tokens", prefix_tokens, 0, " (0: keep none)")
        check_count("draft_tokens", draft_tokens, 0, " (0: no drafts)")
        check_count("draft_max_rows", draft_max_rows, 1)
        self.draft_tokens, self.draft_max_rows = draft_tokens, draft_max_rows
        self.team = team
        self.prefix_tokens = prefix_tokens
        self.sampling = sampling
        self.max_rows = max_rows
        self.stats = EngineStats()
        self._lanes: dict[int, _Lane] = {}
        self._role_lane: dict[str, _Lane] = {}
        self._rules: dict[tuple[int, tuple[str, ...]], StopRules] = {}
        self._training: list[torch.nn.Module] = []
        self._stack: StackedLoRA | None = None

    # ------------------------------------------------------------------ requests
    def submit(
        self, role: str, prompt_ids: list[int], key: Any, num_samples: int = 1, sampling: SamplingConfig | None = None
    ) -> None:
        """Queue ``num_samples`` samples of ``prompt_ids`` by ``role`` with ``sampling`` (default: the sampler's);
        each comes back from :meth:`step` as ``(key, sample)``."""
        self.team.check_role(role)
        prompt = as_id_list("prompt_ids", prompt_ids)
        check_count("num_samples", num_samples, 1)
        sampling = request_sampling(sampling, self.sampling)
        if len(prompt) < 2:
            raise ValueError(f"a prompt needs at least 2 tokens for continuous batching, got {len(prompt)}")
        self.team.check_ids(role, [prompt], extra=sampling.max_new_tokens)
        lane = self._lane(role)
        rules = self._stop_rules(lane, role, sampling.stop)
        for _ in range(num_samples):
            lane.waiting.append(_Row(key=key, role=role, prompt=prompt, sampling=sampling, rules=rules))

    @property
    def busy(self) -> bool:
        """Whether requests are running or waiting."""
        return any(lane.running or lane.waiting for lane in self._lanes.values())

    def _lane(self, role: str) -> _Lane:
        if role not in self._role_lane:
            model = self.team.model_for(role)
            if id(model) not in self._lanes:
                shared = model is self.team.shared_model
                lane = _Lane(model, self.team.tokenizer_for(role), shared, self.team.device, self.max_rows)
                lane.prefixes = PrefixCache(self.prefix_tokens)
                self._lanes[id(model)] = lane
            self._role_lane[role] = self._lanes[id(model)]
        return self._role_lane[role]

    def _stop_rules(self, lane: _Lane, role: str, stop: tuple[str, ...]) -> StopRules:
        """A lane's :class:`~joy_agents.sampling.tokens.StopRules` for the stop texts ``stop`` (the same for every
        role of one model)."""
        if (id(lane), stop) not in self._rules:
            self._rules[(id(lane), stop)] = team_stop_rules(self.team, role, stop)
        return self._rules[(id(lane), stop)]

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
                joining: list[_Row] = []
                try:
                    self._admit(lane, joining)
                except torch.OutOfMemoryError:
                    self._out_of_memory(lane, joining, "prefill")
                    continue
                try:
                    finished += self._decode(lane)
                except torch.OutOfMemoryError:
                    self._out_of_memory(lane, [], "decode")
        return finished

    def close(self) -> None:
        """Give the models back their training mode (sampling runs them in eval mode) and free the caches: the
        running rows, the kept prefixes and the stacked adapters. Requests still running or waiting are dropped."""
        for model in self._training:
            model.train()
        self._training = []
        self._lanes, self._role_lane, self._rules, self._stack = {}, {}, {}, None

    def __enter__(self) -> ContinuousSampler:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _out_of_memory(self, lane: _Lane, joining: list[_Row], where: str) -> None:
        """Take back every request of ``lane`` (the running rows with their tokens, then the rows that were
        joining, in order, ahead of those waiting), free its caches, and halve the rows it admits at once (after a
        prefill) or decodes together (after a decode step); a one-line error when one row is already the least."""
        running = [lane.batch.rows[i] for i in lane.batch.live]
        taken = running + [r for r in joining if all(r is not x for x in running)]
        lane.batch = lane.new_batch()
        lane.waiting.extendleft(reversed(taken))
        assert lane.prefixes is not None
        lane.prefixes.clear()
        self._stack = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        self.stats.oom_retries += 1
        if where == "prefill" and len(joining) > 1:
            lane.max_joiners = len(joining) // 2
            now = f"admitting at most {lane.max_joiners} rows at once"
        elif len(running) > 1:
            lane.max_rows = len(running) // 2
            lane.max_joiners = min(lane.max_joiners, lane.max_rows)
            now = f"decoding at most {lane.max_rows} rows together"
        else:
            longest = max(len(r.context) for r in taken)
            raise torch.OutOfMemoryError(
                f"out of memory sampling one row of {longest} tokens in a {where} step; lower max_prompt_tokens or "
                "max_new_tokens, or use a device with more memory"
            )
        warnings.warn(
            f"out of memory in a {where} step of {len(running)} running and {len(joining)} joining rows: their "
            f"requests are queued again, now {now}",
            RuntimeWarning,
            stacklevel=3,
        )

    def _admit(self, lane: _Lane, joiners: list[_Row]) -> None:
        """Take waiting rows into ``joiners`` (at most the lane's free rows and ``max_joiners``) and add them to the
        batch, each role's fresh prompts in one prefill and those that start with kept prefixes in one more."""
        room = min(lane.max_rows - lane.running, lane.max_joiners)
        if room <= 0 or not lane.waiting:
            return
        assert lane.prefixes is not None
        version = lane.weights_version()
        if version != lane.version:  # the weights changed: kept caches and the stacked adapters are stale
            lane.prefixes.clear()
            lane.version = version
            if lane.shared:
                self._stack = None
        joiners += [lane.waiting.popleft() for _ in range(min(room, len(lane.waiting)))]
        self.stats.prompt_tokens += sum(len(r.context) for r in joiners)
        by_role: dict[str, list[_Row]] = {}
        reusing: dict[str, list[tuple[_Row, KeptPrefix, int]]] = {}
        for row in joiners:
            found = lane.prefixes.find(row.role, row.context)
            if found is None:
                by_role.setdefault(row.role, []).append(row)
            else:
                reusing.setdefault(row.role, []).append((row, *found))
        for role, rows in by_role.items():
            for group in length_buckets([r.context for r in rows]):  # prompts of like lengths together
                self._prefill(lane, role, [rows[i] for i in group])
        for role, items in reusing.items():
            rests = [row.context[n:-1] for row, _, n in items]
            for group in length_buckets(rests, shared=False):  # each row's rest is run whole
                self._extend(lane, role, [items[i] for i in group])

    def _adapter(self, lane: _Lane, role: str) -> Any:
        """A context in which ``lane.model`` runs ``role``'s adapter for every row."""
        stacked = self._stacked(lane) if lane.shared else None
        if stacked is None:
            self.team.activate(role)
            return contextlib.nullcontext()
        stacked.set_rows([role])  # one role: its mask broadcasts over any number of rows
        return stacked

    def _prefill(self, lane: _Lane, role: str, rows: list[_Row]) -> None:
        """Prefill the prompts of ``rows`` (all ``role``'s), shared parts once, and add them to the batch."""
        device = self.team.device
        pad_id = int(lane.tokenizer.pad_token_id)
        prompts = [r.context for r in rows]
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

    def _extend(self, lane: _Lane, role: str, items: list[tuple[_Row, KeptPrefix, int]]) -> None:
        """Add rows whose prompts start with kept prefixes: each row's kept keys and values (right-aligned), then
        one forward over the rest of every prompt but its last token, padding between them masked out."""
        assert lane.prefixes is not None
        device = self.team.device
        pad_id = int(lane.tokenizer.pad_token_id)
        self.stats.reused_tokens += sum(n for _, _, n in items)
        contexts = [row.context for row, _, _ in items]
        rests = [c[n:-1] for c, (_, _, n) in zip(contexts, items, strict=True)]
        width = max(len(r) for r in rests)
        cache, kept = lane.prefixes.cache_of([(e, n) for _, e, n in items], hf_model(lane.model).config)
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
                    **{cache_argument(type(hf_model(lane.model))): cache},
                )
            self.stats.prefill_forwards += 1
        rows = [row for row, _, _ in items]
        last = torch.tensor([c[-1] for c in contexts], device=device)
        pos = torch.tensor([len(c) - 1 for c in contexts], device=device)
        lane.batch.add(rows, cache, mask, last, pos)

    def _keep_prefixes(self, lane: _Lane, finished: list[int]) -> None:
        """Keep the KV cache of the finished slots' rows (their prompt and completion but the last token)."""
        assert lane.prefixes is not None
        for i in finished:
            row = lane.batch.rows[i]
            lane.prefixes.keep(row.role, (row.prompt + row.tokens)[:-1], lambda n, i=i: lane.batch.row_kv(i, limit=n))
        lane.prefixes.evict()

    def _drafts(self, batch: Any, live: list[int]) -> dict[int, list[int]]:
        """Each live row's prompt-lookup draft (:class:`~joy_agents.sampling.drafts.PromptLookup`), capped so that
        the step's tokens stay within the row's token cap, and cut to the width at least half of the rows fill
        (:func:`~joy_agents.sampling.drafts.step_width`)."""
        drafts: dict[int, list[int]] = {}
        for i in live:
            row = batch.rows[i]
            room = min(self.draft_tokens, row.sampling.max_new_tokens - len(row.tokens) - 1)
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
        """One decode forward over every row of ``lane`` (and its drafts); the samples that finished."""
        batch = lane.batch
        live = batch.live
        first = batch.rows[live[0]].role
        roles = [r.role if r is not None else first for r in batch.rows]  # a free slot runs any role
        extra: dict[str, Any] = {cache_argument(type(hf_model(lane.model))): batch.cache}
        stacked = self._stacked(lane) if lane.shared else None
        if stacked is not None:
            stacked.set_rows(roles if len(set(roles)) > 1 else roles[:1])  # each row through its role's adapter
        elif lane.shared and len(set(roles)) > 1:
            extra["adapter_names"] = roles  # PEFT's mixed batches (LoRA variants)
        else:
            self.team.activate(first)
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
        logits = out.logits[:, -width:]
        tokens, logprobs = self._sample(logits, [r.sampling if r is not None else None for r in batch.rows])
        host = torch.stack([tokens.to(logprobs.dtype), logprobs]).tolist()  # the one host copy of the step
        ids, lps = [[int(t) for t in row] for row in host[0]], host[1]  # ids < 2**24 are exact in float32
        accepted = [accepted_length(drafts.get(i, ()), ids[i]) for i in range(len(roles))]
        batch.advance(tokens[:, 0] if width == 1 else tokens, accepted)
        self.stats.decode_forwards += 1
        self.stats.rows_decoded += len(roles)
        self.stats.draft_positions += len(roles) * (width - 1)
        done: list[tuple[int, str]] = []
        for i in live:
            row, kept = batch.rows[i], accepted[i]
            rules, cap = row.rules, row.sampling.max_new_tokens
            if i in drafts:
                self.stats.draft_tokens += len(drafts[i])
                self.stats.draft_tokens_kept += kept
            start = len(row.tokens)
            reason = None
            for tok, lp in zip(ids[i][: kept + 1], lps[i][: kept + 1], strict=True):
                row.tokens.append(tok)
                row.logprobs.append(lp)
                reason = rules.reason(row.tokens, cap)
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
        for (i, reason), text in zip(done, self._texts([batch.rows[i] for i, _ in done]), strict=True):
            row = batch.rows[i]
            finished.append((row.key, Sample(list(row.prompt), row.tokens, row.logprobs, text, reason)))
            self.stats.tokens_kept += len(row.tokens)
            self.stats.samples += 1
        if self.prefix_tokens:
            self._keep_prefixes(lane, [i for i, _ in done])
        batch.remove([i for i, _ in done])
        return finished

    @staticmethod
    def _sample(logits: torch.Tensor, settings: list[SamplingConfig | None]) -> tuple[torch.Tensor, torch.Tensor]:
        """The tokens and log-probs of every slot's positions (``logits``: slots, width, vocab), each row with its
        request's temperature and ``top_p`` (a free slot's row with any): two (slots, width) tensors. Rows of one
        setting are sampled in one call, all of them when every row has the same."""
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

    @staticmethod
    def _texts(rows: list[_Row]) -> list[str]:
        """The texts of finished ``rows``, each row's decoded by its stop rules (rows of one rule set together)."""
        texts: list[str] = [""] * len(rows)
        by_rules: dict[int, list[int]] = {}
        for n, row in enumerate(rows):
            by_rules.setdefault(id(row.rules), []).append(n)
        for idx in by_rules.values():
            decoded = rows[idx[0]].rules.texts([rows[n].tokens for n in idx])
            for n, text in zip(idx, decoded, strict=True):
                texts[n] = text
        return texts

    def _stacked(self, lane: _Lane) -> StackedLoRA | None:
        """The lane's :class:`StackedLoRA` (built once per sampler), or None where it does not apply."""
        if self._stack is None:
            roles = tuple(r for r in self.team.roles if self.team.model_for(r) is lane.model)
            self._stack = StackedLoRA(lane.model, roles)
        return self._stack if self._stack.supported else None
