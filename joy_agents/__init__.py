"""joy_agents: LLM policies for the JoyAgents team (one per role), the rollout engine, the embedded tiny
model and the SFT data.

================================  ==========================================================================
``TeamPolicy`` / ``TeamConfig``   one policy per role: a shared base with one LoRA adapter per role, or
                                  separate models; batched sampling with token ids and log-probs
                                  (:mod:`joy_agents.policy`)
``SamplingConfig`` / ``Sample``   sampling settings of one call and one sampled completion
``GenerationSettings``            every generation setting of a run (limits, temperature, engine, drafts,
                                  vLLM options), one default each (:mod:`joy_agents.sampling.settings`)
``RolloutEngine``                 many episodes at once, every live turn in one decode batch whatever its
                                  role, env snapshots per node (:mod:`joy_agents.rollout`)
``ContinuousSampler``             continuous batching over the team: rows leave at their stop, new requests
                                  join, one adapter per row; it and the other engines' samplers are in
                                  :mod:`joy_agents.sampling`
``Branch``                        a start that restores a snapshot and plays a given sample first
``MemoryBank``                    reward-driven memory of one role (``MemoryConfig``), retrieval into
                                  prompts (:mod:`joy_agents.memory`)
``build_tiny_model``              the embedded tiny Qwen2 model and its BPE tokenizer, built offline and
                                  cached (:mod:`joy_agents.tiny`)
``expert_policy``                 the environment's scripted expert, ``policy(env) -> str``
================================  ==========================================================================

Names are imported lazily, so ``import joy_agents`` does not load torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "TeamPolicy": "joy_agents.policy",
    "TeamConfig": "joy_agents.policy",
    "SamplingConfig": "joy_agents.policy",
    "Sample": "joy_agents.policy",
    "ContinuousSampler": "joy_agents.sampling.continuous",
    "GenerationSettings": "joy_agents.sampling.settings",
    "RolloutEngine": "joy_agents.rollout",
    "RolloutConfig": "joy_agents.rollout",
    "Trajectory": "joy_agents.rollout",
    "Node": "joy_agents.rollout",
    "Branch": "joy_agents.rollout",
    "MemoryBank": "joy_agents.memory",
    "MemoryConfig": "joy_agents.memory",
    "summarize": "joy_agents.rollout",
    "build_tiny_model": "joy_agents.tiny",
    "expert_policy": "joy_env.expert",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'joy_agents' has no attribute {name!r}")
    module = importlib.import_module(_EXPORTS[name])
    return getattr(module, "expert_action" if name == "expert_policy" else name)
