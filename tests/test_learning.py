"""Learning runs (``-m slow``, several minutes): training must reach a threshold, not only run."""

from __future__ import annotations

import pytest

from joy_trainers.sft import SFTConfig, SFTTrainer


@pytest.mark.slow
def test_sft_teaches_the_untrained_tiny_model_to_write_well_formed_math_episodes(tiny_dir, tmp_path):
    # the random-init model writes no well-formed turn (format-valid rate 0, reward < 0); 120 optimiser steps
    # on 160 expert episodes of joy/math-v0 must give a team whose test turns are well formed
    config = SFTConfig(
        model=str(tiny_dir),
        env_id="joy/math-v0",
        sft_tasks=160,
        base_epochs=3,
        base_loss="conversation",
        base_lr=3e-3,
        adapter_epochs=0,
        max_length=384,
        batch_size=8,
        eval_tasks=10,
        eval_baseline=False,
        max_new_tokens=64,
        eval_max_cycles=6,
        activation_checkpointing=False,
        output_dir=str(tmp_path / "run"),
    )
    results = SFTTrainer(config).train()
    assert results["metrics"]["format_valid_rate"] >= 0.9
    assert results["metrics"]["mean_reward"] >= 0.1


@pytest.mark.slow
@pytest.mark.xfail(reason="open goal: RL leaves the tiny team's test success unchanged (docs/results.md)")
def test_joyagents_grpo_tiny_preset_raises_test_success_over_its_sft_team(tmp_path):
    # the whole CPU pipeline of the README: the sft tiny preset (cached after its first run), then the
    # joyagents_grpo tiny preset; greedy test success after RL must beat the SFT team's on the same tasks
    from joy_trainers.joyagents_grpo import PRESETS, JoyAgentsGRPOConfig, JoyAgentsGRPOTrainer

    config = JoyAgentsGRPOConfig.from_dict({**PRESETS["tiny"], "seed": 0, "output_dir": str(tmp_path / "rl")})
    results = JoyAgentsGRPOTrainer(config).train()
    before, after = results["baseline_metrics"], results["metrics"]
    assert after["episodes"] == before["episodes"] == config.eval_tasks
    assert after["success_rate"] > before["success_rate"], (before["success_rate"], after["success_rate"])
    assert after["format_valid_rate"] >= before["format_valid_rate"] - 0.02
