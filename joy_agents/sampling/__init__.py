"""The sampling layer: one :class:`~joy_agents.sampling.base.Sampler` interface, three engines behind it, and
what they share.

* :mod:`~joy_agents.sampling.settings`: :class:`GenerationSettings` (every generation setting, one default each),
  :class:`VLLMConfig`, :class:`~joy_agents.sampling.settings.SamplingConfig` (one call's sampling)
* :mod:`~joy_agents.sampling.base`: the :class:`Sampler` interface (``submit`` / ``step`` / ``busy`` / ``close``),
  :func:`make_sampler` (the one place an engine name is checked and dispatched), :func:`drain`,
  :func:`sample_many` (node-wise sampling)
* :mod:`~joy_agents.sampling.continuous`: ``continuous``: every role's requests in one decode batch, rows leaving
  and joining at every step (the scheduler; :mod:`~joy_agents.sampling.runner` runs each model over its batch)
* :mod:`~joy_agents.sampling.generate`: ``generate``: one ``model.generate`` call per role and step
* :mod:`~joy_agents.sampling.vllm`: ``vllm``: every waiting request in one vLLM call per step
* :mod:`~joy_agents.sampling.tokens`: token sampling and stop rules, shared by the three engines
* :mod:`~joy_agents.sampling.kv_slots`: the continuous engine's KV cache in slots with room to grow
* :mod:`~joy_agents.sampling.prefix_cache`: kept prefixes: finished rows' KV cache reused by later prompts
* :mod:`~joy_agents.sampling.drafts`: prompt-lookup drafts, checked by the model in the same forward
* :mod:`~joy_agents.sampling.stacked_lora`: every role's LoRA adapter applied to one mixed batch
* :mod:`~joy_agents.sampling.stats`: :class:`EngineStats`, what a sampler computed

**One decode step, from the rollout engine down to the model** (the default ``continuous`` engine):

1. :meth:`RolloutEngine.run <joy_agents.rollout.RolloutEngine.run>` makes the sampler of its settings
   (:func:`make_sampler`), renders each episode's pending turn into prompt ids (``policy.fit_prompt``) and
   :meth:`~joy_agents.sampling.continuous.ContinuousSampler.submit` s it with the episode as its key; then it calls
   :meth:`~joy_agents.sampling.continuous.ContinuousSampler.step` while the sampler is busy, applies each
   ``(key, sample)`` that comes back to its env and submits the episode's next turn.
2. ``step`` (the scheduler) works on each model's *lane* (the roles that share a base model form one lane).
   Waiting requests join the lane's running batch: its :class:`~joy_agents.sampling.runner.LaneRunner` prefills
   their prompts, a prompt shared by several rows and the start the
   joiners share once (:func:`~joy_agents.prefill.prefill_shared`; prompts of very different lengths in separate
   prefills, :func:`~joy_agents.prefill.length_buckets`), or from a kept prefix
   (:class:`~joy_agents.sampling.prefix_cache.PrefixCache`) when they start with one; their keys and values go
   into free slots of :class:`~joy_agents.sampling.kv_slots.SlotBatch`.
3. The decode forward: the scheduler gives each row's prompt-lookup draft while few rows run
   (:mod:`~joy_agents.sampling.drafts`); the runner (:meth:`~joy_agents.sampling.runner.LaneRunner.forward`) runs
   the model once over every row of the batch,
   each row through its own role's adapter (:class:`~joy_agents.sampling.stacked_lora.StackedLoRA`), writing one
   column of the slot cache in place (on a CPU, attention reads grouped key/value heads in place:
   :mod:`joy_agents.attention`).
4. :func:`~joy_agents.sampling.tokens.sample_rows` draws every row's token (and its log-prob) from the logits
   at the row's own temperature and ``top_p`` (:func:`~joy_agents.sampling.tokens.sample_tokens`,
   :func:`~joy_agents.sampling.tokens.draw_tokens`: one uniform number per row); the batch advances;
   :func:`~joy_agents.sampling.tokens.take_tokens` gives each row its tokens up to the first that ends it
   (:meth:`StopRules.reason <joy_agents.sampling.tokens.StopRules.reason>`: a stop id, a stop string or the token
   cap); finished rows are decoded into texts
   (:meth:`~joy_agents.sampling.tokens.StopRules.texts`), keep their KV cache as prefixes and free their slots.

The ``generate`` engine does steps 2-4 inside ``model.generate`` (one call per role, with
:class:`~joy_agents.sampling.tokens.LogprobRecorder` and :class:`~joy_agents.sampling.tokens.StopCriterion`), the
``vllm`` engine inside vLLM, with the same stop rules and texts.

Names are imported lazily, so ``import joy_agents.sampling`` does not load torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ENGINES": "joy_agents.sampling.settings",
    "GenerationSettings": "joy_agents.sampling.settings",
    "VLLMConfig": "joy_agents.sampling.settings",
    "make_sampler": "joy_agents.sampling.base",
    "Sampler": "joy_agents.sampling.base",
    "drain": "joy_agents.sampling.base",
    "sample_many": "joy_agents.sampling.base",
    "ContinuousSampler": "joy_agents.sampling.continuous",
    "GenerateSampler": "joy_agents.sampling.generate",
    "VLLMSampler": "joy_agents.sampling.vllm",
    "EngineStats": "joy_agents.sampling.stats",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'joy_agents.sampling' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
