"""Generation settings of a run, built in one place: :class:`GenerationLimits` (tokens per turn, turns per
episode, prompt tokens kept) and the :class:`~joy_agents.policy.SamplingConfig` /
:class:`~joy_agents.rollout.RolloutConfig` made from them, so that training rollouts, the trainers'
evaluations and ``joy-eval`` sample whole turns the same way (stopping at the protocol's
:data:`~joy_env.protocol.TURN_STOP`).

    limits = cfg.generation_limits()                       # a RunConfig's limits
    config = rollout_config(
        limits, engine=cfg.rollout_engine, draft_tokens=cfg.draft_tokens, vllm_options=cfg.vllm_options
    )
    engine = RolloutEngine(team, env_id, "train", seed, config)
    engine.run(tasks, sampling_config(limits, temperature=1.2))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from joy_agents.config import SamplingConfig
from joy_agents.rollout import RolloutConfig
from joy_agents.vllm_engine import VLLMConfig
from joy_env.protocol import TURN_STOP


@dataclass(frozen=True)
class GenerationLimits:
    """The generation limits of a run (those it trained and evaluated under)."""

    max_new_tokens: int
    """Generated tokens per agent turn."""
    max_cycles: int
    """Agent turns per episode."""
    max_prompt_tokens: int
    """Prompts longer than this leave out their oldest turns."""


def sampling_config(limits: GenerationLimits, temperature: float = 0.0, top_p: float = 1.0) -> SamplingConfig:
    """Sampling of whole agent turns under ``limits`` at ``temperature`` (0: greedy) and nucleus ``top_p``."""
    return SamplingConfig(temperature=temperature, top_p=top_p, max_new_tokens=limits.max_new_tokens, stop=TURN_STOP)


def rollout_config(
    limits: GenerationLimits,
    *,
    engine: str = "continuous",
    keep_snapshots: bool = False,
    draft_tokens: int = RolloutConfig.draft_tokens,
    draft_max_rows: int = RolloutConfig.draft_max_rows,
    vllm_options: dict[str, Any] | None = None,
) -> RolloutConfig:
    """The rollout settings of episodes under ``limits`` with the generation ``engine`` (greedy unless a
    ``run`` call passes its own sampling); ``keep_snapshots`` for node-wise branching; ``draft_tokens`` per
    row and step of the continuous engine (0: no drafts) while at most ``draft_max_rows`` rows run;
    ``vllm_options``: how the ``vllm`` engine is built (:class:`~joy_agents.vllm_engine.VLLMConfig` fields)."""
    return RolloutConfig(
        sampling=sampling_config(limits),
        max_cycles=limits.max_cycles,
        max_prompt_tokens=limits.max_prompt_tokens,
        keep_snapshots=keep_snapshots,
        engine=engine,
        draft_tokens=draft_tokens,
        draft_max_rows=draft_max_rows,
        vllm=VLLMConfig.from_options(vllm_options or {}),
    )
