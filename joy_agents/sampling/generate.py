"""The ``generate`` engine: one ``model.generate`` call per role and step, every call running to its slowest row.

:func:`generate` is :meth:`TeamPolicy.generate <joy_agents.policy.TeamPolicy.generate>`: all prompts x
``num_samples`` rows of one role go through ONE ``model.generate`` call (left padding, KV cache); a prompt that
several rows share and the start all prompts share are prefilled once (:func:`~joy_agents.prefill.prefill_shared`).
Each step of ``model.generate`` runs the model on every row, then :class:`~joy_agents.sampling.tokens.LogprobRecorder`
(the only logits processor) scales the raw logits and records the log-prob of the token sampled, and
:class:`~joy_agents.sampling.tokens.StopCriterion` ends the rows at their stop ids or stop strings
(:class:`~joy_agents.sampling.tokens.StopRules`, shared with the other engines). The model's own
``generation_config`` sampling defaults are set aside, so only the ``SamplingConfig`` decides.

:class:`GenerateSampler` is the :class:`~joy_agents.sampling.base.Sampler` of this engine: each
:meth:`~GenerateSampler.step` groups the waiting requests by role and sampling setting (in the order they were first
submitted) and makes one :meth:`generate` call per group through the policy, so it also samples any policy object
that has a ``generate`` method.
"""

from __future__ import annotations

from typing import Any

import torch

from joy_agents.adapters import hf_model, vocab_size
from joy_agents.config import Sample, SamplingConfig, as_id_lists
from joy_agents.prefill import plain_layout, prefill_shared, prompt_layout
from joy_agents.sampling.settings import check_count, request_sampling
from joy_agents.sampling.stats import EngineStats
from joy_agents.sampling.tokens import LogprobRecorder, StopCriterion, team_stop_rules
from joy_agents.threads import follow_free_cores

__all__ = ["GenerateSampler", "generate"]


def generate(
    team: Any, role: str, prompts: list[list[int]], config: SamplingConfig, num_samples: int = 1
) -> list[list[Sample]]:
    """``num_samples`` completions of every prompt by ``role`` of the :class:`~joy_agents.policy.TeamPolicy`
    ``team`` in ONE ``model.generate`` call (see the module documentation); ``result[i][j]`` is sample ``j`` of
    prompt ``i``."""
    from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

    team.check_role(role)
    if not isinstance(config, SamplingConfig):
        raise TypeError(f"config must be a SamplingConfig, got {type(config).__name__}")
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples must be an int >= 1, got {num_samples!r}")
    prompts = as_id_lists("prompts", prompts, allow_empty_items=False)
    if not prompts:
        return []
    team.check_ids(role, prompts, extra=config.max_new_tokens)

    model = team.activate(role)
    hf = hf_model(model)
    tok = team.tokenizer_for(role)
    pad_id = int(tok.pad_token_id)
    rules = team_stop_rules(team, role, config.stop)
    end_ids, text_stops = sorted(rules.end_ids), rules.text_stops

    rows = [p for p in prompts for _ in range(num_samples)]
    # a prompt repeated (G samples, or G episodes at the same turn) and the common start of all prompts
    # (a role's system prompt and tools) are prefilled once and their KV cache copied to the rows
    layout = prompt_layout(rows, pad_id, team.device) if team.config.share_prefix else None
    if layout is None:
        plain = plain_layout(rows, pad_id, team.device)
        input_ids, attention_mask = plain.ids, plain.mask
    else:
        input_ids, attention_mask = layout.ids[layout.index], layout.mask[layout.index]
    prompt_len = input_ids.shape[1]
    recorder = LogprobRecorder(config.temperature, config.top_p)
    vocab = vocab_size(model)
    criterion = StopCriterion(tok, end_ids, text_stops, prompt_len, len(rows), input_ids.device, vocab)
    sampling = config.temperature > 0
    gen_kwargs: dict[str, Any] = dict(
        max_new_tokens=config.max_new_tokens,
        do_sample=sampling,
        num_beams=1,
        use_cache=True,
        eos_token_id=end_ids or None,
        pad_token_id=pad_id,
        return_dict_in_generate=False,
    )
    if sampling:  # temperature / top-p are applied by the recorder; disable the library's warpers
        gen_kwargs.update(temperature=1.0, top_k=0, top_p=1.0)
    gen_config = GenerationConfig(**gen_kwargs)

    saved_config, was_training = hf.generation_config, model.training
    # the model's own generation_config may carry sampling defaults (top_k, repetition_penalty, ...) that
    # generate() would merge into ours; swap in an empty one so only SamplingConfig decides
    hf.generation_config = GenerationConfig(eos_token_id=end_ids or None, pad_token_id=pad_id)
    try:
        model.eval()
        with torch.no_grad():
            extra: dict[str, Any] = {}
            if layout is not None:
                cache, arg = prefill_shared(model, layout)
                extra[arg] = cache
            sequences = model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                generation_config=gen_config,
                logits_processor=LogitsProcessorList([recorder]),
                stopping_criteria=StoppingCriteriaList([criterion]),
                **extra,
            )
    finally:
        hf.generation_config = saved_config
        model.train(was_training)

    new_tokens = sequences[:, prompt_len:]
    logprobs = recorder.finish(new_tokens).cpu()
    steps = new_tokens.shape[1]
    stop_len = criterion.stop_len.cpu()
    lengths = torch.where(stop_len >= 0, stop_len, torch.full_like(stop_len, steps)).tolist()
    stopped = (stop_len >= 0).tolist()
    tokens = new_tokens.cpu().tolist()
    lp_rows = logprobs.tolist()
    completions = [tokens[r][: lengths[r]] for r in range(len(rows))]
    texts = rules.texts(completions)
    out: list[list[Sample]] = []
    for i, prompt in enumerate(prompts):
        group = []
        for j in range(num_samples):
            r = i * num_samples + j
            group.append(
                Sample(
                    prompt_ids=list(prompt),
                    completion_ids=completions[r],
                    logprobs=lp_rows[r][: lengths[r]],
                    text=texts[r],
                    finish_reason="stop" if stopped[r] else "length",
                )
            )
        out.append(group)
    return out


class GenerateSampler:
    """The ``generate`` engine's :class:`~joy_agents.sampling.base.Sampler` (see the module documentation):
    ``policy.generate(role, prompts, sampling)`` once per role with waiting requests, at each step."""

    def __init__(self, policy: Any, sampling: SamplingConfig) -> None:
        if not isinstance(sampling, SamplingConfig):
            raise TypeError(f"sampling must be a SamplingConfig, got {type(sampling).__name__}")
        self.policy = policy
        self.sampling = sampling
        self.stats = EngineStats()
        self._waiting: list[tuple[str, list[int], Any, SamplingConfig]] = []

    def submit(
        self, role: str, prompt_ids: list[int], key: Any, num_samples: int = 1, sampling: SamplingConfig | None = None
    ) -> None:
        """Queue ``num_samples`` samples of ``prompt_ids`` by ``role`` with ``sampling`` (default: the sampler's);
        each comes back from :meth:`step` as ``(key, sample)``."""
        check_count("num_samples", num_samples, 1)
        sampling = request_sampling(sampling, self.sampling)
        for _ in range(num_samples):
            self._waiting.append((role, list(prompt_ids), key, sampling))

    @property
    def busy(self) -> bool:
        """Whether requests are waiting."""
        return bool(self._waiting)

    def step(self) -> list[tuple[Any, Sample]]:
        """One ``generate`` call per role and sampling setting over every waiting request of that role and setting."""
        follow_free_cores()  # torch's threads on the cores other processes leave free (joy_agents.threads)
        waiting, self._waiting = self._waiting, []
        calls: dict[tuple[str, Any], list[int]] = {}  # (role, sampling key) -> requests, in submission order
        for n, (role, _, _, sampling) in enumerate(waiting):
            calls.setdefault((role, sampling.key), []).append(n)
        finished = []
        for (role, _), idx in calls.items():
            sampling = waiting[idx[0]][3]
            groups = self.policy.generate(role, [waiting[n][1] for n in idx], sampling, num_samples=1)
            for n, group in zip(idx, groups, strict=True):
                finished.append((waiting[n][2], group[0]))
                self.stats.samples += 1
                self.stats.tokens_kept += len(group[0].completion_ids)
                self.stats.prompt_tokens += len(waiting[n][1])
        return finished

    def close(self) -> None:
        """Drop the waiting requests."""
        self._waiting = []

    def __enter__(self) -> GenerateSampler:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
