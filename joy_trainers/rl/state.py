"""``RunState``: everything an RL training loop carries from step to step."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from joy_agents.policy import SamplingConfig
from joy_trainers.distributed import world
from joy_trainers.rl.config import RLConfig
from joy_trainers.rl.metrics import MetricsLog
from joy_trainers.rl.update import ReferencePolicy


@dataclass
class RunState:
    """Everything a training loop carries from step to step."""

    config: RLConfig
    team: Any
    optimizers: dict[str, torch.optim.Optimizer]
    banks: dict[str, Any]
    engine: Any
    log: MetricsLog | None
    rl_tasks: list[int]
    accelerator: Any
    frozen: frozenset[str] = frozenset()
    """Roles never updated (:meth:`~joy_trainers.run_config.RunConfig.frozen_roles`: the customer the team plays,
    unless ``train_customer``): :func:`~joy_trainers.rl.update_roles` skips them, they get no memory bank and no
    reference copy, and node-wise sampling never branches at their turns. Derived from the options, so every
    process skips the same roles."""
    step: int = 0
    reference: ReferencePolicy | None = None
    baseline: dict[str, Any] | None = None
    tokens_total: int = 0
    trainer_state: dict[str, Any] = field(default_factory=dict)
    """JSON-able values a trainer carries from step to step (e.g. a running baseline): saved in every
    checkpoint and restored by ``--resume``."""
    save_extra: Callable[[Path], None] | None = None
    """Writes a trainer's own files into each checkpoint before it is published (see ``RLTrainer``)."""
    micro_batch_size: int | None = None
    """The update's micro-batch size once halved after running out of memory (None: the config's)."""
    wall_before: float = 0.0
    started: float = field(default_factory=time.perf_counter)
    bar: Any = None

    @property
    def is_main(self) -> bool:
        return world()[0] == 0

    @property
    def trained_roles(self) -> tuple[str, ...]:
        """The team's roles that training updates (all but :attr:`frozen`), in the team's order."""
        return tuple(r for r in self.team.roles if r not in self.frozen)

    def batch_tasks(self, step: int, n: int) -> list[int]:
        """The ``n`` RL tasks of ``step`` (the shuffled RL split, cycled; the same on every process)."""
        return [self.rl_tasks[(step * n + i) % len(self.rl_tasks)] for i in range(n)]

    def sampling(self, temperature: float) -> SamplingConfig:
        """Sampling of whole turns at ``temperature`` (0: greedy) with the run's token cap."""
        return self.engine.config.generation.sampling(temperature)

    def progress(self, row: dict[str, Any]) -> None:
        """Advance the progress bar by one step's row (its reward shown with it); the last step closes the bar,
        which draws its final line once."""
        if self.bar is None:
            return
        # with a token budget the bar counts generated tokens (the steps needed are not known ahead)
        n = row["charts/tokens_generated"] if self.config.token_budget else 1
        self.bar.set_postfix(reward=f"{row['charts/reward_mean']:.3f}", selected=row["groups/selected"], refresh=False)
        if self.bar.n + n >= self.bar.total:
            self.bar.n += n
            self.bar.close()
        else:
            self.bar.update(n)

    @property
    def wall(self) -> float:
        return self.wall_before + time.perf_counter() - self.started
