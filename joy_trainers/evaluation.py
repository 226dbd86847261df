"""Evaluation of a team: greedy episodes on the first N tasks of a split, summarised as the ``metrics`` block
of ``results.json`` (success rate, mean reward, mean accuracy, format-valid turn rate, per domain).

Every trainer evaluates through :func:`evaluate_team`, and so does ``joy-eval``, with the limits the run
was trained under (:func:`eval_limits`: tokens per turn, turns per episode, prompt tokens kept), read from
the run's saved configuration so that a saved team is always tested on the view it was trained on.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from joy_agents.policy import SamplingConfig
from joy_agents.rollout import RolloutConfig, RolloutEngine, summarize


def evaluate_team(
    team: Any,
    env_id: str,
    split: str,
    tasks: int,
    seed: int = 0,
    max_new_tokens: int = 160,
    max_cycles: int = 16,
    max_prompt_tokens: int = 3072,
    memory: dict[str, Any] | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Metrics of ``team`` (greedy) on tasks ``0..tasks-1`` of ``split`` (all of them when the split has fewer;
    ``episodes`` counts them) of ``joy_env.make(env_id, **env_kwargs)`` (see ``results.json``); ``memory``
    (role -> bank) is read for prompts, never written."""
    config = RolloutConfig(
        sampling=SamplingConfig(temperature=0.0, max_new_tokens=max_new_tokens, stop=("</answer>",)),
        max_cycles=max_cycles,
        max_prompt_tokens=max_prompt_tokens,
    )
    engine = RolloutEngine(team, env_id, split, seed, config, memory=memory, env_kwargs=env_kwargs)
    start = time.perf_counter()
    trajectories = engine.run(list(range(min(tasks, engine.prototype.num_tasks))))
    metrics = summarize(trajectories)
    metrics["eval_wall_s"] = time.perf_counter() - start
    return metrics


@dataclass(frozen=True)
class EvalLimits:
    """The generation limits of an evaluation (those a run trained and evaluated under)."""

    max_new_tokens: int
    """Generated tokens per agent turn."""
    max_cycles: int
    """Agent turns per episode."""
    max_prompt_tokens: int
    """Prompts longer than this keep their last tokens."""


def eval_limits(config: dict[str, Any]) -> EvalLimits:
    """The limits a run evaluated its team under, from its saved configuration (``results.json["config"]``).

    An RL run states them (``max_new_tokens``, ``max_cycles``, ``max_prompt_tokens``); an ``sft`` run cut
    its prompts to ``max_length - eval_max_new_tokens`` (the view it trained on) and ran ``eval_max_cycles``
    turns. A configuration holding neither set of options is an error naming what is missing.
    """
    if "max_prompt_tokens" in config:  # an RL run
        needed = ("max_new_tokens", "max_cycles", "max_prompt_tokens")
        missing = [k for k in needed if k not in config]
        if not missing:
            return EvalLimits(*(int(config[k]) for k in needed))
    else:  # an sft run
        needed = ("max_length", "eval_max_new_tokens", "eval_max_cycles")
        missing = [k for k in needed if k not in config]
        if not missing:
            new = int(config["eval_max_new_tokens"])
            return EvalLimits(new, int(config["eval_max_cycles"]), max(16, int(config["max_length"]) - new))
    raise ValueError(f"the run's saved config lacks {missing}; it was not written by joy-train's sft or RL trainers")
