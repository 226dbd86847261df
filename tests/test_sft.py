"""The sft trainer: completion-only loss, left-padded batches, and a smoke run that learns."""

import json

import pytest
import torch

from joy_agents.policy import TeamPolicy
from joy_trainers.sft import SFTConfig, SFTTrainer, collate_left, completion_loss


def test_completion_loss_equals_the_models_own_loss(tiny_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_dir))
    batch = [
        {"input_ids": list(range(20, 60)), "labels": [-100] * 30 + list(range(50, 60))},
        {"input_ids": list(range(5, 30)), "labels": [-100] * 20 + list(range(25, 30))},
    ]
    loss = completion_loss(model, collate_left(batch, 0))
    total, count = 0.0, 0
    for ex in batch:
        out = model(input_ids=torch.tensor([ex["input_ids"]]), labels=torch.tensor([ex["labels"]]))
        n = sum(1 for v in ex["labels"][1:] if v != -100)
        total, count = total + out.loss.item() * n, count + n
    assert loss.item() == pytest.approx(total / count, abs=1e-5)


def test_sft_smoke_run_lowers_the_loss_and_changes_adapters(tiny_dir, tmp_path):
    config = SFTConfig(
        model=str(tiny_dir),
        env_id="joy/math-v0",
        sft_tasks=4,
        base_epochs=0,
        adapter_epochs=6,
        adapter_lr=1e-2,
        batch_size=4,
        max_length=160,
        eval_tasks=0,
        output_dir=str(tmp_path / "run"),
    )
    trainer = SFTTrainer(config)
    results = trainer.train()
    logs = json.loads((tmp_path / "run" / "logs.json").read_text())
    losses = [e["loss"] for e in logs["math"] if "loss" in e]
    assert len(losses) >= 2 and losses[-1] < losses[0]
    team = TeamPolicy.load(str(tmp_path / "run" / "team"))
    # LoRA B matrices start at zero: training the math role made them non-zero, untrained roles stay zero
    b_math = [p for n, p in team.model_for("math").named_parameters() if "lora_B" in n and ".math." in n]
    b_qa = [p for n, p in team.model_for("qa").named_parameters() if "lora_B" in n and ".qa." in n]
    assert b_math and any(p.abs().sum() > 0 for p in b_math)
    assert results["examples_per_role"]["math"] > 0 and (tmp_path / "run" / "results.md").exists()
    assert results["examples_per_role"]["qa"] == 0 or any(p.abs().sum() > 0 for p in b_qa)
