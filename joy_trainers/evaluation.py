"""Evaluation of a team: greedy episodes on the first N tasks of a split, summarised as the ``metrics`` block
of ``results.json`` (success rate, mean reward, mean accuracy, format-valid turn rate, per domain).

Every trainer evaluates through :func:`evaluate_team`, and so does ``joy-eval``, with the limits the run
was trained under (:func:`eval_limits`: tokens per turn, turns per episode, prompt tokens kept), read from
the run's saved configuration so that a saved team is always tested on the view it was trained on.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

from joy_agents.rollout import RolloutConfig, RolloutEngine, summarize
from joy_trainers.generation import GenerationLimits, rollout_config
from joy_trainers.run_config import RunConfig


def evaluate_team(
    team: Any,
    env_id: str,
    split: str,
    tasks: int,
    *,
    seed: int = 0,
    max_new_tokens: int = 160,
    max_cycles: int = 16,
    max_prompt_tokens: int = 3072,
    engine: str = "continuous",
    draft_tokens: int = RolloutConfig.draft_tokens,
    draft_max_rows: int = RolloutConfig.draft_max_rows,
    vllm_options: Mapping[str, Any] | None = None,
    memory: dict[str, Any] | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Metrics of ``team`` (greedy, generation ``engine``, ``draft_tokens`` drafted per row and step while at most
    ``draft_max_rows`` rows run) on tasks
    ``0..tasks-1`` of ``split`` (all of them when the split has fewer; ``episodes`` counts them) of
    ``joy_env.make(env_id, **env_kwargs)`` (see ``results.json``); ``memory`` (role -> bank) is read for prompts,
    never written; ``vllm_options`` build the ``vllm`` engine the first time the team is sampled with it."""
    limits = GenerationLimits(max_new_tokens, max_cycles, max_prompt_tokens)
    config = rollout_config(
        limits,
        engine=engine,
        draft_tokens=draft_tokens,
        draft_max_rows=draft_max_rows,
        vllm_options=dict(vllm_options or {}),
    )
    runner = RolloutEngine(team, env_id, split, seed, config, memory=memory, env_kwargs=env_kwargs)
    start = time.perf_counter()
    trajectories = runner.run(list(range(min(tasks, runner.prototype.num_tasks))))
    metrics = summarize(trajectories)
    metrics["eval_wall_s"] = time.perf_counter() - start
    return metrics


def evaluate_config(
    team: Any, cfg: RunConfig, *, seed: int, tasks: int | None = None, memory: dict[str, Any] | None = None
) -> dict[str, Any]:
    """:func:`evaluate_team` with a run's settings: its env, ``eval_split``, the first ``tasks`` (default
    ``eval_tasks``) tasks of the data ``seed``, its generation limits and ``rollout_engine``."""
    limits = dataclasses.asdict(cfg.generation_limits())  # max_new_tokens, max_cycles, max_prompt_tokens
    split, n = cfg.eval_split, tasks or cfg.eval_tasks
    return evaluate_team(
        team,
        cfg.env_id,
        split,
        n,
        seed=seed,
        engine=cfg.rollout_engine,
        draft_tokens=cfg.draft_tokens,
        draft_max_rows=cfg.draft_max_rows,
        vllm_options=cfg.vllm_options,
        memory=memory,
        env_kwargs=cfg.env_kwargs,
        **limits,
    )


def eval_limits(config: Mapping[str, Any]) -> GenerationLimits:
    """The limits a run evaluated its team under, from its saved configuration (``results.json["config"]``).

    An RL run states them (``max_new_tokens``, ``max_cycles``, ``max_prompt_tokens``); an ``sft`` run cut
    its prompts to ``max_length - max_new_tokens`` (the view it trained on; ``eval_max_new_tokens`` in runs
    saved before the rename) and ran ``eval_max_cycles`` turns. A configuration holding neither set of
    options is an error naming what is missing.
    """
    if "max_prompt_tokens" in config:  # an RL run
        needed = ("max_new_tokens", "max_cycles", "max_prompt_tokens")
        missing = [k for k in needed if k not in config]
        if not missing:
            return GenerationLimits(*(int(config[k]) for k in needed))
    else:  # an sft run
        cap = "max_new_tokens" if "max_new_tokens" in config else "eval_max_new_tokens"
        needed = ("max_length", cap, "eval_max_cycles")
        missing = [k for k in needed if k not in config]
        if not missing:
            return sft_limits(int(config[cap]), int(config["eval_max_cycles"]), int(config["max_length"]))
    raise ValueError(f"the run's saved config lacks {missing}; it was not written by joy-train's sft or RL trainers")


def sft_limits(max_new_tokens: int, max_cycles: int, max_length: int) -> GenerationLimits:
    """An ``sft`` run's evaluation limits: prompts cut to ``max_length - max_new_tokens``, the view it trained
    on (at least 16 tokens)."""
    return GenerationLimits(max_new_tokens, max_cycles, max(16, max_length - max_new_tokens))
