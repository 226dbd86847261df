"""``RLTrainer``: the skeleton every RL trainer shares, so that a trainer module holds its Config, its
presets and its ``step`` and little else.

    class MyTrainer(rl.RLTrainer):
        name = "mine"
        config_class = MyConfig          # a dataclass extending rl.RLConfig
        presets = {"tiny": {...}}

        def step(self, state, step, tasks, timer) -> rl.StepOutput:
            with timer("rollout"):
                groups, trajectories, _ = rl.trajectory_groups(state, tasks, ...)
            with timer("update"):
                stats = rl.update_selected(state, groups, self.config)
            return rl.StepOutput(trajectories=trajectories, groups=groups, selected=groups,
                                 update_stats=stats, timer=timer)

``train()`` is :class:`~joy_trainers.base.BaseTrainer`'s (claim, train, evaluate, results, on one or several
processes); the RL part of it, :meth:`RLTrainer.run_training`, reads top to bottom: :meth:`start_state`, which is
:func:`~joy_trainers.rl.prepare` (team, optimisers, engine, log), :meth:`init_state` (the trainer's own objects,
e.g. a critic),
:func:`~joy_trainers.rl.resume_or_evaluate` (a checkpoint with ``resume``, then :meth:`load_extra`; else the
baseline evaluation); then :func:`~joy_trainers.rl.run_steps` (one :meth:`run_step` per step; checkpoints call
:meth:`save_extra`, which the loop is given) and :func:`~joy_trainers.rl.finish`.

The optional hooks, each a plain public method with a documented default:

- :meth:`memory_config`: a :class:`~joy_agents.memory.MemoryConfig` to give every role a memory bank;
- :meth:`init_state`: build the trainer's own objects once the team is loaded;
- :meth:`save_extra` / :meth:`load_extra`: write / read the trainer's own files in a checkpoint (JSON-able
  values belong in ``state.trainer_state``, which is checkpointed already);
- ``refresh_reference`` (class attribute, default True): copy the weights into the KL reference policy at
  the start of every RL iteration (when ``beta > 0``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from joy_agents.memory import MemoryConfig
from joy_trainers.base import BaseTrainer, Trained
from joy_trainers.distributed import shard
from joy_trainers.rl.config import RLConfig
from joy_trainers.rl.loop import (
    check_inputs,
    finish,
    prepare,
    resume_or_evaluate,
    run_steps,
    start_config,
    write_outputs,
)
from joy_trainers.rl.metrics import StepOutput, Timer
from joy_trainers.rl.state import RunState
from joy_trainers.rl.step import metrics_row


class RLTrainer(BaseTrainer):
    """The shared skeleton of an RL trainer (see the module documentation); subclasses write :meth:`step`.
    The run directory and ``train()`` are :class:`~joy_trainers.base.BaseTrainer`'s."""

    config_class: type = RLConfig
    """Its Config dataclass (extends :class:`~joy_trainers.rl.RLConfig`)."""
    refresh_reference: bool = True
    """Copy the current weights into the KL reference policy at the start of every RL iteration."""
    config: RLConfig
    state: RunState
    """The run's state, once :meth:`run_training` has prepared it."""

    def check(self) -> None:
        """The env's options and the SFT run to start from (:func:`~joy_trainers.rl.check_inputs`)."""
        check_inputs(self.run, self.config)

    def claimed(self) -> None:
        """``--resume``'s checks of changed options and ``config.json`` (:func:`~joy_trainers.rl.start_config`)."""
        start_config(self.run, self.config)

    def data_seed(self) -> int:
        """The env's data seed (``data_seed``)."""
        return int(self.config.data_seed)

    def run_training(self) -> Trained:
        """Every step, from the starting team or the newest checkpoint; returns the trained team."""
        state = self.start_state()
        run_steps(self.run, state, self.run_step, refresh_reference=self.refresh_reference, save_extra=self.save_extra)
        return finish(state)

    def start_state(self) -> RunState:
        """In the claimed run directory (:meth:`~joy_trainers.base.BaseTrainer.claim_run_dir`): the run's state
        ready for its first remaining step (:func:`~joy_trainers.rl.prepare`, :meth:`init_state`,
        :func:`~joy_trainers.rl.resume_or_evaluate`), also kept as :attr:`state`. A script that drives the steps
        itself calls ``claim_run_dir()``, then this, then :meth:`run_step` per step."""
        state = self.state = prepare(self.run, self.config, self.memory_config())
        self.init_state(state)
        resume_or_evaluate(self.run, state, load_extra=self.load_extra)
        return state

    def write_outputs(self, trained: Trained, results: dict[str, Any]) -> None:
        """The memory banks and ``reward_curve.png`` (:func:`~joy_trainers.rl.write_outputs`)."""
        write_outputs(self.run, self.state, results)

    def run_step(self, state: RunState, step: int) -> dict[str, Any]:
        """One step: this process's share of the step's first batch of tasks, :meth:`step`, and its metrics row."""
        tasks = shard(state.draw_tasks(self.config.tasks_per_step))
        timer = Timer()
        out = self.step(state, step, tasks, timer)
        if out.timer is None:
            out.timer = timer
        return metrics_row(state, step, out)

    def step(self, state: RunState, step: int, tasks: list[int], timer: Timer) -> StepOutput:
        """One training step on ``tasks`` (this process's share of the step's tasks); time its phases with
        ``with timer("rollout"): ...``. Every process calls it for every step."""
        raise NotImplementedError(f"{type(self).__name__} must define step(state, step, tasks, timer)")

    # ------------------------------------------------------------------------------------------- hooks
    def memory_config(self) -> MemoryConfig | None:
        """Memory banks of the roles (None: no memory)."""
        return None

    def init_state(self, state: RunState) -> None:
        """Build the trainer's own objects once the team is loaded, before a checkpoint is resumed."""

    def save_extra(self, directory: Path) -> None:
        """Write the trainer's own files into a checkpoint being written (before it is published)."""

    def load_extra(self, directory: Path) -> None:
        """Read them back from the checkpoint ``--resume`` continues from."""
