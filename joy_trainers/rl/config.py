"""``RLConfig``: the options every RL trainer shares (a trainer's own Config dataclass extends it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from joy_agents.dtypes import DTYPES
from joy_agents.sampling.settings import GenerationSettings
from joy_trainers.generation import run_settings
from joy_trainers.losses import LOSS_TYPES, scale_mode
from joy_trainers.ranges import (
    COUNT_MAX,
    EPOCHS_MAX,
    Range,
    count,
    learning_rate,
    positive,
    positive_int,
    seed_range,
    share,
    tokens,
)
from joy_trainers.rl.groups import ADVANTAGE_REWARDS
from joy_trainers.run_config import RunConfig


@dataclass
class RLConfig(RunConfig):
    """Options every RL trainer shares (one line per field; those of every trainer in
    :class:`~joy_trainers.run_config.RunConfig`); the paper's values for Qwen2.5-3B are noted."""

    sft_run: str | None = None
    """Run directory of the ``sft`` trainer to start from (its ``team/``); ``env_id`` and ``env_kwargs`` are not
    taken from it (the run warns when they differ from the SFT run's). Needed unless ``model`` is the embedded
    ``tiny-base`` (or ``tiny``, ``tiny-small``), fine-tuned automatically by the sft tiny preset, or
    ``smollm2-135m-instruct``, by the sft smol preset; any other model (a Hugging Face name, a directory or a
    ``.gguf`` file) needs it."""
    sft_overrides: dict[str, Any] = field(default_factory=dict)
    """Options of the automatic SFT run (with an embedded or SmolLM2 ``model`` and no ``sft_run``); it gets the
    run's ``env_id`` and ``env_kwargs`` unless these set their own."""
    data_seed: int = 0
    """Data seed of the env (database, tasks, the SFT/RL halves of the train split) and of the automatic SFT
    run; ``seed`` is the RL run's own (the order of training tasks, sampling, initialisation). Runs that differ
    only in ``seed`` start from the same team and are evaluated on the same tasks."""
    iterations: int = 2
    """RL iterations; each starts by refreshing the reference policy (paper: 2)."""
    steps_per_iteration: int = 10
    """Optimisation steps per iteration."""
    tasks_per_step: int = 8
    """Tasks per step (over all processes), drawn from the RL part of the train split."""
    group_size: int = 5
    """G: samples per group (paper: 5)."""
    temperature: float = 1.2
    """Temperature of the G samples (paper: 1.2)."""
    top_p: float = GenerationSettings.top_p
    """Nucleus sampling of the G samples (default: no truncation)."""
    lr: float = 1e-6
    """Learning rate of every role's optimiser (paper: 1e-6)."""
    update_epochs: int = 1
    """Optimiser steps on each step's samples (GRPO's mu, TRL's ``num_iterations``); after the first, the
    clipped importance ratio to the sampling policy bounds how far the policy moves."""
    partial_credit: float = 0.0
    """Share of the training reward's accuracy term given as the mean of the task's checks instead of their
    product (``joy_env.RewardConfig.partial_credit``): a denser signal where samples rarely differ in success.
    Training rollouts only (the training reward curves and ``joyagents_grpo``'s memory labels include it);
    evaluation scores the default reward."""
    loss_type: str = "grpo"
    """Token aggregation: ``grpo``, ``bnpo``, ``dr_grpo`` or ``dapo`` (as in TRL)."""
    epsilon: float = 0.2
    """Lower clipping of the importance ratio (and upper, unless ``epsilon_high`` is set)."""
    epsilon_high: float | None = None
    """Upper clipping (DAPO's clip-higher, e.g. 0.28)."""
    beta: float = 0.04
    """Weight of the k3 KL penalty to the reference policy (0 skips the reference forward)."""
    scale_rewards: str | bool = "group"
    """What the centred rewards are divided by, as TRL names it: ``group`` (the group's std), ``batch`` (the std of
    every reward of the step's updated groups) or ``none`` (Dr. GRPO: ``r - mean`` as it is); ``true`` / ``false``
    are read as ``group`` / ``none``."""
    advantage_reward: str = "total"
    """The reward terms a group's advantages (and its rank in top-K selection) come from: ``total`` (R = R_A + R_F -
    R_E), ``accuracy`` (R_A alone) or ``shaped_accuracy`` (R_A; the shaping terms R_F - R_E only order the samples
    of a group whose R_A already differ, so a group that differs in format or efficiency alone is flat)."""
    min_reward_spread: float = 1e-6
    """A group whose rewards (the ``advantage_reward`` terms) differ by less than this (max - min) is flat: never
    selected nor trained on, and counted in ``groups/flat_fraction``. The default only rules out float noise (R_F
    of 3 well-formed turns of 3 and of 6 of 6 differ by 3e-17)."""
    groups_per_step: int = 0
    """Dynamic sampling (DAPO): a step draws batches of ``tasks_per_step`` tasks until it holds this many groups
    that are not flat (over all processes), at most ``max_draws`` batches, and its one optimiser step per role
    covers the groups of every task drawn (``joyagents_grpo`` selects its ``top_k`` among them). 0: one batch."""
    max_draws: int = 4
    """The most batches of tasks one step draws with ``groups_per_step`` (``sampling/draws`` logs how many)."""
    micro_batch_size: int = 16
    """Sequences per forward/backward in the update."""
    max_grad_norm: float = 1.0
    """Gradient clipping per role."""
    max_new_tokens: int = GenerationSettings.max_new_tokens
    """Cap of generated tokens per agent turn."""
    max_cycles: int = GenerationSettings.max_cycles
    """Agent turns per episode."""
    max_prompt_tokens: int = GenerationSettings.max_prompt_tokens
    """Longer prompts leave out their oldest turns, never the system prompt, the tools or the request
    (``prompts/truncated`` counts them)."""
    token_budget: int = 0
    """Stop once this many tokens have been generated in training rollouts, over all processes (0: run every
    step). Gives trainers with different sampling schemes the same budget (``benchmarks/run_baselines.py``)."""
    checkpoint_every: int = 5
    """Steps between checkpoints (and at the end of every iteration)."""
    resume: bool = False
    """Continue the run in ``output_dir`` from its newest complete checkpoint (``--resume``)."""
    log_with: str | None = None
    """An Accelerate tracker (e.g. ``tensorboard``) mirroring the JSONL metrics."""
    dtype: str | None = None
    """The team's dtype in this run: unset keeps the starting team's (its ``team.json``); ``auto`` picks bfloat16
    where the CPU or GPU multiplies it natively and float32 elsewhere (:mod:`joy_agents.dtypes`); or ``float32``,
    ``bfloat16``, ``float16``. The LoRA adapters train in float32 whatever the base's dtype."""

    RANGES: ClassVar[dict[str, Range]] = {
        **RunConfig.RANGES,
        "data_seed": seed_range(),
        "iterations": positive_int(),
        "steps_per_iteration": positive_int(),
        "tasks_per_step": positive_int(),
        "group_size": Range(2, COUNT_MAX, integer=True),  # a group of one has no variance
        "temperature": positive(100),
        "top_p": Range(0, 1, low_open=True),
        "lr": learning_rate(),
        "update_epochs": positive_int(EPOCHS_MAX),
        "partial_credit": share(),
        "epsilon": positive(100),
        "epsilon_high": Range(0, 100, low_open=True, none_ok=True),
        "beta": Range(0, 1e6),
        "min_reward_spread": Range(0, 1e6),
        "groups_per_step": count(COUNT_MAX),
        "max_draws": positive_int(1000),
        "micro_batch_size": positive_int(),
        "max_grad_norm": positive(1e6),
        "max_cycles": positive_int(10**4),
        "max_prompt_tokens": tokens(),
        "token_budget": count(10**10),
        "checkpoint_every": positive_int(),
    }
    """The valid values of every numeric option (:mod:`joy_trainers.ranges`); a subclass extends them."""
    RESUME_SAFE: ClassVar[tuple[str, ...]] = (
        "iterations",
        "steps_per_iteration",
        "token_budget",
        "eval_tasks",
        "eval_split",
        "eval_baseline",
        "checkpoint_every",
        "draft_tokens",
        "draft_max_rows",
        "log_with",
        "output_dir",
        "resume",
        "overwrite",
    )
    """Options ``--resume`` may change (:mod:`joy_trainers.resume_config`): more steps (the steps already
    run keep their meaning), evaluation, checkpointing and logging; every other one changes what the steps
    already run mean, and a resume that changes it is refused."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {self.loss_type!r}")
        self.scale_rewards = scale_mode(self.scale_rewards)
        if self.dtype is not None and self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES} or unset, got {self.dtype!r:.80}")
        if self.advantage_reward not in ADVANTAGE_REWARDS:
            raise ValueError(
                f"advantage_reward must be one of {ADVANTAGE_REWARDS}, got {self.advantage_reward!r}; "
                "e.g. --set advantage_reward=shaped_accuracy"
            )

    def generation_settings(self) -> GenerationSettings:
        """The settings of the rollouts and evaluations: ``max_new_tokens``, ``max_cycles``, ``max_prompt_tokens``,
        the engine and its options."""
        return run_settings(self, max_cycles=self.max_cycles, max_prompt_tokens=self.max_prompt_tokens)

    @property
    def total_steps(self) -> int:
        """``iterations * steps_per_iteration``."""
        return self.iterations * self.steps_per_iteration
