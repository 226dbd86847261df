"""The sft trainer: completion-only loss, left-padded batches, and a smoke run that learns."""

import json

import pytest
import torch

from joy_agents.policy import TeamPolicy
from joy_trainers.errors import UsageError
from joy_trainers.sft import SFTConfig, SFTTrainer, bucketed_order, collate_left, completion_loss


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


def test_sft_smoke_run_lowers_the_loss_and_changes_adapters(tiny_dir, tmp_path, capfd):
    config = SFTConfig(
        model=str(tiny_dir),
        env_id="joy/math-v0",
        sft_tasks=4,
        base_epochs=0,
        adapter_epochs=6,
        role_adapter_epochs={"master": 0},
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
    # what the user sees: our progress bar per stage, no TRL dict lines; epochs counted over the 6 passes
    out, err = capfd.readouterr()
    assert "{'loss'" not in out + err and "sft math" in err
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert {r["stage"] for r in rows} == {"math"} and [r["step"] for r in rows] == sorted(r["step"] for r in rows)
    assert rows[-1]["epoch"] == pytest.approx(6.0, abs=0.05) and logs["math"][-1]["epoch"] == rows[-1]["epoch"]
    assert not (tmp_path / "run" / "work").exists()  # TRL's empty output folders are gone
    team = TeamPolicy.load(str(tmp_path / "run" / "team"))
    # LoRA B matrices start at zero: training the math role made them non-zero, untrained roles stay zero
    b_math = [p for n, p in team.model_for("math").named_parameters() if "lora_B" in n and ".math." in n]
    b_qa = [p for n, p in team.model_for("qa").named_parameters() if "lora_B" in n and ".qa." in n]
    b_master = [p for n, p in team.model_for("master").named_parameters() if "lora_B" in n and ".master." in n]
    assert b_math and any(p.abs().sum() > 0 for p in b_math)
    # role_adapter_epochs={"master": 0}: the master has examples but its adapter is not trained
    assert results["examples_per_role"]["master"] > 0 and "master" not in logs
    assert b_master and all(p.abs().sum() == 0 for p in b_master)
    assert results["examples_per_role"]["math"] > 0 and (tmp_path / "run" / "results.md").exists()
    assert results["examples_per_role"]["qa"] == 0 or any(p.abs().sum() > 0 for p in b_qa)


def test_a_fraction_of_an_epoch_over_few_rows_still_trains_one():
    # 0.2 epoch of 2 rows rounds to none; a role with examples must not get an empty dataset
    assert len(bucketed_order([5, 7], 4, 0.2, 0)) == 1
    assert len(bucketed_order([5] * 10, 4, 0.5, 0)) == 5


def test_bucketed_order_covers_every_example_per_pass_with_low_padding_and_mixed_batches():
    import random

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


@pytest.mark.parametrize("value", [{"general": -1}, {"general": "2"}])
def test_role_adapter_epochs_rejects_bad_values(value):
    with pytest.raises(ValueError, match="numbers >= 0"):
        SFTConfig(role_adapter_epochs=value)


def test_role_adapter_epochs_rejects_roles_the_env_lacks_before_any_work(tmp_path):
    """The roles are the env's agents, known once the env is made: an unknown one stops the run in one line,
    before the run directory is claimed or a model is built."""
    config = SFTConfig(env_id="joy/math-v0", role_adapter_epochs={"nobody": 1.0}, output_dir=str(tmp_path / "run"))
    expected = r"unknown role\(s\) \['nobody'\]; the roles of joy/math-v0: master, qa"
    with pytest.raises(UsageError, match=expected) as info:
        SFTTrainer(config).train()
    assert "\n" not in str(info.value) and not (tmp_path / "run").exists()


def _prefix_batch():
    prefix = list(range(100, 140))
    return [
        {"input_ids": prefix + list(range(5, 30)), "labels": [-100] * 50 + list(range(15, 30))},
        {"input_ids": prefix + list(range(40, 52)), "labels": [-100] * 44 + list(range(44, 52))},
        {"input_ids": prefix + list(range(60, 90)), "labels": [-100] * 45 + list(range(65, 90))},
    ]


@pytest.mark.parametrize("adapter", [False, True])
def test_shared_prefix_gives_the_loss_and_gradients_of_whole_rows(tiny_dir, adapter):
    from transformers import AutoModelForCausalLM

    from joy_trainers.sft import collate_shared_prefix

    model = AutoModelForCausalLM.from_pretrained(str(tiny_dir))
    if adapter:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
        for n, p in model.named_parameters():
            if "lora_B" in n:
                torch.nn.init.normal_(p, std=0.05)  # a trained adapter, so its gradients are not trivially zero
    batch = _prefix_batch()
    shared = collate_shared_prefix(batch, 0)
    assert shared["prefix_ids"].shape == (1, 40) and shared["input_ids"].shape == (3, 30)

    def loss_and_grads(inputs):
        model.zero_grad()
        loss = completion_loss(model, inputs)
        loss.backward()
        return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    loss_a, grads_a = loss_and_grads(shared)
    loss_b, grads_b = loss_and_grads(collate_left(batch, 0))
    assert loss_a == pytest.approx(loss_b, abs=1e-5)
    assert grads_a.keys() == grads_b.keys() and grads_a
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], atol=1e-5, rtol=1e-4, msg=name)


def test_shared_prefix_length_stops_before_the_first_label_and_the_last_token():
    from joy_trainers.sft_batches import collate_shared_prefix, shared_prefix_length

    batch = _prefix_batch()
    assert shared_prefix_length(batch) == 40  # the prompts then differ
    same = [dict(batch[0]), dict(batch[0])]
    assert shared_prefix_length(same) == 49  # identical rows: up to the position before the first label
    unlabelled = [{"input_ids": [1, 2, 3], "labels": [-100] * 3}] * 2
    assert shared_prefix_length(unlabelled) == 2  # a row keeps at least its last token
    different = [batch[0], {"input_ids": [7, *batch[1]["input_ids"]], "labels": [-100, *batch[1]["labels"]]}]
    assert shared_prefix_length(different) == 0
    assert "prefix_ids" not in collate_shared_prefix(different, 0)  # falls back to plain rows
    assert "prefix_ids" not in collate_shared_prefix(batch[:1], 0)


def test_a_prefix_batch_is_refused_where_the_head_must_run_inside_the_wrapper(tiny_dir):
    from transformers import AutoModelForCausalLM

    from joy_trainers.sft import collate_shared_prefix, prefix_sharing_supported

    model = AutoModelForCausalLM.from_pretrained(str(tiny_dir))
    assert prefix_sharing_supported(model) and not prefix_sharing_supported(_Wrapper(model))
    with pytest.raises(ValueError, match="collate_left"):
        completion_loss(_Wrapper(model), collate_shared_prefix(_prefix_batch(), 0))


def test_grouped_batches_hold_one_prefix_group_and_cover_every_row_per_pass():
    import random

    from joy_trainers.sft import bucketed_order, prefix_groups

    rng = random.Random(0)
    heads = {"a": [1] * 70, "b": [2] * 70, "rare": [3] * 70}
    rows, kinds = [], []
    for _ in range(200):
        kind = rng.choice(["a", "a", "b", "cut"]) if len(kinds) < 197 else "rare"
        body = [rng.randint(10, 99) for _ in range(rng.randint(5, 200))]
        rows.append((heads[kind] if kind != "cut" else []) + body)
        kinds.append(kind)
    groups = prefix_groups(rows, batch_size=8)
    assert all((g is None) == (k in ("cut", "rare")) for g, k in zip(groups, kinds, strict=True))  # 3 "rare" < 8
    lengths = [len(r) for r in rows]
    order = bucketed_order(lengths, batch_size=8, epochs=2.0, seed=3, groups=groups)
    # a loader cutting the order into 8 rows finds batches of one group each
    batches = [order[i : i + 8] for i in range(0, len(order), 8)]
    assert all(len(b) == 8 and len({groups[j] for j in b}) == 1 for b in batches)
    first_pass = order[: len(order) // 2]
    assert set(first_pass) == set(range(200)) and set(order[len(order) // 2 :]) == set(range(200))
    assert len(first_pass) - 200 < 8 * 3  # short batches are filled up: fewer than 8 extra rows per group
    assert bucketed_order(lengths, 8, 1.0, seed=3, groups=groups) == first_pass  # passes do not depend on epochs
    with pytest.raises(ValueError, match="one key per example"):
        bucketed_order(lengths, 8, 1.0, seed=3, groups=groups[:-1])


def test_token_batches_fit_the_budget_and_cover_every_row_per_pass():
    from joy_trainers.sft_batches import token_batches

    lengths = [5, 50, 12, 300, 7, 7, 90, 33, 64, 8, 21, 140] * 3
    batches = token_batches(lengths, 256, 2.0, seed=0)
    assert sorted(i for b in batches for i in b) == sorted(list(range(len(lengths))) * 2)  # two passes
    for b in batches:
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 256  # a 300-token row goes alone
    assert max(len(b) for b in batches) > 3 > min(len(b) for b in batches)  # short rows make wide batches
    assert token_batches(lengths, 256, 2.0, seed=0) == batches  # seeded
    half = token_batches(lengths, 256, 0.5, seed=0)
    assert 0 < sum(len(b) for b in half) < len(lengths)
    groups = ["a" if i % 2 else "b" for i in range(len(lengths))]
    assert all(len({groups[i] for i in b}) == 1 for b in token_batches(lengths, 256, 1.0, 0, groups=groups))
    with pytest.raises(ValueError, match="batch_tokens"):
        token_batches(lengths, 0, 1.0, 0)


def test_sft_with_batches_sized_by_tokens_trains_every_row(tiny_dir, tmp_path):
    config = SFTConfig(
        model=str(tiny_dir),
        env_id="joy/math-v0",
        sft_tasks=4,
        base_epochs=0,
        adapter_epochs=2,
        role_adapter_epochs={"master": 0},
        adapter_lr=1e-2,
        batch_tokens=640,
        max_length=160,
        eval_tasks=0,
        output_dir=str(tmp_path / "run"),
    )
    results = SFTTrainer(config).train()
    logs = json.loads((tmp_path / "run" / "logs.json").read_text())
    rows = results["examples_per_role"]["math"]
    # batches of up to 640 tokens of rows under 160 tokens hold 4 rows or more: fewer steps than rows
    assert 0 < logs["math"][-1]["step"] < 2 * rows
    with pytest.raises(ValueError, match="batch_tokens=100 is under max_length=160"):
        SFTConfig(batch_tokens=100, max_length=160)
