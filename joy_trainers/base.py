"""``BaseTrainer``: what every trainer shares, supervised or RL. It owns the run directory (claimed once, by
the main process, with its lock held until ``train()`` returns), the process's rank, the evaluation under the
run's generation settings and the ``results.json`` block every run writes. A trainer subclasses it (or
:class:`~joy_trainers.rl.RLTrainer`, which does) and writes :meth:`run_training`:

    class MyTrainer(BaseTrainer):
        name, config_class, presets = "mine", MyConfig, {}   # MyConfig extends RunConfig

        def run_training(self) -> dict[str, Any]:
            self.claim_run_dir()
            team = ...                                          # train
            team.save(str(self.run.path / "team"))
            results = self.results(steps=n, metrics=self.evaluate(team, seed=self.config.seed))
            write_results(self.run.path, results)
            return results
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch

from joy_trainers.errors import UsageError
from joy_trainers.evaluation import evaluate_config
from joy_trainers.run_config import RunConfig
from joy_trainers.rundir import RunDir, run_results


def process_rank() -> int:
    """This process's rank: the torch.distributed group's once it exists, else ``RANK`` of ``accelerate
    launch`` (0 in a single process)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    return int(os.environ.get("RANK", "0"))


class BaseTrainer:
    """The skeleton every trainer shares (see the module documentation)."""

    name: str = ""
    """The trainer's name (``joy-train --trainer NAME``)."""
    config_class: type = RunConfig
    """Its Config dataclass (extends :class:`~joy_trainers.run_config.RunConfig`)."""
    presets: dict[str, dict[str, Any]] = {}
    """Named sets of config values (``joy-train --preset NAME``)."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self._started = time.perf_counter()
        self.run = RunDir(config.output_dir, self.name)
        """The run directory (``output_dir``, default ``runs/<name>-<timestamp>``)."""

    def train(self) -> dict[str, Any]:
        """:meth:`run_training`, releasing the run directory's lock when it ends; returns ``results.json``'s
        contents (an empty dict on processes other than the main one)."""
        self._started = time.perf_counter()
        try:
            return self.run_training()
        except UsageError:  # refused: the directory as it was found (a run that did work keeps it all)
            self.run.undo_claim()
            raise
        finally:
            self.run.release()

    def run_training(self) -> dict[str, Any]:
        """The trainer's work: claim the run directory, train, evaluate and write the results."""
        raise NotImplementedError(f"{type(self).__name__} must define run_training()")

    def claim_run_dir(self, resume: bool = False) -> None:
        """Claim the run directory on the main process (a new run into an occupied directory stops, unless
        ``resume`` or the config's ``overwrite``), saying what ``--overwrite`` removed."""
        if process_rank() != 0:
            return
        self.run.claim_and_report(self.name, resume=resume, overwrite=self.config.overwrite)

    def evaluate(
        self, team: Any, *, seed: int, tasks: int | None = None, memory: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Greedy metrics of ``team`` on the first ``tasks`` (default ``eval_tasks``) tasks of ``eval_split``
        under the run's generation limits and ``rollout_engine``; ``seed`` is the env's data seed."""
        return evaluate_config(team, self.config, seed=seed, tasks=tasks, memory=memory)

    def results(self, **fields: Any) -> dict[str, Any]:
        """The ``results.json`` block of the run (:func:`~joy_trainers.rundir.run_results`): the trainer, env,
        split and seed, then ``fields`` (``steps``, ``metrics``, ...; ``model`` defaults to the config's and
        ``wall_s`` to the seconds since :meth:`train` began), then the config."""
        fields.setdefault("model", self.config.model)
        fields.setdefault("wall_s", time.perf_counter() - self._started)
        return run_results(self.name, self.config, **fields)
