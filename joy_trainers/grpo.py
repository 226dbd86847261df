"""``grpo``: the plain multi-agent GRPO baseline. G whole trajectories per task, one group per task,
every acting role updated.

One training step, top to bottom (:meth:`GRPOTrainer.step`):

1. **Joint sampling.** For each task of the batch, the team plays G whole episodes with every role sampling
   at ``temperature``; the G final team rewards form the task's group.
2. **Update.** Advantages ``(r - mean) / (std + eps)`` per group; every node of a trajectory carries its
   trajectory's advantage; every role that acted in a group with reward variance is updated with the same
   clipped-ratio loss, KL and token aggregation as ``joyagents_grpo`` (:mod:`joy_trainers.losses`).

No node-wise branching, no top-K selection, no memory: the comparison point for ``joyagents_grpo``.
Options, checkpoints (``--resume``), metrics, evaluation and the run directory are those of
:class:`joy_trainers.rl.RLConfig` and :mod:`joy_trainers.rl`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from joy_trainers import rl
from joy_trainers.sft import SMOL_RL, TINY_MAX_PROMPT_TOKENS


@dataclass
class GRPOConfig(rl.RLConfig):
    """Configuration of ``grpo``: exactly the shared RL options (:class:`joy_trainers.rl.RLConfig`)."""


PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {
        "model": "tiny",
        "iterations": 2,
        "steps_per_iteration": 6,
        "tasks_per_step": 6,
        "lr": 2e-3,
        "beta": 0.04,
        "max_new_tokens": 96,
        "max_cycles": 10,
        "max_prompt_tokens": TINY_MAX_PROMPT_TOKENS,
        "eval_tasks": 100,
        "checkpoint_every": 3,
    }
}
PRESETS["smol"] = dict(SMOL_RL)  # SmolLM2-135M-Instruct (joy_trainers.sft.SMOL_RL)


class GRPOTrainer:
    """Runs ``grpo`` (see the module documentation)."""

    name = "grpo"
    config_class = GRPOConfig
    presets = PRESETS

    def __init__(self, config: GRPOConfig) -> None:
        self.config = config
        self.run = rl.RunDir(config.output_dir, self.name)

    def train(self) -> dict[str, Any]:
        cfg = self.config
        state = rl.setup(self.run, cfg, None)
        rl.run_steps(self.run, state, self.step)
        return rl.finish(self.run, state, self.name)

    def step(self, state: rl.RunState, step: int) -> dict[str, Any]:
        """One training step; returns its metrics row."""
        cfg = self.config
        timer = rl.Timer()
        tasks = rl.shard(state.batch_tasks(step, cfg.tasks_per_step))
        with timer("rollout"):
            groups, trajectories, _ = rl.trajectory_groups(state, tasks, cfg.group_size, cfg.temperature, cfg.top_p)
        with timer("scoring"):
            selected = rl.select_global(groups, "all")
        with timer("update"):
            stats = rl.update_selected(state, selected, cfg)
        return rl.step_row(step, cfg, groups, selected, trajectories, [], stats, {}, timer, state)
