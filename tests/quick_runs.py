"""What the run-directory tests share: an RL trainer without rollouts (the loop, checkpoints and metrics of a
real run in seconds), its options, and the steps a run logged; and the loader of a script by its path."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

from joy_trainers import rl

SMALL_RL = {
    "iterations": 1,
    "steps_per_iteration": 2,
    "tasks_per_step": 2,
    "group_size": 2,
    "max_nodes": 2,
    "max_new_tokens": 12,
    "max_cycles": 3,
    "max_prompt_tokens": 256,
    "lr": 1e-2,
    "eval_tasks": 0,
    "checkpoint_every": 1,
}
"""The options of a short RL run of two steps on the tiny team (RL trainers' tests)."""

TWO_PROCESSES = [
    "accelerate",
    "launch",
    "--multi_gpu",
    "--num_processes",
    "2",
    "--num_machines",
    "1",
    "--mixed_precision",
    "no",
    "--dynamo_backend",
    "no",
]
"""``accelerate launch`` of two processes; with no visible GPU (``CUDA_VISIBLE_DEVICES=""``) they are real gloo
CPU processes (``--cpu`` alone starts one process)."""


class Crash(RuntimeError):
    pass


class QuickTrainer(rl.RLTrainer):
    """An RL trainer whose steps do no rollouts; it raises :class:`Crash` at step ``crash_at`` and calls
    ``on_step(step)`` before each other step."""

    name = "quick"

    def __init__(self, config: Any, crash_at: int | None = None, on_step: Any = None) -> None:
        super().__init__(config)
        self.crash_at, self.on_step = crash_at, on_step

    def step(self, state, step, tasks, timer):
        if step == self.crash_at:
            raise Crash(f"crash at step {step + 1}")
        if self.on_step is not None:
            self.on_step(step)
        state.trainer_state["last"] = step + 1
        return rl.StepOutput(timer=timer, metrics={"charts/marker": step + 1})


def quick_values(sft_run: str, out: Any, **kw: Any) -> dict[str, Any]:
    """Options of a six-step run from ``sft_run`` into ``out`` (a checkpoint every 2 steps), with ``kw`` on top."""
    values = dict(
        sft_run=sft_run,
        output_dir=str(out),
        iterations=1,
        steps_per_iteration=6,
        tasks_per_step=1,
        group_size=2,
        max_new_tokens=8,
        max_cycles=2,
        max_prompt_tokens=128,
        eval_tasks=0,
        checkpoint_every=2,
        beta=0.04,
    )
    return {**values, **kw}


def logged_steps(out: Path) -> list[int]:
    """The steps of ``out/metrics.jsonl``, in order."""
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["step"] for line in lines if line.strip()]


def load_script(path: Path) -> ModuleType:
    """The Python script at ``path`` (a benchmark or an example, not a package module) as a module."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
