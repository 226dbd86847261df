"""``sft``: supervised fine-tuning of every role from the environment's expert trajectories.

The first stage of the JoyAgents-R1 pipeline. Reads top to bottom:

1. the base model: the pretrained tiny base shipped with the package (``model="tiny-base"``, see
   :mod:`joy_trainers.tiny_base`), the untrained embedded tiny model (``"tiny"``, built offline and cached)
   or any Hugging Face name or local path;
2. expert examples per role from the SFT part of the train split (:mod:`joy_agents.sft_data`); the roles are
   the env's agents, ``customer`` among them where the team plays a dialogue's customer, whose examples are
   dropped unless ``train_customer`` (a frozen customer);
3. optional full fine-tuning of the shared base on all roles' examples (``base_epochs``): a randomly
   initialised tiny model must first learn the language of the environment; a pretrained model skips it;
4. one LoRA adapter per role on the shared base, each trained on its role's examples with TRL's
   ``SFTTrainer`` (assistant-only loss; Accelerate underneath; TRL's side is :mod:`joy_trainers.sft_trl`);
5. evaluation of the team on ``eval_split`` before and after, ``results.json``, ``results.md`` and a
   loss / accuracy plot in the run directory.

Every stage boundary, and every ``checkpoint_steps`` optimiser steps inside a stage, is a checkpoint that
``--resume`` continues from (:mod:`joy_trainers.sft_checkpoints`). Under ``accelerate launch`` TRL trains each stage
data-parallel and the main process alone prints and writes (:class:`~joy_trainers.base.BaseTrainer`).

Paper settings for Qwen2.5-3B: lr 5e-6, 5 epochs (see ``examples/configs/sft_qwen2.5-3b.yaml``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch

import joy_env
from joy_agents.dtypes import DTYPES, resolve_dtype
from joy_agents.models import resolve_model_path
from joy_agents.policy import TeamConfig, TeamPolicy
from joy_agents.sampling.settings import GenerationSettings
from joy_agents.sft_data import (
    build_sft_examples,
    conversation_rows,
    language_model_windows,
    split_train_tasks,
    tokenize_example,
)
from joy_agents.tiny import (
    BUILD_VERSION,
    TINY_LLAMA,
    TINY_MODELS,
    build_tiny_llama,
    build_tiny_model,
    default_cache_dir,
    env_fingerprint,
    tiny_base_dir,
)
from joy_trainers import sft_trl
from joy_trainers.base import BaseTrainer, Trained
from joy_trainers.checks import check_domain_weights, check_env_options, check_model, check_sft_sizes
from joy_trainers.distributed import is_main, on_main, say, world
from joy_trainers.errors import UsageError
from joy_trainers.generation import run_settings, sft_prompt_tokens
from joy_trainers.presets import SFT_PRESETS
from joy_trainers.random_states import rng_state
from joy_trainers.ranges import COUNT_MAX, Range, count, epochs, learning_rate, positive_int, share, tokens
from joy_trainers.resume_config import check_resume_config, write_config
from joy_trainers.run_config import RunConfig
from joy_trainers.rundir import write_json_atomic, write_results, writing
from joy_trainers.sft_batches import (
    bucketed_order,
    collate_left,
    collate_shared_prefix,
    prefix_groups,
    token_batches,
    typical_rows,
)
from joy_trainers.sft_checkpoints import (
    PROGRESS_FILE,
    SFTProgress,
    keep_metrics,
    read_progress,
    recover,
    save_base,
    save_team_checkpoint,
    stage_checkpoint,
    team_checkpoint,
)
from joy_trainers.sft_loss import completion_loss, prefix_sharing_supported  # noqa: F401 - completion_loss: re-exported
from joy_trainers.sft_plot import write_logs

LOSSES = ("completion", "conversation", "all")
"""Row kinds of the SFT stages (see ``SFTConfig.base_loss``)."""


@dataclass
class SFTConfig(RunConfig):
    """Configuration of the ``sft`` trainer (one line per field; the shared ones in
    :class:`~joy_trainers.run_config.RunConfig`). Its ``model``: ``"tiny-base"`` (the pretrained tiny base shipped
    with the package), ``"tiny"`` (embedded, untrained, built offline), ``"tiny-small"``, or a Hugging Face name /
    local path; its data: the expert trajectories of ``env_id`` (with ``env_kwargs``, e.g. ``{"domain": "airline"}``
    with ``env_id=joy/tau2-v0``, whose splits are ``train`` and ``test``), drawn with ``seed``."""

    sft_tasks: int = 800
    """Expert episodes (from the SFT part of the train split) turned into examples."""
    rl_fraction: float = 0.5
    """Share of the train tasks kept for RL, never read here."""
    recovery_rate: float = 0.0
    """Share of expert turns that also give a recovery example: the role's own broken turn and the env's
    error message, then the expert's action (:func:`joy_agents.sft_data.expert_examples`)."""
    entity_swap: float = 0.0
    """Share of the SFT episodes whose rare entities (names, codes, ids, numbers the expert wrote) are replaced
    by fresh random ones throughout the episode, so copying from the request and the tool results is the only
    way to predict them (:func:`joy_agents.sft_data.swap_entities`). Off by default (its effect on the tiny
    preset: ``docs/results.md``)."""
    domain_weights: dict[str, float] = field(default_factory=dict)
    """Reweighting of the SFT tasks' domains against the env's own mix, e.g. ``{"general": 2.0, "math": 0.5}``
    (unlisted domains: 1; the number of tasks stays ``sft_tasks``)."""
    base_epochs: float = 0.0
    """Epochs of full fine-tuning of the shared base on all roles' examples (0: skip)."""
    base_loss: str = "completion"
    """Rows and loss of the base stage: ``completion`` (one row per expert turn, its completion supervised),
    ``conversation`` (the same labels with one row per role's conversation, every expert turn of it
    supervised: fewer tokens for the same labels) or ``all`` (every token of each role's whole conversation,
    in ``max_length`` windows: a language model of the environment's text)."""
    base_lr: float = 2e-3
    """Learning rate of the base stage."""
    adapter_epochs: float = 1.0
    """Epochs of each role's LoRA adapter on its examples (0: skip)."""
    role_adapter_epochs: dict[str, float] = field(default_factory=dict)
    """Per-role overrides of ``adapter_epochs``, e.g. ``{"general": 2.0}`` for a role that needs more (0: that
    role's adapter stays untrained). The roles are the env's agents (``customer`` where the team plays it); the
    built-in roles' names are accepted for any env, so that a preset applies to a custom one."""
    adapter_lr: float = 1e-3
    """Learning rate of the adapter stage."""
    adapter_loss: str = "completion"
    """Rows of the adapter stage: ``completion`` or ``conversation`` (as ``base_loss``)."""
    prompt_style: str = "full"
    """How a role's turn is rendered, in SFT and in every later use of the team (saved with it): ``full`` (system
    prompt and tools) or ``compact`` (the role's name instead; :func:`joy_agents.policy.prompt_view`)."""
    separate_models: dict[str, str] = field(default_factory=dict)
    """Roles with their own model instead of a shared-base adapter, e.g. ``{"master": "Qwen/Qwen2.5-7B-Instruct"}``."""
    lora_r: int = 16
    """LoRA rank."""
    lora_alpha: int = 32
    """LoRA alpha."""
    batch_size: int = 8
    """Per-device batch size (rows), unless ``batch_tokens`` sizes the batches."""
    batch_tokens: int = 0
    """Per-device batches sized by tokens: as many rows as fit in this many tokens (rows x longest row, padding
    included), so short rows make wide batches and every step carries about the same work; 0: ``batch_size``
    rows (:func:`~joy_trainers.sft_batches.token_batches`)."""
    grad_accum: int = 1
    """Gradient accumulation steps."""
    max_length: int = 1024
    """Tokens per example; longer prompts are cut from the left. Evaluation prompts are cut the same way
    (to ``max_length - max_new_tokens``), so the model is tested on the view it was trained on."""
    warmup_ratio: float = 0.05
    """Share of steps with linear warm-up."""
    max_new_tokens: int = GenerationSettings.max_new_tokens
    """Cap of generated tokens per agent turn at evaluation (``eval_max_new_tokens`` before 0.2)."""
    eval_max_cycles: int = GenerationSettings.max_cycles
    """Agent turns per evaluation episode."""
    baseline_tasks: int | None = None
    """Tasks of the baseline evaluation (the first ones of the same list; default ``eval_tasks``). An
    untrained tiny model never ends an episode early, so its evaluation costs the most."""
    dtype: str = "float32"
    """The team's dtype and the training's precision: ``float32``, ``bfloat16``, ``float16`` or ``auto``, which picks
    ``bfloat16`` on a GPU that supports it and on a CPU that multiplies it natively (AVX512-BF16 or AMX) unless the
    base is fine-tuned whole there (``base_epochs`` > 0), ``float32`` elsewhere (:mod:`joy_agents.dtypes`)."""
    activation_checkpointing: bool = True
    """Recompute activations in the backward pass (TRL's default): less memory, more compute."""
    shared_prefix: bool = True
    """In the adapter stage, batch a role's rows that start with the same tokens (its system prompt and tools)
    together and run those tokens once per batch (:func:`collate_shared_prefix`): the same loss and gradients
    in less compute. Used only without activation checkpointing, in one process, with a plain output head.
    The base stage keeps batches that mix roles: grouped by prefix, each of its batches would hold one role."""
    checkpoint_steps: int = 500
    """Optimiser steps between checkpoints inside a stage (TRL's own: weights, optimiser, random states), from
    which ``--resume`` continues the stage; 0: at stage boundaries only (:mod:`joy_trainers.sft_checkpoints`)."""
    resume: bool = False
    """Continue the run in ``output_dir`` from its last stage boundary or checkpoint (``joy-train --resume``)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form notes copied into results.json."""

    RANGES: ClassVar[dict[str, Range]] = {
        **RunConfig.RANGES,
        "sft_tasks": positive_int(),
        "rl_fraction": Range(0, 1, high_open=True),
        "recovery_rate": share(),
        "entity_swap": share(),
        "base_epochs": epochs(),
        "base_lr": learning_rate(),
        "adapter_epochs": epochs(),
        "adapter_lr": learning_rate(),
        "lora_r": positive_int(2**16),
        "lora_alpha": positive_int(),
        "batch_size": positive_int(),
        "batch_tokens": tokens(0),
        "grad_accum": positive_int(),
        "max_length": tokens(2),
        "warmup_ratio": share(),
        "eval_max_cycles": positive_int(10**4),
        "baseline_tasks": Range(1, COUNT_MAX, integer=True, none_ok=True),
        "checkpoint_steps": count(),
    }
    """The valid values of every numeric option (:mod:`joy_trainers.ranges`)."""
    RESUME_SAFE: ClassVar[tuple[str, ...]] = (
        "eval_tasks",
        "eval_split",
        "eval_baseline",
        "baseline_tasks",
        "checkpoint_steps",
        "extra",
    )
    """The options ``--resume`` may change (:mod:`joy_trainers.resume_config`); any other change is refused."""
    RENAMED: ClassVar[dict[str, str]] = {"eval_max_new_tokens": "max_new_tokens"}
    """Old option names still read for one release (``docs/changelog.md``)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        bad_weights = {d: w for d, w in self.domain_weights.items() if not Range(0).accepts(w)}
        if bad_weights:
            raise ValueError(f"domain_weights must map domains to numbers >= 0, got {bad_weights}")
        bad = {r: e for r, e in self.role_adapter_epochs.items() if not isinstance(e, (int, float)) or e < 0}
        if bad:
            raise ValueError(f"role_adapter_epochs must map roles to numbers >= 0, got {bad}")
        if self.base_loss not in LOSSES:
            raise ValueError(f"base_loss must be one of {LOSSES}, got {self.base_loss!r}")
        if self.adapter_loss not in LOSSES[:2]:
            raise ValueError(f"adapter_loss must be one of {LOSSES[:2]}, got {self.adapter_loss!r}")
        if 0 < self.batch_tokens < self.max_length:
            raise ValueError(
                f"batch_tokens={self.batch_tokens} is under max_length={self.max_length}: a longest row would not fit; "
                f"set batch_tokens >= {self.max_length} or 0"
            )
        if self.eval_tasks and self.max_new_tokens >= self.max_length:
            raise ValueError(
                f"max_new_tokens={self.max_new_tokens} leaves no prompt within max_length="
                f"{self.max_length} (evaluation prompts are cut to max_length - max_new_tokens); set "
                f"max_length above {self.max_new_tokens} or lower max_new_tokens"
            )
        from joy_agents.policy import PROMPT_STYLES

        if self.prompt_style not in PROMPT_STYLES:
            raise ValueError(f"prompt_style must be one of {PROMPT_STYLES}, got {self.prompt_style!r}")
        if self.dtype == "auto":
            self.dtype = auto_dtype(whole_base=self.base_epochs > 0)
        if self.dtype not in DTYPES[1:]:  # auto is resolved above
            raise ValueError(f"dtype must be float32, bfloat16, float16 or auto, got {self.dtype!r}")

    def generation_settings(self) -> GenerationSettings:
        """The evaluation's settings: ``max_new_tokens``, ``eval_max_cycles``, prompts cut to the view the team
        trained on (``max_length - max_new_tokens``), the engine and its options."""
        prompt = sft_prompt_tokens(self.max_new_tokens, self.max_length)
        return run_settings(self, max_cycles=self.eval_max_cycles, max_prompt_tokens=prompt)


def resolve_model(name: str, seed: int) -> str:
    """A loadable model path: builds the embedded tiny model for ``tiny`` / ``tiny-small`` (and ``tiny-llama``,
    :func:`joy_agents.tiny.build_tiny_llama`); ``tiny-base`` is the
    pretrained tiny base shipped with the package (:func:`joy_agents.tiny.tiny_base_dir`); a ``.gguf`` file or
    ``smollm2-135m-instruct`` is converted once (:func:`joy_agents.models.resolve_model_path`)."""
    if name == "tiny-base":
        return str(tiny_base_dir())
    if name == TINY_LLAMA:
        return str(build_tiny_llama(seed=seed))
    if name in ("tiny", "tiny-small"):
        return str(build_tiny_model(seed=seed, size="tiny" if name == "tiny" else "small"))
    return resolve_model_path(name)


def sft_rows(tokenizer: Any, examples: list, max_length: int, loss: str = "completion") -> list[dict[str, list[int]]]:
    """The tokenised rows of ``examples`` of kind ``loss`` (see ``SFTConfig.base_loss``)."""
    if loss == "all":
        return language_model_windows(tokenizer, examples, max_length)
    if loss == "conversation":
        return conversation_rows(tokenizer, examples, max_length)
    return [tokenize_example(tokenizer, ex, max_length) for ex in examples]


def _dataset(
    rows: list[dict[str, list[int]]],
    batch_size: int,
    epochs: float,
    seed: int,
    shared_prefix: bool,
    batch_tokens: int = 0,
) -> tuple[Any, list[list[int]] | None]:
    """``rows`` for ``epochs`` passes (train it for one epoch, sequentially): in :func:`bucketed_order` batches of
    ``batch_size`` rows, or with ``batch_tokens`` in :func:`token_batches` (then also returned, as index lists
    into the dataset, for the loader); with ``shared_prefix``, batched by :func:`prefix_groups`."""
    from datasets import Dataset  # imported here: it costs a second, and only training needs it

    lengths = [len(r["input_ids"]) for r in rows]
    if batch_tokens:
        typical = typical_rows(lengths, batch_tokens)
        groups = prefix_groups([r["input_ids"] for r in rows], typical) if shared_prefix else None
        batches = token_batches(lengths, batch_tokens, epochs, seed, groups=groups)
        order = [i for b in batches for i in b]
        bounds = list(itertools.accumulate((len(b) for b in batches), initial=0))  # where each batch starts
        spans = [list(range(a, b)) for a, b in itertools.pairwise(bounds)]
        return Dataset.from_list([rows[i] for i in order]), spans
    groups = prefix_groups([r["input_ids"] for r in rows], batch_size) if shared_prefix else None
    order = bucketed_order(lengths, batch_size, epochs, seed, groups=groups)
    return Dataset.from_list([rows[i] for i in order]), None


def auto_dtype(whole_base: bool = False) -> str:
    """What ``dtype="auto"`` picks for the run: ``bfloat16`` on a CUDA GPU that supports it; on a CPU, what a team
    picks (:func:`joy_agents.dtypes.resolve_dtype`), float32 for a base fine-tuned whole (``whole_base``)."""
    if torch.cuda.is_available():
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
    return resolve_dtype("auto", "cpu", use_lora=not whole_base)[0]


class SFTTrainer(BaseTrainer):
    """Runs the ``sft`` stage for every role (see the module documentation); the lifecycle (run directory,
    evaluation, results, several processes) is :class:`~joy_trainers.base.BaseTrainer`'s."""

    name = "sft"
    config_class = SFTConfig
    presets = SFT_PRESETS
    config: SFTConfig
    roles: tuple[str, ...] = joy_env.AGENTS
    """The team's roles: the env's agents (``possible_agents``), set when the run starts."""
    logs: dict[str, list[dict[str, Any]]]
    """TRL's log of each stage (``logs.json``), filled as the stages run."""
    examples: dict[str, list[Any]]
    """The expert examples of each role (:meth:`expert_data`; a frozen role's are dropped)."""
    tokenizer: Any
    """The base model's tokenizer (:meth:`expert_data`)."""

    def check(self) -> None:
        """The env's options and splits, the roles of ``role_adapter_epochs`` and the model, before any work."""
        cfg = self.config
        splits = {"the train split": "train", **({"eval_split": cfg.eval_split} if cfg.eval_tasks else {})}
        # the env_kwargs names: checked by the config
        envs = check_env_options(cfg.env_id, cfg.env_kwargs, cfg.seed, splits, names_checked=True)
        roles = tuple(envs["train"].possible_agents)
        unknown = sorted(set(cfg.role_adapter_epochs) - set(roles) - set(joy_env.AGENTS))
        if unknown:
            raise UsageError(
                f"role_adapter_epochs has unknown role(s) {unknown}; the roles of {self._env_name()}: "
                f"{', '.join(roles)}"
            )
        check_model(cfg.model)
        check_sft_sizes(cfg)  # lora_r, max_length and a batch against the model and the memory there is
        check_domain_weights(cfg.domain_weights, envs["train"], cfg.sft_tasks, cfg.rl_fraction, cfg.seed)

    def claimed(self) -> None:
        """With ``resume``, refuse changed options (the safe ones are said); then save them (``config.json``)."""
        cfg = self.config
        if cfg.resume:
            changed = check_resume_config(self.run.path, cfg, (self.run.path / PROGRESS_FILE).is_file())
            if changed:
                print(f"[sft] --resume with changed options: {'; '.join(changed)}")
        write_config(self.run.path, cfg)

    def _env_name(self) -> str:
        cfg = self.config
        return f"{cfg.env_id} {cfg.env_kwargs}" if cfg.env_kwargs else cfg.env_id

    def write_outputs(self, trained: Trained, results: dict[str, Any]) -> None:
        """``logs.json`` (TRL's log per stage) and ``training.png``; a tiny model's run is recorded in the cache's
        index of SFT runs (:func:`register_sft_run`), so that RL runs with the same settings reuse its team."""
        write_logs(self.run.path, results, self.logs)
        register_sft_run(self.run.path, results["config"])

    def run_training(self) -> Trained:
        """Run the stages (see the module documentation) on every process, one method each: the expert data
        (:meth:`expert_data`), the starting team's evaluation (:meth:`baseline_stage`), the shared base
        (:meth:`base_stage`) and each role's adapter (:meth:`adapter_stages`)."""
        cfg = self.config
        frozen, base = self.expert_data()
        if cfg.resume:  # damaged checkpoints kept aside, and the run falls back past them (one line each)
            for line in on_main(lambda: recover(self.run.path)):
                say(f"[sft] --resume: {line}")
        progress = read_progress(self.run.path) if cfg.resume else SFTProgress()
        if progress.done:
            say(f"[sft] --resume: finished before: {', '.join(progress.done)}")
        progress.resume_rng()  # the random states the finished stages left: the next draws what it would have
        if is_main():
            keep_metrics(self.run.path, progress.done, self.run.path / "work")
        self.baseline_stage(progress, base)
        base = self.base_stage(progress, base)
        team = self.adapter_stages(progress, base, frozen)
        self.logs = progress.logs
        if is_main():
            shutil.rmtree(self.run.path / "work", ignore_errors=True)  # TRL's output folders
        counts = {r: len(v) for r, v in self.examples.items()}
        return Trained(
            team=team,
            steps=progress.steps,
            baseline=progress.baseline,
            fields={"model": cfg.model, "generated_tokens": 0, "examples_per_role": counts},
        )

    def expert_data(self) -> tuple[frozenset[str], str]:
        """The team's roles (the env's agents), the tokenizer and the expert examples per role
        (:attr:`examples`; a frozen role's dropped); returns the frozen roles and the base model's path."""
        from transformers import AutoTokenizer  # here: it costs import time

        cfg = self.config
        train_env = joy_env.make(cfg.env_id, split="train", seed=cfg.seed, **cfg.env_kwargs)
        env_name = self._env_name()
        self.roles = tuple(train_env.possible_agents)  # the team's roles: the env's agents
        frozen = cfg.frozen_roles(train_env)
        torch.manual_seed(cfg.seed)
        base = resolve_model(cfg.model, cfg.seed)
        self.tokenizer = AutoTokenizer.from_pretrained(base)
        train_tasks = train_env.num_tasks
        train_env.close()
        sft_part = len(split_train_tasks(train_tasks, cfg.rl_fraction, cfg.seed)[0])
        if sft_part < cfg.sft_tasks:
            say(
                f"[sft] the SFT part of {env_name}'s train split (rl_fraction={cfg.rl_fraction}) has {sft_part} "
                f"tasks; using all of them (sft_tasks={cfg.sft_tasks})"
            )
        tasks = min(sft_part, cfg.sft_tasks)
        say(f"[sft] base model {base} in {cfg.dtype}; building expert data from {env_name} ({tasks} tasks)")
        examples = build_sft_examples(
            env_id=cfg.env_id,
            num_tasks=cfg.sft_tasks,
            rl_fraction=cfg.rl_fraction,
            seed=cfg.seed,
            recovery_rate=cfg.recovery_rate,
            domain_weights=cfg.domain_weights,
            entity_swap=cfg.entity_swap,
            prompt_style=cfg.prompt_style,
            env_kwargs=cfg.env_kwargs,
        )
        dropped = {r: len(examples.get(r, [])) for r in sorted(frozen)}
        for role in frozen:  # a frozen customer: neither its adapter nor the base stage learns its turns
            examples[role] = []
        counts = {r: len(v) for r, v in examples.items()}
        not_trained = "".join(
            f"; {r}: {n} examples dropped (frozen; --set train_customer=true trains it)" for r, n in dropped.items()
        )
        say(f"[sft] examples per role: {counts}{not_trained}")
        self.examples = examples
        self._rows: dict[tuple[str, str], list[dict[str, list[int]]]] = {}
        tokenizer = self.tokenizer
        self._pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        return frozen, base

    def rows_of(self, role: str, loss: str) -> list[dict[str, list[int]]]:
        """A role's tokenised rows of kind ``loss``, built once for both stages."""
        if (role, loss) not in self._rows:
            self._rows[role, loss] = sft_rows(self.tokenizer, self.examples[role], self.config.max_length, loss)
        return self._rows[role, loss]

    def collate(self, batch: list[dict[str, list[int]]]) -> dict[str, Any]:
        """A batch of rows, left-padded."""
        return collate_left(batch, self._pad_id)

    def collator(self, model: Any) -> tuple[bool, Any]:
        """Whether an adapter stage of ``model`` shares batch prefixes, and its collate function."""
        cfg = self.config
        shared = cfg.shared_prefix and not cfg.activation_checkpointing and world()[1] == 1
        if shared and prefix_sharing_supported(model):
            return True, lambda batch: collate_shared_prefix(batch, self._pad_id)
        return False, self.collate

    def baseline_stage(self, progress: SFTProgress, base: str) -> None:
        """The starting team's evaluation (``baseline_metrics``), unless done before or not asked for."""
        cfg = self.config
        if cfg.eval_tasks and cfg.eval_baseline and "baseline" not in progress.done:
            say("[sft] evaluating the starting team")
            # the first tasks of the same list: never more than the trained team is evaluated on
            tasks = min(cfg.baseline_tasks or cfg.eval_tasks, cfg.eval_tasks)
            progress.baseline = self.evaluate(TeamPolicy(self._team_config(base)), seed=cfg.seed, tasks=tasks)
            self._finish_stage(progress, "baseline")

    def base_stage(self, progress: SFTProgress, base: str) -> str:
        """Stage 1, full fine-tuning of the shared base on every role's rows (``base_epochs``; saved as
        ``base/``); returns the base model the adapters train on."""
        from transformers import AutoModelForCausalLM  # here: the model classes cost import time

        cfg = self.config
        if cfg.base_epochs <= 0:
            return base
        if "base" not in progress.done:
            what = {
                "all": "every token of whole conversations",
                "conversation": "expert turns, a row per conversation",
            }.get(cfg.base_loss, "expert turns")
            say(f"[sft] stage 1: full fine-tuning of the shared base for {cfg.base_epochs} epochs ({what})")
            model = AutoModelForCausalLM.from_pretrained(base, dtype=getattr(torch, cfg.dtype))
            everything = [row for role in self.examples for row in self.rows_of(role, cfg.base_loss)]
            # batches that mix roles: grouped by prefix they would hold one role each, which trained the tiny
            # base worse
            trainer = self._fit("base", model, everything, self.collate, cfg.base_lr, cfg.base_epochs, False)
            progress.logs["base"] = list(trainer.state.log_history)
            progress.steps += trainer.state.global_step
            on_main(lambda: save_base(model, self.tokenizer, self.run.path / "base"))  # recorded as the run's
            self._finish_stage(progress, "base")
            del trainer, model
        return str(self.run.path / "base")

    def adapter_stages(self, progress: SFTProgress, base: str, frozen: frozenset[str]) -> TeamPolicy:
        """Stage 2, each role's adapter on its own rows (``adapter_epochs``, or ``role_adapter_epochs``), from the
        adapters as initialised or as the newest team checkpoint left them; a frozen role's stays as initialised.
        Returns the team."""
        cfg = self.config
        team_config = self._team_config(base)
        saved = team_checkpoint(self.run.path, progress)
        if saved is None:  # the adapters as initialised, so that a resumed stage starts from the same weights
            team = TeamPolicy(team_config)
            self._finish_stage(progress, "team", team)
        else:
            team = TeamPolicy.load(str(saved), device=team_config.device)
        for role in team.roles:
            if role in frozen:
                say(f"[sft] {role} is frozen (train_customer=false); its adapter stays as initialised")
                continue
            epochs = cfg.role_adapter_epochs.get(role, cfg.adapter_epochs)
            if epochs <= 0 or role in progress.done:
                continue
            if not self.examples.get(role):
                say(f"[sft] no examples for {role}; its adapter stays untrained")
                continue
            say(f"[sft] stage 2: {role} adapter on {len(self.examples[role])} examples for {epochs} epochs")
            with team.use_role(role):
                shared, collate = self.collator(team.model_for(role))
                rows = self.rows_of(role, cfg.adapter_loss)
                trainer = self._fit(role, team.model_for(role), rows, collate, cfg.adapter_lr, epochs, shared)
                progress.logs[role] = list(trainer.state.log_history)
                progress.steps += trainer.state.global_step
            self._finish_stage(progress, role, team)
        return team

    def _finish_stage(self, progress: SFTProgress, stage: str, team: Any = None) -> None:
        """Record a finished stage (with the team as it stands after it, if given) on the main process; every
        process waits for it."""

        progress.rng[stage] = rng_state()  # what the next stage draws from, also in a resumed run (run_training)

        def write() -> None:
            if team is not None:
                save_team_checkpoint(team, self.run.path, progress, stage)
            else:
                progress.finish(stage, self.run.path)
            shutil.rmtree(self.run.path / "work" / stage, ignore_errors=True)  # its TRL checkpoints

        on_main(write)  # a failure (a full disk) is every process's one line

    def _fit(self, stage: str, model: Any, rows: list, collate: Any, lr: float, epochs: float, grouped: bool) -> Any:
        """One TRL training stage over ``epochs`` passes of ``rows``; returns the finished TRL trainer, whose
        log (epochs counted over the passes) is also in ``metrics.jsonl``."""
        import datasets  # imported here with TRL
        from transformers.trainer_callback import PrinterCallback

        cfg = self.config
        bars = datasets.is_progress_bar_enabled()
        datasets.disable_progress_bars()  # TRL's dataset preparation bars: one bar per stage is ours
        dataset, batches = _dataset(rows, cfg.batch_size * cfg.grad_accum, epochs, cfg.seed, grouped, cfg.batch_tokens)
        try:
            trainer = sft_trl.trainer_class()(
                model=model,
                args=sft_trl.trl_args(cfg, self.run.path / "work" / stage, lr),
                train_dataset=dataset,
                processing_class=self.tokenizer,
                data_collator=collate,
            )
        finally:
            if bars:
                datasets.enable_progress_bars()
        trainer.batches = batches
        trainer.remove_callback(PrinterCallback)
        trainer.add_callback(sft_trl.progress_callback(stage, epochs, self.run.path / "metrics.jsonl"))
        resume = stage_checkpoint(self.run.path / "work" / stage) if cfg.resume else None
        if resume is not None:
            say(f"[sft] --resume: {stage} continues from {resume}")
        try:
            trainer.train(resume_from_checkpoint=resume)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (Terminated): the same line, its own exit status
            raise type(exc)(
                f"stopped in the {stage} stage; continue with joy-train --trainer sft --resume --output-dir "
                f"{self.run.path} (from the last stage boundary or checkpoint_steps checkpoint)"
            ) from None
        for entry in trainer.state.log_history:
            if "epoch" in entry:
                entry["epoch"] = round(float(entry["epoch"]) * epochs, 4)
        return trainer

    def _team_config(self, base: str) -> Any:
        cfg = self.config
        return TeamConfig(
            model=base,
            roles=self.roles,
            separate_models=dict(cfg.separate_models),
            lora_r=cfg.lora_r,
            lora_alpha=cfg.lora_alpha,
            dtype=cfg.dtype,
            device="cuda" if sft_trl.has_accelerator() else "cpu",
            prompt_style=cfg.prompt_style,
        )


def write_run(run_dir: Path, results: dict[str, Any], logs: dict[str, list[dict[str, Any]]]) -> None:
    """``results.json`` (atomically), ``results.md``, ``logs.json`` (TRL's log per stage) and ``training.png``
    in ``run_dir``."""
    write_results(run_dir, results)
    write_logs(run_dir, results, logs)


# ------------------------------------------------------------------------------------------ the cache of SFT runs
EVALUATION_OPTIONS = (
    "eval_tasks",
    "eval_split",
    "max_new_tokens",
    "eval_max_new_tokens",
    "eval_max_cycles",
    "rollout_engine",
    "draft_tokens",
    "draft_max_rows",
    "vllm_options",
    "eval_baseline",
    "baseline_tasks",
    "output_dir",
    "overwrite",
    "resume",
    "checkpoint_steps",
    "extra",
)
"""Options that do not shape an SFT team (evaluation, output, resumption): left out of :func:`sft_cache_key`."""


def sft_cache_key(values: dict[str, Any]) -> str:
    """The cache key of an ``sft`` run of these options: the options that shape the team (defaults filled
    in, evaluation options left out), the tiny-model build version and the env fingerprint."""
    try:
        shaping_values = {k: v for k, v in values.items() if k not in EVALUATION_OPTIONS}
        config = asdict(SFTConfig.from_dict({**shaping_values, "eval_tasks": 0}))  # evaluation: not in the key
    except ValueError as exc:
        raise UsageError(f"sft_overrides: {exc}") from None
    shaping = {k: v for k, v in config.items() if k not in EVALUATION_OPTIONS}
    if not shaping.get("env_kwargs"):  # the env's default source: the key of runs made before the option
        shaping.pop("env_kwargs", None)
    if not shaping.get("train_customer"):  # likewise: a frozen customer (the default) keeps the earlier keys
        shaping.pop("train_customer", None)
    key = {**shaping, "tiny_build": BUILD_VERSION, "env": env_fingerprint()}
    if config["model"] == "tiny-base":  # a rebuilt shipped base must not reuse a team fine-tuned from the old one
        key["tiny_base"] = _tiny_base_digest()
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _tiny_base_digest() -> str:
    return hashlib.sha256((tiny_base_dir() / "build_info.json").read_bytes()).hexdigest()


def register_sft_run(run_dir: Path, config: dict[str, Any]) -> None:
    """Record a finished ``sft`` run of a tiny model under its cache key, so that RL runs with the same
    settings reuse its team (``sft-runs/<key>.json`` in the cache, written atomically)."""
    if config.get("model") not in TINY_MODELS:
        return
    if Path(run_dir).resolve().is_relative_to(default_cache_dir().resolve()):
        return  # the cache's own build of a team (renamed into place, found by its key): nothing to record
    index = default_cache_dir() / "sft-runs"
    with writing(index, "the index of SFT runs"):
        index.mkdir(parents=True, exist_ok=True)
    entry = index / f"{sft_cache_key(config)}.json"
    write_json_atomic(entry, {"run": str(Path(run_dir).resolve())}, "the SFT run's entry in the cache index")
