"""The RL plugin SDK: the pieces every RL trainer (``grpo``, ``joyagents_grpo``, ``mappo``, plugins) shares,
as plain functions and small dataclasses. ``from joy_trainers import rl`` and use ``rl.X``.

=====================================  ===================================================================
module                                 names
=====================================  ===================================================================
:mod:`~joy_trainers.rl.trainer`        ``RLTrainer``: the skeleton (``train()``, hooks); a trainer writes
                                       its ``step``
:mod:`~joy_trainers.rl.config`         ``RLConfig``: the shared options
:mod:`~joy_trainers.rl.groups`         ``Group``, ``Scoring``, ``select_top_k``, ``select_global``,
                                       ``advantages_of``, ``outcome_of``
:mod:`~joy_trainers.rl.update`         ``policy_update``, ``update_config``, ``UpdateConfig``,
                                       ``make_optimizers``, ``ReferencePolicy``
:mod:`~joy_trainers.rl.step`           what a step does with the run state: ``trajectory_groups``,
                                       ``draw_groups`` (dynamic sampling), ``update_selected``,
                                       ``update_roles``, ``evolve_memory``, ``metrics_row``
:mod:`~joy_trainers.distributed`       ``world``, ``shard``, ``all_reduce_sum``, ``all_gather_objects``,
                                       ``barrier`` (and ``is_main``, ``say``, ``on_main``: what one
                                       process does)
:mod:`~joy_trainers.rl.checkpoints`    ``save_checkpoint``, ``latest_checkpoint``, ``load_checkpoint``,
                                       ``read_checkpoint``, ``checkpoint``, ``CheckpointError``;
                                       ``save_tensors`` / ``load_tensors`` (tensor files that load
                                       without unpickling code)
:mod:`~joy_trainers.rl.metrics`        ``StepOutput``, ``MetricsLog``, ``Timer``,
                                       ``plot_rewards``
:mod:`~joy_trainers.rl.loop`           ``check_inputs``, ``start_config``, ``prepare``,
                                       ``resume_or_evaluate``, ``run_steps``, ``evaluate``,
                                       ``finish``, ``write_outputs``
:mod:`~joy_trainers.rl.state`          ``RunState``: the run's team, engine, settings, optimisers, log
:mod:`~joy_trainers.rl.start`          ``sft_team``, ``tiny_sft_values``, ``tiny_sft_dir``: the team a run
                                       starts from (``bring_team``: its copy in the run directory;
                                       ``auto_sft_overrides``: what the automatic SFT run takes from it)
:mod:`~joy_trainers.resume_config`     ``check_resume_config``, ``write_config``: the options ``--resume``
                                       may change (``RLConfig.RESUME_SAFE``)
=====================================  ===================================================================

``RunDir`` (:mod:`joy_trainers.rundir`) is re-exported here too. The pure loss math lives in
:mod:`joy_trainers.losses`. A complete plugin built on these: ``examples/custom_trainer/joy_reinforce.py``.
"""

from __future__ import annotations

from joy_trainers.distributed import all_gather_objects, all_reduce_sum, barrier, shard, world
from joy_trainers.rl.checkpoints import (
    CheckpointError,
    checkpoint,
    latest_checkpoint,
    load_checkpoint,
    load_tensors,
    read_checkpoint,
    save_checkpoint,
    save_tensors,
)
from joy_trainers.rl.config import RLConfig
from joy_trainers.rl.groups import (
    Group,
    Scoring,
    advantages_of,
    outcome_of,
    select_global,
    select_top_k,
)
from joy_trainers.rl.loop import (
    check_inputs,
    evaluate,
    finish,
    prepare,
    resume_or_evaluate,
    run_steps,
    start_config,
    write_outputs,
)
from joy_trainers.rl.metrics import MetricsLog, StepOutput, Timer, plot_rewards
from joy_trainers.rl.start import sft_team, tiny_sft_dir, tiny_sft_values
from joy_trainers.rl.state import RunState
from joy_trainers.rl.step import (
    Drawn,
    draw_groups,
    evolve_memory,
    metrics_row,
    trajectory_groups,
    update_roles,
    update_selected,
)
from joy_trainers.rl.trainer import RLTrainer
from joy_trainers.rl.update import ReferencePolicy, UpdateConfig, make_optimizers, policy_update, update_config
from joy_trainers.rundir import RunDir

__all__ = [
    "CheckpointError",
    "Drawn",
    "Group",
    "MetricsLog",
    "RLConfig",
    "RLTrainer",
    "ReferencePolicy",
    "RunDir",
    "RunState",
    "Scoring",
    "StepOutput",
    "Timer",
    "UpdateConfig",
    "advantages_of",
    "all_gather_objects",
    "all_reduce_sum",
    "barrier",
    "check_inputs",
    "checkpoint",
    "draw_groups",
    "evaluate",
    "evolve_memory",
    "finish",
    "latest_checkpoint",
    "load_checkpoint",
    "load_tensors",
    "make_optimizers",
    "metrics_row",
    "outcome_of",
    "plot_rewards",
    "policy_update",
    "prepare",
    "read_checkpoint",
    "resume_or_evaluate",
    "run_steps",
    "save_checkpoint",
    "save_tensors",
    "select_global",
    "select_top_k",
    "sft_team",
    "shard",
    "start_config",
    "tiny_sft_dir",
    "tiny_sft_values",
    "trajectory_groups",
    "update_config",
    "update_roles",
    "update_selected",
    "world",
    "write_outputs",
]
