"""Evaluation of a team: episodes (greedy by default) on the first N tasks of a split, summarised as the
``metrics`` block of ``results.json`` (success rate, mean reward, mean accuracy, format-valid turn rate, per
domain).

Every trainer evaluates through :func:`evaluate_team`, and so does ``joy-eval``, with the limits the run
was trained under (:func:`eval_limits`: tokens per turn, turns per episode, prompt tokens kept), read from
the run's saved configuration so that a saved team is always tested on the view it was trained on.

Reliability, as tau2-bench reports it: ``evaluate_team(..., trials=n, temperature=T)`` (``joy-eval RUN --trials n
--temperature T``) plays each task ``n`` times and adds pass^1 .. pass^n (:mod:`joy_trainers.pass_k`: the mean over
tasks of ``C(c, k) / C(n, k)``, ``c`` the task's successful trials) overall and per domain, next to the usual
metrics computed over all ``tasks x n`` episodes. Trial ``t`` samples from torch's generators seeded with
:func:`trial_seed` ``(seed, t)``, so it draws the same tokens in every evaluation with that seed (on the same
hardware), whatever the other trials draw, and the caller's RNG state is left as it was. Greedy trials
(``temperature=0``) of a deterministic env are identical, so their pass^k is the success rate for every ``k``.

Under ``accelerate launch`` with N processes, every process plays its share of the tasks (about 1/N,
:func:`~joy_trainers.distributed.shard`) and the trajectories are gathered in task order, so a greedy evaluation
gives the metrics of one process in about 1/N of the time; ``tasks_per_process`` then records the split. A sampled
evaluation (``temperature > 0``) draws each process's share from the same trial seed, so its episodes differ from
a single process's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from joy_agents.rollout import RolloutConfig, RolloutEngine, Trajectory, summarize
from joy_trainers.distributed import all_gather_objects, is_main, shard, unshard, world
from joy_trainers.generation import GenerationLimits, rollout_config, sampling_config
from joy_trainers.pass_k import pass_hat_k, pass_hat_ks
from joy_trainers.run_config import RunConfig

__all__ = [
    "eval_limits",
    "evaluate_config",
    "evaluate_team",
    "pass_hat_k",
    "pass_hat_ks",
    "sft_limits",
    "trial_seed",
]


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
    trials: int = 1,
    temperature: float = 0.0,
) -> dict[str, Any]:
    """Metrics of ``team`` (generation ``engine``, ``draft_tokens`` drafted per row and step while at most
    ``draft_max_rows`` rows run) on tasks ``0..tasks-1`` of ``split`` (all of them when the split has fewer) of
    ``joy_env.make(env_id, **env_kwargs)`` (see ``results.json``); ``memory`` (role -> bank) is read for prompts,
    never written; ``vllm_options`` build the ``vllm`` engine the first time the team is sampled with it.

    Each task is played ``trials`` times at ``temperature`` (0: greedy); ``episodes`` counts every episode
    (tasks x trials) and the other metrics are computed over all of them. With ``trials > 1`` the metrics add
    ``trials`` and ``pass_k`` (``{"1": pass^1, ..., "n": pass^n}``, :func:`pass_hat_ks`), overall and in each
    ``per_domain`` entry; with ``trials == 1`` they are those of a single play. Trial ``t`` samples after seeding
    torch with :func:`trial_seed` ``(seed, t)`` (the ``vllm`` engine draws from its own seed,
    ``VLLMConfig.seed``, instead). ``trials > 1`` at ``temperature == 0`` warns: greedy trials of a deterministic
    env are identical."""
    _check_trials(trials, temperature)
    if trials > 1 and temperature == 0:
        warnings.warn(
            f"evaluating {trials} trials at temperature 0: greedy trials of a deterministic customer are identical, "
            "so pass^k equals the success rate for every k; pass temperature > 0 (joy-eval --temperature T)",
            UserWarning,
            stacklevel=2,
        )
    limits = GenerationLimits(max_new_tokens, max_cycles, max_prompt_tokens)
    config = rollout_config(
        limits,
        engine=engine,
        draft_tokens=draft_tokens,
        draft_max_rows=draft_max_rows,
        vllm_options=dict(vllm_options or {}),
    )
    if temperature > 0:
        config = dataclasses.replace(config, sampling=sampling_config(limits, temperature))
    runner = RolloutEngine(team, env_id, split, seed, config, progress=is_main(), memory=memory, env_kwargs=env_kwargs)
    starts = list(range(min(tasks, runner.prototype.num_tasks)))
    start = time.perf_counter()
    mine = shard(starts)  # this process's share (all of them in a single process)
    plays = [_play(runner, mine, trial_seed(seed, t) if temperature > 0 else None) for t in range(trials)]
    processes = world()[1]
    if processes > 1:  # every process gets every trajectory, in the order of the starts
        parts = all_gather_objects(plays)
        plays = [unshard([p[t] for p in parts]) for t in range(trials)]
    metrics = summarize([t for play in plays for t in play])
    if trials > 1:
        metrics["trials"] = trials
        metrics.update(_pass_k_metrics(plays, metrics["per_domain"]))
    if processes > 1:
        metrics["tasks_per_process"] = [len(starts[r::processes]) for r in range(processes)]
    metrics["eval_wall_s"] = max(all_gather_objects(time.perf_counter() - start))
    return metrics


def _check_trials(trials: Any, temperature: Any) -> None:
    """Refuse ``trials`` unless an int >= 1 and ``temperature`` unless a finite number >= 0 (one-line
    ``ValueError``s naming the value and the fix)."""
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials must be an int >= 1 (plays of each task), got {trials!r}; e.g. trials=4")
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not math.isfinite(temperature)
        or temperature < 0
    ):
        raise ValueError(
            f"temperature must be a finite number >= 0 (0: greedy), got {temperature!r}; e.g. temperature=1.0"
        )


def trial_seed(seed: int, trial: int) -> int:
    """The torch seed trial ``trial`` of an evaluation with seed ``seed`` samples under: 63 bits of a BLAKE2b
    digest of both, so that every (seed, trial) pair has its own stream and no two trials share one."""
    digest = hashlib.blake2b(f"joy-eval/{int(seed)}/{int(trial)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def _play(runner: RolloutEngine, starts: list[int], seed: int | None) -> list[Trajectory]:
    """One episode per start; a sampled play runs on torch generators seeded with ``seed`` (every device's),
    the caller's RNG states restored afterwards. A greedy play (``seed`` None) draws nothing and touches no
    generator."""
    if not starts:  # more processes than tasks: this one has none
        return []
    if seed is None:
        return runner.run(starts)
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)  # the CPU generator and every CUDA device's
        return runner.run(starts)


def _pass_k_metrics(plays: Sequence[Sequence[Trajectory]], per_domain: dict[str, Any]) -> dict[str, Any]:
    """``{"pass_k": {...}}`` over the tasks of ``plays`` (one list of trajectories per trial, each in the order of
    the starts, so that task ``i`` is at position ``i`` of every trial), each domain's ``pass_k`` written into its
    ``per_domain`` entry."""
    successes = [[play[i].success for play in plays] for i in range(len(plays[0]))]
    domains = [t.domain for t in plays[0]]
    for domain, entry in per_domain.items():
        entry["pass_k"] = pass_hat_ks([s for s, d in zip(successes, domains, strict=True) if d == domain])
    return {"pass_k": pass_hat_ks(successes)}


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
