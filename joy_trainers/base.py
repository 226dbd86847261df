"""``BaseTrainer``: the lifecycle every trainer shares, supervised or RL, in one or several processes.

:meth:`BaseTrainer.train` reads top to bottom:

1. join the processes of ``accelerate launch`` (:func:`~joy_trainers.distributed.start_processes`);
2. on the main process, :meth:`~BaseTrainer.check` the inputs, then claim the run directory (its lock held
   until ``train()`` returns) and :meth:`~BaseTrainer.claimed`; a refusal stops every process with the same
   one-line error;
3. :meth:`~BaseTrainer.run_training` on every process: the trainer's own work, which returns a
   :class:`Trained` (the team, the steps, the baseline metrics);
4. the main process saves the team (``team/``); every process evaluates its share of the tasks
   (:meth:`~BaseTrainer.evaluate`);
5. the main process writes ``results.json`` (:meth:`~BaseTrainer.results`) and
   :meth:`~BaseTrainer.write_outputs`.

A trainer subclasses it (or :class:`~joy_trainers.rl.RLTrainer`, which does and writes all of this but a
step) and writes :meth:`run_training`:

    class MyTrainer(BaseTrainer):
        name, config_class, presets = "mine", MyConfig, {}   # MyConfig extends RunConfig

        def run_training(self) -> Trained:
            team = ...                                          # train
            return Trained(team=team, steps=n)

What only one process may do goes through :mod:`joy_trainers.distributed` (``say`` prints once, ``is_main``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from joy_trainers.distributed import is_main, on_main, start_processes, world
from joy_trainers.errors import UsageError
from joy_trainers.evaluation import evaluate_config
from joy_trainers.run_config import RunConfig
from joy_trainers.rundir import RunDir, run_results, save_team, write_results


@dataclass
class Trained:
    """What :meth:`BaseTrainer.run_training` gives back: the trained team and what ``results.json`` says of
    the training."""

    team: Any
    """The trained :class:`~joy_agents.policy.TeamPolicy` (saved as ``team/``, then evaluated)."""
    steps: int
    """Optimiser steps (SFT) or training steps (RL) run."""
    baseline: dict[str, Any] | None = None
    """``baseline_metrics``: the starting team's evaluation, or None."""
    memory: dict[str, Any] | None = None
    """Memory banks (role -> bank) the final evaluation reads, or None."""
    fields: dict[str, Any] = field(default_factory=dict)
    """Further ``results.json`` fields (e.g. ``generated_tokens``, ``examples_per_role``; ``wall_s`` overrides
    the seconds since ``train()`` began)."""


class BaseTrainer:
    """The lifecycle every trainer shares (see the module documentation)."""

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
        """Claim, train, evaluate and write the run (see the module documentation), releasing the run
        directory's lock when it ends; returns ``results.json``'s contents (an empty dict on processes other
        than the main one)."""
        self._started = time.perf_counter()
        start_processes()
        trained = None
        try:
            self.claim_run_dir()
            trained = self.run_training()
            on_main(lambda: save_team(trained.team, self.run.path / "team"))  # a failure: every process's line
            metrics = None
            if self.config.eval_tasks:
                metrics = self.evaluate(trained.team, seed=self.data_seed(), memory=trained.memory)
            results = self.results(
                steps=trained.steps, metrics=metrics, baseline_metrics=trained.baseline, **trained.fields
            )

            def write() -> None:
                write_results(self.run.path, results)
                self.write_outputs(trained, results)

            on_main(write)
            return results if is_main() else {}
        except UsageError:  # refused: the directory as it was found (a run that did work keeps it all)
            self.run.undo_claim()
            raise
        finally:
            from joy_agents.sampling.vllm import close_engine  # imported here: it loads the model classes

            self.run.release()
            state = getattr(self, "state", None)  # an RL run's, also when it stopped midway
            for team in (getattr(state, "team", None), getattr(trained, "team", None)):
                close_engine(team)  # the team's vLLM engine, if the run built one

    def run_training(self) -> Trained:
        """The trainer's work, on every process; returns the trained team and what results.json says of it."""
        raise NotImplementedError(f"{type(self).__name__} must define run_training()")

    # ------------------------------------------------------------------------------------------- hooks
    def check(self) -> None:
        """Check the inputs before the run directory is claimed (main process; raise ``UsageError``)."""

    def claimed(self) -> None:
        """Write what belongs in the run directory from its start (main process, once it is claimed)."""

    def write_outputs(self, trained: Trained, results: dict[str, Any]) -> None:
        """Write the trainer's own files once ``results.json`` is written (main process)."""

    def data_seed(self) -> int:
        """The seed of the env's data, which the evaluation plays (the config's ``seed``)."""
        return int(self.config.seed)

    # ------------------------------------------------------------------------------------------- helpers
    def claim_run_dir(self) -> None:
        """On the main process: :meth:`check`, claim the run directory (a new run into an occupied directory
        stops, unless ``resume`` or the config's ``overwrite``, saying what ``--overwrite`` removed), then
        :meth:`claimed`. Every process learns the directory's path, or stops with the main process's error. The
        processes of ``accelerate launch`` are joined first (:func:`~joy_trainers.distributed.start_processes`)."""
        start_processes()
        resume = bool(getattr(self.config, "resume", False))

        def claim() -> str:
            self.check()
            self.run.claim_and_report(self.name, resume=resume, overwrite=self.config.overwrite)
            try:
                self.claimed()
            except BaseException:
                self.run.undo_claim()
                raise
            return str(self.run.path)

        self.run.path = Path(on_main(claim))

    def evaluate(
        self, team: Any, *, seed: int, tasks: int | None = None, memory: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Greedy metrics of ``team`` on the first ``tasks`` (default ``eval_tasks``) tasks of ``eval_split``
        under the run's generation limits and ``rollout_engine``; ``seed`` is the env's data seed. Every process
        calls it and plays its share of the tasks."""
        return evaluate_config(team, self.config, seed=seed, tasks=tasks, memory=memory)

    def results(self, **fields: Any) -> dict[str, Any]:
        """The ``results.json`` block of the run (:func:`~joy_trainers.rundir.run_results`): the trainer, env,
        split, seed and number of processes, then ``fields`` (``steps``, ``metrics``, ...; ``model`` defaults
        to the config's and ``wall_s`` to the seconds since :meth:`train` began), then the config."""
        fields.setdefault("model", self.config.model)
        fields.setdefault("wall_s", time.perf_counter() - self._started)
        return run_results(self.name, self.config, processes=world()[1], **fields)
