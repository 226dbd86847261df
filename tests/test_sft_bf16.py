"""The GPU path on a CPU: bfloat16 and a Llama-architecture model (SmolLM2's), through SFT (shared prefix on and
off, completion and conversation rows, activation checkpointing), an RL update of every trainer and
evaluation, against float32 within stated tolerances."""

from __future__ import annotations

import json

import pytest
import torch

from joy_agents.policy import SamplingConfig, TeamPolicy
from joy_trainers.sft import SFTConfig, SFTTrainer, collate_left, collate_shared_prefix
from joy_trainers.sft_loss import completion_loss

BF16_LOSS_TOL = 0.02
"""|loss in bf16 - loss in float32| of the same batch and weights (a loss of about 7.6 here: ~0.3% relative)."""
BF16_LOGPROB_TOL = 0.1
"""Largest |log-prob in bf16 - log-prob in float32| of the same tokens."""


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    from joy_agents.tiny import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama") / "model")


def _batch():
    prefix = list(range(30, 60))  # the 30 tokens both rows start with (a role's system prompt)
    return [
        {"input_ids": prefix + list(range(100, 120)), "labels": [-100] * 38 + list(range(108, 120))},
        {"input_ids": prefix + list(range(200, 212)), "labels": [-100] * 34 + list(range(204, 212))},
    ]


class _Float32Outputs(torch.nn.Module):
    """Hands back the model's outputs in float32, as Accelerate's mixed-precision wrapper does (``bf16=True``)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.model, name)

    def forward(self, **kwargs):
        out = self.model(**kwargs)
        out.hidden_states = tuple(h.float() for h in out.hidden_states) if out.hidden_states else None
        return out


@pytest.mark.parametrize("shared_prefix", [False, True])
def test_completion_loss_in_bf16_matches_float32(llama_dir, shared_prefix):
    from transformers import AutoModelForCausalLM

    collate = collate_shared_prefix if shared_prefix else collate_left
    batch = collate(_batch(), 0)
    assert ("prefix_ids" in batch) == shared_prefix
    reference = completion_loss(AutoModelForCausalLM.from_pretrained(str(llama_dir)), batch).item()
    model = AutoModelForCausalLM.from_pretrained(str(llama_dir), dtype=torch.bfloat16)
    for wrapped in (model, _Float32Outputs(model)):  # bf16 outputs, and float32 outputs meeting the bf16 head
        loss = completion_loss(wrapped, batch)
        assert torch.isfinite(loss) and abs(loss.item() - reference) < BF16_LOSS_TOL


def test_a_shared_prefix_batch_runs_as_whole_rows_under_activation_checkpointing(llama_dir):
    """Checkpointing turns the cache off while training, so a prefix batch cannot run its prefix once: it runs as
    whole rows, with the same loss and gradients as without checkpointing."""
    from transformers import AutoModelForCausalLM

    batch = collate_shared_prefix(_batch(), 0)
    plain = AutoModelForCausalLM.from_pretrained(str(llama_dir)).train()
    checkpointed = AutoModelForCausalLM.from_pretrained(str(llama_dir)).train()
    # the name of the transformers versions that renamed it, else the older one
    name = "activation_checkpointing_enable"
    getattr(checkpointed, name if hasattr(checkpointed, name) else "gradient_checkpointing_enable")()
    losses, grads = [], []
    for model in (plain, checkpointed):
        loss = completion_loss(model, batch)
        loss.backward()
        losses.append(loss.item())
        grads.append(model.get_input_embeddings().weight.grad.clone())
    assert losses[0] == pytest.approx(losses[1], abs=1e-5)
    assert torch.allclose(grads[0], grads[1], atol=1e-5)


SFT_SMALL = {
    "env_id": "joy/math-v0",
    "sft_tasks": 4,
    "base_epochs": 0,
    "adapter_epochs": 10,
    "role_adapter_epochs": {"master": 0},
    "adapter_lr": 2e-2,
    "batch_size": 2,
    "max_length": 384,
    "eval_tasks": 0,
    "lora_r": 4,
    "lora_alpha": 8,
}


@pytest.mark.parametrize(
    "options",
    [
        {"shared_prefix": True, "adapter_loss": "completion", "activation_checkpointing": False},
        {"shared_prefix": False, "adapter_loss": "conversation", "activation_checkpointing": False},
        {"shared_prefix": True, "adapter_loss": "completion", "activation_checkpointing": True},
    ],
    ids=["shared-prefix", "conversation-rows", "checkpointing"],
)
def test_sft_trains_a_llama_in_bf16(llama_dir, tmp_path, options):
    config = SFTConfig(model=str(llama_dir), dtype="bfloat16", output_dir=str(tmp_path / "run"), **SFT_SMALL, **options)
    SFTTrainer(config).train()
    logs = json.loads((tmp_path / "run" / "logs.json").read_text())
    losses = [e["loss"] for e in logs["math"] if "loss" in e]
    assert len(losses) >= 2 and all(x == x for x in losses) and losses[-1] < losses[0]
    team = TeamPolicy.load(str(tmp_path / "run" / "team"))
    assert team.config.dtype == "bfloat16"
    b_math = [p for n, p in team.model_for("math").named_parameters() if "lora_B" in n and ".math." in n]
    assert b_math and any(p.abs().sum() > 0 for p in b_math)


@pytest.fixture(scope="module")
def bf16_sft_run(llama_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("bf16-sft") / "run"
    SFTTrainer(SFTConfig(model=str(llama_dir), dtype="bfloat16", output_dir=str(out), **SFT_SMALL)).train()
    return str(out)


@pytest.mark.parametrize("trainer", ["grpo", "joyagents_grpo", "mappo"])
def test_rl_update_of_every_trainer_in_bf16(bf16_sft_run, tmp_path, trainer, monkeypatch):
    from joy_agents.rollout import RolloutEngine
    from joy_trainers.cli import load_trainer

    # an untrained team earns no reward; a reward from the sampled tokens gives the groups variance to learn from
    original = RolloutEngine._trajectory

    def scored(self, env, nodes):
        t = original(self, env, nodes)
        t.result = {**t.result, "R": float(sum(nodes[0].completion_ids) % 2) if nodes else 0.0}
        for node in t.nodes:
            node.reward = t.reward
        return t

    monkeypatch.setattr(RolloutEngine, "_trajectory", scored)

    cls = load_trainer(trainer)
    small = {
        "iterations": 1,
        "steps_per_iteration": 1,
        "tasks_per_step": 2,
        "group_size": 2,
        "max_new_tokens": 8,
        "max_cycles": 3,
        "max_prompt_tokens": 256,
        "lr": 5e-2,
        "eval_tasks": 0,
        "temperature": 1.5,
        "env_id": "joy/math-v0",
    }
    import dataclasses

    names = {f.name for f in dataclasses.fields(cls.config_class)}
    values = {k: v for k, v in small.items() if k in names}
    if "top_k" in names:
        values["top_k"] = "all"
    config = cls.config_class.from_dict({**values, "sft_run": bf16_sft_run, "output_dir": str(tmp_path / "rl")})
    results = cls(config).train()
    assert results["steps"] == 1
    before = TeamPolicy.load(f"{bf16_sft_run}/team")
    after = TeamPolicy.load(str(tmp_path / "rl" / "team"))
    assert after.config.dtype == "bfloat16"
    changed = 0
    for role in after.roles:
        for p, q in zip(before.trainable_parameters(role), after.trainable_parameters(role), strict=True):
            assert torch.isfinite(q).all()
            changed += int(not torch.equal(p, q))
    assert changed > 0


def test_bf16_team_samples_and_scores_like_float32(bf16_sft_run):
    from joy_agents.sampling.base import sample_many

    bf16 = TeamPolicy.load(f"{bf16_sft_run}/team")
    fp32 = TeamPolicy.load(f"{bf16_sft_run}/team", dtype="float32")
    prompt = bf16.encode_prompt(
        "math", [{"role": "system", "content": "math"}, {"role": "user", "content": "2+3?"}], None
    )
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=12)
    samples = sample_many(bf16, [("math", prompt)], sampling, num_samples=3)[0]
    for s in samples:
        lp_bf16 = bf16.logprobs("math", [s.prompt_ids], [s.completion_ids], 1.0)[0]
        lp_fp32 = fp32.logprobs("math", [s.prompt_ids], [s.completion_ids], 1.0)[0]
        # the engine's log-probs are what a bf16 teacher-forced pass gives, and near float32's
        assert torch.allclose(torch.tensor(s.logprobs), lp_bf16.float(), atol=BF16_LOGPROB_TOL)
        assert torch.allclose(lp_bf16.float(), lp_fp32, atol=BF16_LOGPROB_TOL)


def test_evaluation_in_bf16_reports_the_float32_metrics(bf16_sft_run):
    from joy_agents.sampling.settings import GenerationSettings
    from joy_trainers.evaluation import evaluate_team

    results = {}
    for dtype in ("bfloat16", "float32"):
        team = TeamPolicy.load(f"{bf16_sft_run}/team", dtype=dtype)
        results[dtype] = evaluate_team(team, "joy/math-v0", "test", 4, seed=0, settings=GenerationSettings(12, 3, 256))
    for key in ("episodes", "success_rate"):
        assert results["bfloat16"][key] == results["float32"][key]
    assert results["bfloat16"]["generated_tokens"] > 0


def test_auto_dtype_is_bf16_only_with_a_bf16_gpu(monkeypatch):
    from joy_trainers import sft

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert SFTConfig(dtype="auto").dtype == "bfloat16" == sft.auto_dtype()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert SFTConfig(dtype="auto").dtype == "float32"
