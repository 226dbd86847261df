"""``reinforce``: REINFORCE with a running-mean baseline, as a JoyAgents trainer plugin.

Install with ``pip install -e examples/custom_trainer`` and run ``joy-train --trainer reinforce --preset tiny``.
Built on the RL SDK (:mod:`joy_trainers.rl`): ``rl.RLTrainer`` runs setup, checkpoints (``--resume``),
metrics, evaluation and results; this module adds its Config and its ``step``. The update is the shared
``rl.update_roles`` (on-policy, so its clipped ratio is 1 and the gradient is REINFORCE's).

One step: each task of the batch is played ``group_size`` times with every role sampling; the advantage of
a trajectory is its team reward minus a running mean of past rewards; every node of the trajectory gets
that advantage; every role that acted is updated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from joy_trainers import rl
from joy_trainers.presets import TINY_MAX_PROMPT_TOKENS


@dataclass
class ReinforceConfig(rl.RLConfig):
    """The shared RL options plus the baseline's smoothing (one line per field)."""

    baseline_momentum: float = 0.9
    """The baseline is updated as b <- m * b + (1 - m) * mean reward of the step."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.baseline_momentum < 1.0:
            raise ValueError(f"baseline_momentum must be in [0, 1), got {self.baseline_momentum!r}")


class ReinforceTrainer(rl.RLTrainer):
    """REINFORCE with a baseline over whole trajectories of the team."""

    name = "reinforce"
    config_class = ReinforceConfig
    presets: dict[str, dict[str, Any]] = {
        "tiny": {
            "model": "tiny",
            "iterations": 1,
            "steps_per_iteration": 8,
            "tasks_per_step": 4,
            "group_size": 2,
            "lr": 1e-3,
            "beta": 0.0,
            "max_new_tokens": 96,
            "max_cycles": 10,
            "max_prompt_tokens": TINY_MAX_PROMPT_TOKENS,
            "eval_tasks": 50,
        }
    }
    refresh_reference = False  # no KL term

    def step(self, state: rl.RunState, step: int, tasks: list[int], timer: rl.Timer) -> rl.StepOutput:
        cfg = self.config
        with timer("rollout"):
            groups, trajectories, _ = rl.trajectory_groups(state, tasks, cfg.group_size, cfg.temperature, cfg.top_p)
        rewards = [r for g in groups for r in g.rewards]
        step_mean = sum(rewards) / len(rewards) if rewards else 0.0
        kept = state.trainer_state.get("baseline")  # checkpointed with the run: --resume continues it
        baseline = step_mean if kept is None else kept
        with timer("update"):
            per_role: dict[str, list[tuple[Any, float]]] = {}
            for g in groups:
                for nodes, reward in zip(g.members, g.rewards, strict=True):
                    for node in nodes:
                        per_role.setdefault(node.role, []).append((node, reward - baseline))
            stats = rl.update_roles(state, per_role, rl.update_config(cfg, beta=0.0))
        m = cfg.baseline_momentum
        state.trainer_state["baseline"] = step_mean if kept is None else m * kept + (1 - m) * step_mean
        return rl.StepOutput(
            trajectories=trajectories,
            groups=groups,
            selected=groups,
            update_stats=stats,
            timer=timer,
            metrics={"charts/baseline": baseline},
        )
