"""mappo: turn rewards, the critic's global state, the running return statistics, and a small run."""

from __future__ import annotations

import json
import types

import pytest
import torch

from joy_trainers.mappo import MAPPOConfig, MAPPOTrainer, global_states, turn_rewards


def _traj(texts_roles, R, records, incoming=None):
    incoming = incoming or [""] * len(texts_roles)
    nodes = [
        types.SimpleNamespace(role=r, text=t, memory_key="What is 2 + 2?", breakdown=rec, incoming=i)
        for (t, r), rec, i in zip(texts_roles, records, incoming, strict=True)
    ]
    return types.SimpleNamespace(nodes=nodes, reward=R)


def test_turn_rewards_sum_to_the_team_reward_and_keep_per_turn_shares():
    recs = [{"R_F": 0.05, "R_E": 0.0}, {"R_F": 0.0, "R_E": 0.02}, {"R_F": 0.05, "R_E": 0.0}]
    t = _traj([("a", "master"), ("b", "math"), ("c", "master")], 1.08, recs)
    r = turn_rewards(t)
    assert r[0] == pytest.approx(0.05) and r[1] == pytest.approx(-0.02)
    assert sum(r) == pytest.approx(1.08)
    assert turn_rewards(_traj([], 0.0, [])) == []


def test_global_state_holds_the_request_and_every_earlier_turn_of_every_agent():
    t = _traj(
        [("call math", "master"), ("<answer>4</answer>", "math"), ("<answer>4</answer>", "master")], 1.0, [{}, {}, {}]
    )
    states = global_states(t)
    assert len(states) == 3
    assert states[0] == "request: What is 2 + 2?\nnext: master"
    assert "[master] call math" in states[2] and "[math] <answer>4</answer>" in states[2]
    assert states[2].endswith("next: master") and "[math]" not in states[1]


def test_global_state_holds_what_each_role_received_before_its_turn():
    """``[role <-] ...``: what the role received since its previous turn (tool results, answers, a customer's
    replies), before its own ``[role] text``; an incoming text that repeats the request is not repeated."""
    t = _traj(
        [("call math", "master"), ("<tool_call>calc</tool_call>", "math"), ("<answer>4</answer>", "math")],
        1.0,
        [{}, {}, {}],
        incoming=["What is 2 + 2?", "2 + 2", '{"result": 4}'],
    )
    states = global_states(t)
    assert states[0] == "request: What is 2 + 2?\nnext: master"
    assert states[1] == "request: What is 2 + 2?\n[master] call math\n[math <-] 2 + 2\nnext: math"
    assert states[2].endswith('[math] <tool_call>calc</tool_call>\n[math <-] {"result": 4}\nnext: math')


def test_running_return_statistics_match_the_pooled_mean_and_variance():
    tr = MAPPOTrainer.__new__(MAPPOTrainer)
    tr.value_mean, tr.value_var, tr.value_count = 0.0, 1.0, 1e-12
    a, b = [0.5, 1.0, -0.25], [2.0, 0.0]
    tr._normalise(a)
    tr._normalise(b)
    pooled = torch.tensor(a + b, dtype=torch.float64)
    assert tr.value_mean == pytest.approx(float(pooled.mean()), abs=1e-6)
    assert tr.value_var == pytest.approx(float(pooled.var(unbiased=False)), abs=1e-6)


def test_config_validation():
    with pytest.raises(ValueError, match="gamma"):
        MAPPOConfig(gamma=1.5)
    with pytest.raises(ValueError, match="ppo_epochs"):
        MAPPOConfig(ppo_epochs=0)


def test_small_mappo_run_trains_the_critic_and_resumes(sft_run, tmp_path, undocumented_metrics):
    out = tmp_path / "run"
    values = dict(
        sft_run=sft_run,
        output_dir=str(out),
        iterations=1,
        steps_per_iteration=2,
        tasks_per_step=2,
        group_size=2,
        max_new_tokens=12,
        max_cycles=3,
        max_prompt_tokens=256,
        lr=1e-2,
        eval_tasks=0,
        checkpoint_every=1,
        critic_lr=0.05,
    )
    trainer = MAPPOTrainer(MAPPOConfig(**values))
    results = trainer.train()
    assert results["steps"] == 2
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["losses/value_loss"] >= 0 and r["losses/value_loss"] == r["losses/value_loss"] for r in rows)
    assert undocumented_metrics("mappo", rows) == []
    ck = out / "checkpoints" / "step-2" / "critic.pt"
    assert ck.is_file()
    more = MAPPOTrainer(MAPPOConfig(**{**values, "steps_per_iteration": 3, "resume": True}))
    assert more.train()["steps"] == 3
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]


def test_critic_reads_the_frozen_base_and_its_head_fits_values(sft_run):
    from joy_agents.policy import TeamPolicy
    from joy_trainers.losses import value_loss
    from joy_trainers.mappo import Critic

    team = TeamPolicy.load(sft_run + "/team")
    base = [p.detach().clone() for p in team.model_for("master").parameters()]
    critic = Critic(team, max_tokens=64)
    assert [n for n, _ in critic.named_parameters()] == ["head.weight", "head.bias"]
    feats = critic.features(["request: a\nnext: master", "request: b c d\n[master] x\nnext: qa"])
    assert feats.shape == (2, team.model_for("master").get_base_model().config.hidden_size)
    target = torch.tensor([1.0, -1.0])
    opt = torch.optim.Adam(critic.parameters(), lr=0.05)
    first = None
    for _ in range(60):
        loss = value_loss(critic(feats), torch.zeros(2), target, None)
        first = loss.item() if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.1 * first
    assert all(torch.equal(a, b) for a, b in zip(base, team.model_for("master").parameters(), strict=True))
