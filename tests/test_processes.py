"""Every trainer under ``accelerate launch`` with two processes (real gloo CPU processes: ``--multi_gpu`` with no
visible GPU): one writer of the run directory, each line printed once, the evaluation split across the processes
with the metrics of one process, and ``--resume``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from quick_runs import TWO_PROCESSES

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.skipif(shutil.which("accelerate") is None, reason="accelerate launcher not on PATH")

LAUNCH = [*TWO_PROCESSES, "-m", "joy_trainers.cli"]

RL_SETS = {
    "iterations": 1,
    "steps_per_iteration": 2,
    "tasks_per_step": 2,
    "group_size": 2,
    "max_new_tokens": 12,
    "max_cycles": 3,
    "max_prompt_tokens": 256,
    "eval_tasks": 3,
    "checkpoint_every": 1,
}


def launch(trainer: str, out: Path, sets: dict, *extra: str, processes: int = 2) -> subprocess.CompletedProcess:
    """``joy-train --trainer trainer`` into ``out`` under ``accelerate launch`` with ``processes`` processes (or
    plainly, with one)."""
    cmd = [*LAUNCH] if processes == 2 else [sys.executable, "-m", "joy_trainers.cli"]
    cmd += ["--trainer", trainer, "--output-dir", str(out), *extra]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={json.dumps(v)}"]
    env = {**os.environ, "PYTHONPATH": REPO, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


def without_timing(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if k not in ("eval_wall_s", "tasks_per_process")}


def assert_one_writer(done: subprocess.CompletedProcess, out: Path, eval_tasks: int) -> dict:
    """What every trainer shows under two processes: one results.json saying so, one team, each line of the main
    process once, and both evaluations split between the processes. Returns the results."""
    results = json.loads((out / "results.json").read_text())
    assert results["processes"] == 2
    assert (out / "team" / "team.json").is_file()
    assert done.stdout.count("run directory:") == 1
    split = [len(range(r, eval_tasks, 2)) for r in range(2)]
    for key in ("metrics", "baseline_metrics"):
        assert results[key]["tasks_per_process"] == split, key
        assert results[key]["episodes"] == eval_tasks
    assert not list(out.glob(".joy-tmp-*"))
    return results


def test_sft_under_two_processes_writes_once_and_splits_the_evaluation(tiny_dir, tmp_path):
    from joy_agents.policy import TeamConfig, TeamPolicy
    from joy_trainers.evaluation import evaluate_team
    from joy_trainers.sft import SFTConfig

    out = tmp_path / "sft"
    sets = {
        "model": str(tiny_dir),
        "sft_tasks": 6,
        "eval_tasks": 3,
        "adapter_epochs": 0.5,
        "lora_r": 2,
        "lora_alpha": 4,
        "max_new_tokens": 12,
        "eval_max_cycles": 3,
        "max_length": 384,
    }
    done = launch("sft", out, sets)
    results = assert_one_writer(done, out, 3)
    stages = [r["stage"] for r in rows(out)]
    logs = json.loads((out / "logs.json").read_text())
    assert len(stages) == sum(len(v) for v in logs.values())  # one row per log of each stage, from one process
    assert sorted(set(stages)) == sorted(logs)
    for role in logs:
        assert done.stdout.count(f"[sft] stage 2: {role} adapter") == 1
    assert done.stdout.count("[sft] examples per role") == 1
    # the starting team (fresh adapters on the base) played in this process gives the split evaluation's metrics
    team = TeamPolicy(TeamConfig(model=str(tiny_dir), roles=tuple(logs), lora_r=2, lora_alpha=4))
    settings = SFTConfig.from_dict(sets).generation_settings()
    alone = evaluate_team(team, "joy/mixed-v0", "test", 3, seed=0, settings=settings)
    assert without_timing(results["baseline_metrics"]) == without_timing(alone)


def test_grpo_under_two_processes_writes_once_and_resumes(sft_run, tmp_path):
    out = tmp_path / "grpo"
    done = launch("grpo", out, {**RL_SETS, "sft_run": sft_run})
    results = assert_one_writer(done, out, 3)
    assert [r["step"] for r in rows(out)] == [1, 2]
    assert results["steps"] == 2
    done = launch("grpo", out, {**RL_SETS, "sft_run": sft_run, "steps_per_iteration": 3}, "--resume")
    assert done.stdout.count("run directory:") == 1
    assert done.stderr.count("resumed from") + done.stdout.count("resumed from") == 1
    assert [r["step"] for r in rows(out)] == [1, 2, 3]
    assert json.loads((out / "results.json").read_text())["steps"] == 3


@pytest.mark.parametrize("trainer", ["joyagents_grpo", "mappo"])
def test_rl_trainers_under_two_processes_write_once(trainer, sft_run, tmp_path):
    out = tmp_path / trainer
    extra = {"max_nodes": 2} if trainer == "joyagents_grpo" else {}
    done = launch(trainer, out, {**RL_SETS, **extra, "sft_run": sft_run})
    assert_one_writer(done, out, 3)
    assert [r["step"] for r in rows(out)] == [1, 2]
