"""The sft trainer: completion-only loss, left-padded batches, and a smoke run that learns."""

import json

import pytest
import torch

from joy_agents.policy import TeamPolicy
from joy_trainers.sft import SFTConfig, SFTTrainer, collate_left, completion_loss


class _Wrapper(torch.nn.Module):  # stands for DDP / FSDP: the model is its .module
    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, **kwargs):
        return self.module(**kwargs)


@pytest.mark.parametrize("head", ["labelled positions", "last keep positions", "wrapped model"])
def test_completion_loss_equals_the_models_own_loss(tiny_dir, head):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_dir))
    if head == "last keep positions":
        model.config.logit_scale = 1.0  # a scaled head (Cohere-style) takes the general path; Qwen2 ignores it
    wrapped = _Wrapper(model) if head == "wrapped model" else model
    batch = [
        {"input_ids": list(range(20, 60)), "labels": [-100] * 30 + list(range(50, 60))},
        {"input_ids": list(range(5, 30)), "labels": [-100] * 20 + list(range(25, 30))},
    ]
    loss = completion_loss(wrapped, collate_left(batch, 0))
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


def test_bucketed_order_covers_every_example_per_pass_with_low_padding_and_mixed_batches():
    import random

    from joy_trainers.sft import bucketed_order

    rng = random.Random(0)
    lengths = [rng.choice([40, 60, 300, 380]) + rng.randint(0, 9) for _ in range(256)]
    order = bucketed_order(lengths, batch_size=8, epochs=2.5, seed=1)
    assert len(order) == 640
    assert sorted(order[:256]) == list(range(256)) and sorted(order[256:512]) == list(range(256))
    batches = [order[i : i + 8] for i in range(0, 512, 8)]
    padded = sum(8 * max(lengths[i] for i in b) for b in batches)
    shuffled = list(range(256))
    rng.shuffle(shuffled)
    plain = sum(8 * max(lengths[i] for i in shuffled[k : k + 8]) for k in range(0, 256, 8)) * 2
    assert padded < 0.75 * plain  # far less padding than random batches
    # consecutive batches are not sorted by length across the pass (not one long block per role)
    maxima = [max(lengths[i] for i in b) for b in batches[:32]]
    assert maxima != sorted(maxima) and maxima != sorted(maxima, reverse=True)
    assert bucketed_order(lengths, 8, 1.0, seed=1) == order[:256]  # deterministic


@pytest.mark.parametrize("loss", ["all", "conversation"])
def test_base_stage_trains_on_whole_conversations(tiny_dir, tmp_path, loss):
    config = SFTConfig(
        model=str(tiny_dir),
        env_id="joy/math-v0",
        sft_tasks=4,
        base_epochs=4,
        base_loss=loss,
        base_lr=1e-2,
        adapter_epochs=0,
        batch_size=4,
        max_length=96,
        eval_tasks=0,
        output_dir=str(tmp_path / "run"),
    )
    results = SFTTrainer(config).train()
    logs = json.loads((tmp_path / "run" / "logs.json").read_text())
    losses = [e["loss"] for e in logs["base"] if "loss" in e]
    assert len(losses) >= 2 and losses[-1] < losses[0]
    assert results["steps"] == logs["base"][-1]["step"] > len(losses)  # optimiser steps, not log lines
    assert (tmp_path / "run" / "base" / "config.json").is_file()
    with pytest.raises(ValueError, match="base_loss"):
        SFTConfig(base_loss="prompt")
    with pytest.raises(ValueError, match="adapter_loss"):
        SFTConfig(adapter_loss="all")
