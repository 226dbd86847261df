"""Runs that survive what real machines do: the same options and seed give the same run whatever ran before it
in the process, refused runs leave their directory as they found it, corrupt files and full disks are one line,
and nothing a run wrote is lost or left half-written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from joy_trainers.errors import UsageError
from joy_trainers.grpo import GRPOConfig, GRPOTrainer


def _rewards(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if not k.startswith("time/") and "per_s" not in k} for r in rows]


# ------------------------------------------------------------------------------------ same seed, same run
def _auto_sft_grpo(out: Path) -> GRPOConfig:
    """A two-step GRPO run from the automatic SFT team (a small one: one adapter epoch on two tasks)."""
    overrides = {"sft_tasks": 2, "base_epochs": 0.0, "adapter_epochs": 1.0, "role_adapter_epochs": {}}
    return GRPOConfig.from_dict(
        dict(
            model="tiny-base",
            sft_overrides=overrides,
            env_id="joy/math-v0",
            output_dir=str(out),
            iterations=1,
            steps_per_iteration=2,
            tasks_per_step=2,
            group_size=2,
            max_new_tokens=32,
            max_cycles=2,
            max_prompt_tokens=256,
            temperature=2.0,
            eval_tasks=0,
        )
    )


def test_an_rl_run_is_the_same_whether_its_sft_team_was_trained_in_process_or_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("JOY_CACHE_DIR", str(tmp_path / "cache"))  # empty: the SFT team is built in this process
    GRPOTrainer(_auto_sft_grpo(tmp_path / "cold")).train()
    GRPOTrainer(_auto_sft_grpo(tmp_path / "warm")).train()  # the cached team
    cold, warm = _rewards(tmp_path / "cold"), _rewards(tmp_path / "warm")
    assert [r["step"] for r in cold] == [1, 2]
    assert cold == warm


# ------------------------------------------------------------------------------------ refusals leave no debris
def test_a_refused_run_leaves_its_directory_as_it_found_it_and_the_next_run_goes_ahead(sft_run, tmp_path, monkeypatch):
    from quick_runs import QuickTrainer, logged_steps, quick_values

    from joy_trainers.cli import train_main

    out = tmp_path / "run"
    bad = ["--trainer", "grpo", "--output-dir", str(out), "--set", "eval_tasks=0"]
    with pytest.raises(SystemExit) as refused:  # found wrong only once the automatic SFT options are read
        train_main([*bad, "--set", 'sft_overrides={"batch_size": 0}'])
    assert refused.value.code == 2 and not out.exists()
    out.mkdir()
    with pytest.raises(UsageError, match="batch_size=0 is out of range"):
        GRPOTrainer(GRPOConfig.from_dict({"output_dir": str(out), "sft_overrides": {"batch_size": 0}})).train()
    assert out.is_dir() and not list(out.iterdir())  # no .lock, no config.json

    def refuse(*args):  # a refusal after the claim (e.g. a starting team that cannot be used)
        raise UsageError("sft_run: refused")

    monkeypatch.setattr("joy_trainers.rl.loop.sft_team", refuse)
    with pytest.raises(UsageError, match="refused"):
        QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, out))).train()
    assert not list(out.iterdir())
    monkeypatch.undo()
    QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, out))).train()
    assert logged_steps(out) == [1, 2, 3, 4, 5, 6]
