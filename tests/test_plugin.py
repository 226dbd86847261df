"""The trainer plugin API: entry-point discovery, the Protocol, and the installable example plugin."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from joy_trainers import TRAINERS, available_trainers
from joy_trainers.base import BaseTrainer
from joy_trainers.cli import load_trainer
from joy_trainers.errors import UsageError
from joy_trainers.run_config import RunConfig

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLUGIN = os.path.join(REPO, "examples", "custom_trainer")


def test_built_in_trainers_are_base_trainers_with_a_run_config():
    for name in TRAINERS:
        cls = load_trainer(name)
        assert issubclass(cls, BaseTrainer) and cls.name == name and isinstance(cls.presets, dict)
        assert issubclass(cls.config_class, RunConfig)
    assert set(TRAINERS) <= set(available_trainers())


def test_unknown_trainer_is_an_error_listing_the_installed_ones():
    with pytest.raises(UsageError, match="unknown trainer 'ppo3'; installed trainers: .*joyagents_grpo"):
        load_trainer("ppo3")


def _pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)


def test_example_plugin_installs_and_runs_two_steps_through_joy_train(sft_run, tmp_path):
    done = _pip("install", "--quiet", "--no-deps", "--no-build-isolation", "-e", PLUGIN)
    if done.returncode != 0:  # no setuptools in this environment: let pip fetch the build backend
        done = _pip("install", "--quiet", "--no-deps", "-e", PLUGIN)
    assert done.returncode == 0, done.stderr[-2000:]
    try:
        out = tmp_path / "run"
        sets = {
            "sft_run": sft_run,
            "iterations": 1,
            "steps_per_iteration": 2,
            "tasks_per_step": 2,
            "group_size": 2,
            "max_new_tokens": 12,
            "max_cycles": 3,
            "max_prompt_tokens": 256,
            "eval_tasks": 0,
        }
        cmd = [sys.executable, "-m", "joy_trainers.cli", "--trainer", "reinforce", "--output-dir", str(out)]
        for k, v in sets.items():
            cmd += ["--set", f"{k}={json.dumps(v)}"]
        run = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": REPO})
        assert run.returncode == 0, run.stderr[-3000:]
        results = json.loads((out / "results.json").read_text())
        assert results["trainer"] == "reinforce" and results["steps"] == 2
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == [1, 2] and all("charts/baseline" in r for r in rows)
        # the running baseline lives in the checkpoint: a resumed run continues it instead of restarting
        m = 0.9  # baseline_momentum's default
        expected = m * rows[0]["charts/reward_mean"] + (1 - m) * rows[1]["charts/reward_mean"]
        assert rows[0]["charts/baseline"] == rows[0]["charts/reward_mean"]
        resume = list(cmd)
        resume[resume.index("steps_per_iteration=2")] = "steps_per_iteration=3"
        again = subprocess.run(
            [*resume, "--resume"], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": REPO}
        )
        assert again.returncode == 0, again.stderr[-3000:]
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == [1, 2, 3]
        assert rows[2]["charts/baseline"] == pytest.approx(expected, abs=1e-9)
        listing = subprocess.run(
            [sys.executable, "-c", "from joy_trainers import available_trainers as a; print(sorted(a()))"],
            capture_output=True,
            text=True,
        )
        assert "reinforce" in listing.stdout
    finally:
        _pip("uninstall", "--quiet", "-y", "joy-reinforce")
