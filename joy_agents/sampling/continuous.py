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

Three parts, one job each: this module's :class:`ContinuousSampler` is the *scheduler* (which requests join a
lane's batch, which rows draft and which leave, kept prefixes, running out of memory); a
:class:`~joy_agents.sampling.runner.LaneRunner` per model is the *runner* (prefills and the decode forward over the
slot batch with each row's adapter, returning logits); :func:`~joy_agents.sampling.tokens.sample_rows` and
:func:`~joy_agents.sampling.tokens.take_tokens` are the pure *sample-and-stop* step over the rows' own settings.

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
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from joy_agents.adapters import hf_model
from joy_agents.config import Sample, SamplingConfig, as_id_list
from joy_agents.policy import TeamPolicy
from joy_agents.prefill import length_buckets
from joy_agents.sampling.drafts import PromptLookup, accepted_length, step_width
from joy_agents.sampling.kv_slots import SlotBatch
from joy_agents.sampling.prefix_cache import KeptPrefix, PrefixCache
from joy_agents.sampling.runner import LaneRunner
from joy_agents.sampling.settings import GenerationSettings, check_count, request_sampling
from joy_agents.sampling.stats import EngineStats
from joy_agents.sampling.tokens import StopRules, sample_rows, take_tokens, team_stop_rules
from joy_agents.threads import follow_free_cores

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
    """The scheduler's side of one model: its runner (the model, its slot batch), its waiting rows, its kept
    prefixes and the rows it may admit at once and decode together (halved when memory runs out)."""

    def __init__(self, runner: LaneRunner, rows: int, prefix_tokens: int) -> None:
        self.runner = runner
        self.waiting: collections.deque[_Row] = collections.deque()
        self.prefixes = PrefixCache(prefix_tokens)
        self.max_rows = rows
        self.max_joiners = rows
        self.version = runner.weights_version()

    @property
    def batch(self) -> SlotBatch:
        return self.runner.batch

    @property
    def running(self) -> int:
        return len(self.runner.batch.live)


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
                runner = LaneRunner(self.team, model, self.team.tokenizer_for(role), self.stats)
                self._lanes[id(model)] = _Lane(runner, self.max_rows, self.prefix_tokens)
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
        follow_free_cores()  # torch's threads on the cores other processes leave free (joy_agents.threads)
        with torch.no_grad():
            for lane in self._lanes.values():
                if not (lane.running or lane.waiting):
                    continue
                model = lane.runner.model
                if model.training:  # switched once per sampler (walking the modules costs), restored by close
                    self._training.append(model)
                    model.eval()
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
        self._lanes, self._role_lane, self._rules = {}, {}, {}

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
        lane.runner.batch = lane.runner.new_batch()
        lane.waiting.extendleft(reversed(taken))
        lane.prefixes.clear()
        for each in self._lanes.values():  # free every stacked copy of the adapters too
            each.runner.drop_stacked()
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
        version = lane.runner.weights_version()
        if version != lane.version:  # the weights changed: kept caches and the stacked adapters are stale
            lane.prefixes.clear()
            lane.version = version
            lane.runner.drop_stacked()
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
                lane.runner.prefill(role, [rows[i] for i in group])
        for role, items in reusing.items():
            rests = [row.context[n:-1] for row, _, n in items]
            for group in length_buckets(rests, shared=False):  # each row's rest is run whole
                lane.runner.extend(role, [items[i] for i in group], lane.prefixes)

    def _keep_prefixes(self, lane: _Lane, finished: list[int]) -> None:
        """Keep the KV cache of the finished slots' rows (their prompt and completion but the last token)."""
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
        drafts = self._drafts(batch, live) if self.draft_tokens and len(live) <= self.draft_max_rows else {}
        logits = lane.runner.forward(drafts)
        width = logits.shape[1]
        tokens, logprobs = sample_rows(logits, [r.sampling if r is not None else None for r in batch.rows])
        host = torch.stack([tokens.to(logprobs.dtype), logprobs]).tolist()  # the one host copy of the step
        ids, lps = [[int(t) for t in row] for row in host[0]], host[1]  # ids < 2**24 are exact in float32
        accepted = [accepted_length(drafts.get(i, ()), ids[i]) for i in range(len(ids))]
        batch.advance(tokens[:, 0] if width == 1 else tokens, accepted)
        done: list[tuple[int, str]] = []
        for i in live:
            row, kept = batch.rows[i], accepted[i]
            if i in drafts:
                self.stats.draft_tokens += len(drafts[i])
                self.stats.draft_tokens_kept += kept
            start = len(row.tokens)
            reason = take_tokens(
                row.tokens, row.logprobs, ids[i][: kept + 1], lps[i][: kept + 1], row.rules, row.sampling.max_new_tokens
            )
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
