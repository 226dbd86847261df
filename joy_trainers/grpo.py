"""``grpo``: the plain multi-agent GRPO baseline. G whole trajectories per task, one group per task,
every acting role updated.

One training step, top to bottom (:meth:`GRPOTrainer.step`):

1. **Joint sampling.** For each task of the batch, the team plays G whole episodes with every role sampling
   at ``temperature``; the G final team rewards form the task's group.
   With ``groups_per_step``, more batches of tasks until that many groups are not flat (dynamic sampling).
2. **Update.** Advantages ``r - mean`` per group, scaled by ``scale_rewards``, from the ``advantage_reward``
   terms; every node of a trajectory carries its trajectory's advantage; every role that acted in a group that
   is not flat (``min_reward_spread``) is updated, one optimiser step over all such groups, with the same
   clipped-ratio loss, KL and token aggregation as ``joyagents_grpo`` (:mod:`joy_trainers.losses`).

No node-wise branching, no top-K selection, no memory: the comparison point for ``joyagents_grpo``.
Options, checkpoints (``--resume``), metrics, evaluation and the run directory are those of
:class:`joy_trainers.rl.RLConfig` and :mod:`joy_trainers.rl` (``docs/trainers/grpo.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from joy_trainers import rl
from joy_trainers.presets import SMOL_RL, TINY_MAX_PROMPT_TOKENS


@dataclass
class GRPOConfig(rl.RLConfig):
    """Configuration of ``grpo``: exactly the shared RL options (:class:`joy_trainers.rl.RLConfig`)."""


PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {
        "model": "tiny-base",
        "iterations": 2,
        "steps_per_iteration": 6,
        "tasks_per_step": 6,
        "temperature": 1.0,
        "lr": 2e-3,
        "beta": 0.04,
        "max_new_tokens": 96,
        "max_cycles": 10,
        "max_prompt_tokens": TINY_MAX_PROMPT_TOKENS,
        "eval_tasks": 300,
        "checkpoint_every": 3,
    }
}
PRESETS["smol"] = dict(SMOL_RL)  # SmolLM2-135M-Instruct (joy_trainers.presets.SMOL_RL)


class GRPOTrainer(rl.RLTrainer):
    """Runs ``grpo`` (see the module documentation)."""

    name = "grpo"
    config_class = GRPOConfig
    presets = PRESETS

    def step(self, state: rl.RunState, step: int, tasks: list[int], timer: rl.Timer) -> rl.StepOutput:
        cfg = self.config
        with timer("rollout"):  # more batches of tasks with groups_per_step (dynamic sampling)
            drawn = rl.draw_groups(state, tasks, lambda batch: self.sample_groups(state, batch))
        with timer("scoring"):
            selected = rl.select_global(drawn.groups, "all", rl.Scoring.of(cfg))
        with timer("update"):
            stats = rl.update_selected(state, selected, cfg)
        return rl.StepOutput(
            trajectories=drawn.trajectories,
            groups=drawn.groups,
            selected=selected,
            update_stats=stats,
            timer=timer,
            metrics={"sampling/draws": drawn.draws},
        )

    def sample_groups(self, state: rl.RunState, tasks: list[int]) -> tuple[list[rl.Group], list[Any], list[Any]]:
        """G whole trajectories per task of one batch, every role sampling at ``temperature``: a group per task."""
        cfg = self.config
        return rl.trajectory_groups(state, tasks, cfg.group_size, cfg.temperature, cfg.top_p)
