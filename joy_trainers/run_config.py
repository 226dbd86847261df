"""``RunConfig``: the options every trainer shares (the base model, the environment, the evaluation, the
generation settings and the run directory); ``SFTConfig`` and ``RLConfig`` extend it, and so does a plugin's
Config. Its checks run once, in ``__post_init__``, before a subclass's own."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import joy_env
from joy_agents.sampling.base import check_engine
from joy_agents.sampling.settings import GenerationSettings, VLLMConfig
from joy_trainers.checks import env_kwargs_problem
from joy_trainers.errors import shown
from joy_trainers.generation import run_settings
from joy_trainers.options import config_from_dict, options_problem
from joy_trainers.ranges import Range, check_ranges, count, positive_int, seed_range, tokens


@dataclass
class RunConfig:
    """Options every trainer shares (one line per field); a trainer's Config dataclass extends it."""

    model: str = "tiny-base"
    """Base model of the team (a trainer documents the names it accepts)."""
    env_id: str = "joy/mixed-v0"
    """Environment of training and evaluation."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Task-source options of the environment (``joy_env.make``), in training and evaluation, e.g.
    ``{"domain": "airline"}`` with ``env_id=joy/tau2-v0``."""
    train_customer: bool = False
    """Train the customer of a dialogue the team plays (``env_kwargs`` with ``"protocol": "interactive",
    "customer": "team"`` for ``joy/tau2-v0``), which is then a role of the team. Off: the customer is frozen, its
    adapter stays as it was initialised or loaded (``sft`` drops its examples, RL never updates it). On: ``sft``
    trains it on the expert's customer turns and RL updates it like the other roles. The team reward also pays
    the customer, so a trained customer can learn to make the service agent's job easier (confirm anything, stop
    early, give information it should not): the scores of a team with a trained customer do not compare with
    tau2-bench's, whose user simulator is fixed. No effect on an env without a customer agent; ``--resume``
    cannot change it."""
    seed: int = 0
    """Seed of the run (training, sampling, initialisation; an ``sft`` run's data and tiny model too)."""
    eval_tasks: int = 200
    """Test tasks evaluated before and after training (0: skip evaluation)."""
    eval_split: str = "test"
    """Split evaluated."""
    eval_baseline: bool = True
    """Also evaluate the starting team (``baseline_metrics``); off when a caller evaluates it once for many runs."""
    max_new_tokens: int = GenerationSettings.max_new_tokens
    """Cap of generated tokens per agent turn."""
    rollout_engine: str = GenerationSettings.engine
    """Generation engine of the rollouts and of every evaluation (``joy_agents.sampling.GenerationSettings.engine``):
    ``continuous`` (every live episode's turn in one decode batch), ``generate`` (one ``generate`` call per role
    per step) or ``vllm`` (needs vLLM and a team of LoRA adapters)."""
    vllm_options: dict[str, Any] = field(default_factory=dict)
    """How the ``vllm`` engine is built (``joy_agents.sampling.VLLMConfig`` fields), e.g.
    ``--set vllm_options='{"gpu_memory_utilization": 0.5}'``; used with ``rollout_engine=vllm``."""
    draft_tokens: int = GenerationSettings.draft_tokens
    """Tokens the continuous engine drafts per row and step by prompt lookup, checked by the model in the same
    forward (``joy_agents.sampling.GenerationSettings.draft_tokens``): the same outputs in fewer forwards (0: none)."""
    draft_max_rows: int = GenerationSettings.draft_max_rows
    """Drafts run only while a model decodes at most this many rows (``GenerationSettings.draft_max_rows``): a step
    of many rows already keeps the device busy, and its drafted positions would cost more than they save."""
    output_dir: str | None = None
    """Run directory; default ``runs/<trainer>-<timestamp>``."""
    overwrite: bool = False
    """Replace a run already in ``output_dir``: remove the files the project wrote there (``--overwrite``)."""

    RANGES: ClassVar[dict[str, Range]] = {
        "seed": seed_range(),
        "eval_tasks": count(),
        "max_new_tokens": tokens(),
        "draft_tokens": count(1024),
        "draft_max_rows": positive_int(),
    }
    """The valid values of every numeric option (:mod:`joy_trainers.ranges`); a subclass extends them."""
    RENAMED: ClassVar[dict[str, str]] = {}
    """Old option names still read (for one release) by :meth:`from_dict`, with their new names."""

    def __post_init__(self) -> None:
        problem = options_problem(vars(self))  # depth and size first: the checks below quote the values
        if problem:
            raise ValueError(problem)
        check_ranges(self)
        if self.eval_split not in joy_env.SPLITS:
            raise ValueError(f"eval_split must be one of {joy_env.SPLITS}, got {shown(self.eval_split)}")
        problem = env_kwargs_problem(self.env_id, self.env_kwargs)
        if problem:
            raise ValueError(problem)
        check_engine(self.rollout_engine, installed=True, name="rollout_engine")
        try:
            VLLMConfig.from_options(self.vllm_options)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"vllm_options: {exc}") from None

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Any:
        """Build from a dict (YAML, ``--set``), rejecting unknown names and values of the wrong type; an old
        name in ``RENAMED`` is read as its new one, with a warning."""
        return config_from_dict(cls, values)

    def frozen_roles(self, env: Any) -> frozenset[str]:
        """The roles of ``env`` the run never trains: the customer of a dialogue the team plays (``env.customer``
        when it is one of ``env.possible_agents``), unless ``train_customer``. The same on every process: it
        depends only on the options."""
        customer = getattr(env, "customer", None)
        if self.train_customer or customer is None or customer not in env.possible_agents:
            return frozenset()
        return frozenset({customer})

    def generation_settings(self) -> GenerationSettings:
        """The generation settings of the run's rollouts and evaluations, written into ``results.json``
        (``"generation"``): the options above, with the default turns per episode and prompt tokens. A trainer's
        Config that states its own overrides it (:func:`joy_trainers.generation.run_settings`)."""
        limits = GenerationSettings()
        return run_settings(self, max_cycles=limits.max_cycles, max_prompt_tokens=limits.max_prompt_tokens)
