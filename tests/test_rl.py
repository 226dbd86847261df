"""joyagents_grpo / grpo: selection, per-role updates, node-wise sampling cost, checkpoints, resume after
SIGKILL, and identical parameters across two processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from quick_runs import SMALL_RL, TWO_PROCESSES

from joy_agents.sampling.settings import GenerationSettings
from joy_trainers import rl
from joy_trainers.grpo import GRPOConfig, GRPOTrainer
from joy_trainers.joyagents_grpo import JoyAgentsGRPOConfig, JoyAgentsGRPOTrainer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cfg(cls, sft_run, out, **kw):
    import dataclasses

    names = {f.name for f in dataclasses.fields(cls)}
    base = {k: v for k, v in SMALL_RL.items() if k in names}
    return cls.from_dict({**base, "sft_run": sft_run, "output_dir": str(out), **kw})


# ------------------------------------------------------------------------------------ selection math
def test_select_top_k_ranks_by_variance_and_skips_flat_groups():
    groups = [
        rl.Group("qa", [0, 0, 0]),
        rl.Group("math", [0, 1, 0]),
        rl.Group("master", [0, 1, 1, 0]),
        rl.Group("general", [1, 1, 1]),
        rl.Group("ecommerce", [0, 0.1, 0]),
    ]
    assert [g.role for g in rl.select_top_k(groups, 2)] == ["master", "math"]
    assert [g.role for g in rl.select_top_k(groups, 10)] == ["master", "math", "ecommerce"]
    assert [g.role for g in rl.select_top_k(groups, "all")] == ["math", "master", "ecommerce"]
    assert rl.select_top_k([], 5) == [] and rl.select_top_k(groups[:1], "all") == []
    assert groups[2].variance == pytest.approx(0.25)
    with pytest.raises(ValueError, match="top_k"):
        rl.select_top_k(groups, 0)


def test_a_group_whose_rewards_differ_by_float_noise_is_flat():
    # R_F = 0.2 * valid / n: 0.2 * 3/3 and 0.2 * 6/6 differ in the last bit
    noise = rl.Group("master", [0.2 * 3 / 3, 0.2 * 6 / 6, 0.2, 0.2 * 6 / 6])
    assert noise.variance > 0  # the exact test the selection used to make
    real = rl.Group("qa", [0.0, 1.2, 0.2, 0.2])
    scoring = rl.Scoring()
    assert scoring.is_flat(noise) and not scoring.is_flat(real) and scoring.strength(noise) == 0.0
    assert rl.select_top_k([noise, real], 5) == [real] and rl.select_top_k([noise], "all") == []
    assert rl.advantages_of([noise], rl.Scoring(scale_rewards="group"))[0] == [0.0] * 4
    # a larger minimum spread also makes small shaping differences flat
    shaping = rl.Group("qa", [1.2, 1.2, 1.2, 1.18])
    assert not scoring.is_flat(shaping) and rl.Scoring(min_reward_spread=0.05).is_flat(shaping)


def test_advantage_reward_chooses_the_terms_and_shaping_only_orders_groups_that_differ_in_accuracy():
    # all four succeed; one took an extra call: R differs, R_A does not
    shaping = rl.Group("qa", [1.2, 1.2, 1.2, 1.18], accuracy=[1.0] * 4, success=[True] * 4)
    # two succeed, two fail; one success is slower
    mixed = rl.Group("master", [1.2, 1.18, 0.2, 0.1], accuracy=[1.0, 1.0, 0.0, 0.0], success=[True, True, False, False])
    total, accuracy, shaped = (rl.Scoring(advantage_reward=a) for a in ("total", "accuracy", "shaped_accuracy"))
    assert total.signal(shaping) == [1.2, 1.2, 1.2, 1.18] and not total.is_flat(shaping)
    assert accuracy.is_flat(shaping) and shaped.is_flat(shaping)
    assert rl.select_top_k([shaping, mixed], 2, shaped) == [mixed]
    assert shaped.signal(mixed) == [1.2, 1.18, 0.2, 0.1]  # differs in accuracy: the shaping terms order it
    assert accuracy.signal(mixed) == [1.0, 1.0, 0.0, 0.0]
    adv = rl.advantages_of([shaping, mixed], shaped)
    assert adv[0] == [0.0] * 4 and adv[1][0] > adv[1][1] > 0 > adv[1][2] > adv[1][3]
    with pytest.raises(ValueError, match="Group.accuracy"):
        accuracy.signal(rl.Group("qa", [1.0, 0.0]))
    with pytest.raises(ValueError, match="advantage_reward"):
        rl.Scoring(advantage_reward="R_A")


def test_scale_rewards_none_gives_unscaled_advantages_and_batch_one_std_over_the_groups():
    groups = [rl.Group("qa", [1.0, 0.0, 0.0, 0.0]), rl.Group("master", [1.2, 1.0, 1.2, 1.0])]
    none = rl.advantages_of(groups, rl.Scoring(scale_rewards="none"))
    assert none[0] == pytest.approx([0.75, -0.25, -0.25, -0.25]) and none[1] == pytest.approx([0.1, -0.1, 0.1, -0.1])
    batch = rl.advantages_of(groups, rl.Scoring(scale_rewards="batch"))
    std = float(torch.tensor([1.0, 0.0, 0.0, 0.0, 1.2, 1.0, 1.2, 1.0]).std())
    assert batch[0] == pytest.approx([a / (std + 1e-4) for a in none[0]], rel=1e-5)
    assert batch[1] == pytest.approx([a / (std + 1e-4) for a in none[1]], rel=1e-5)
    group = rl.advantages_of(groups, rl.Scoring(scale_rewards=True))
    assert group[1] == pytest.approx([0.866, -0.866, 0.866, -0.866], abs=1e-3)  # the group's own std
    assert rl.Scoring(scale_rewards=False).scale_rewards == "none"


def test_config_validation_names_the_problem(sft_run, tmp_path):
    with pytest.raises(ValueError, match="top_k"):
        _cfg(JoyAgentsGRPOConfig, sft_run, tmp_path, top_k="some")
    with pytest.raises(ValueError, match="sampling"):
        _cfg(JoyAgentsGRPOConfig, sft_run, tmp_path, sampling="joint")
    with pytest.raises(ValueError, match="group_size"):
        _cfg(GRPOConfig, sft_run, tmp_path, group_size=1)
    with pytest.raises(ValueError, match="unknown GRPOConfig option"):
        _cfg(GRPOConfig, sft_run, tmp_path, top_k=3)  # plain grpo has no selection
    with pytest.raises(ValueError, match="sft_run"):
        rl.sft_team(None, "Qwen/Qwen2.5-3B-Instruct", 0)
    with pytest.raises(ValueError, match="data_seed"):
        _cfg(GRPOConfig, sft_run, tmp_path, data_seed=-1)
    with pytest.raises(ValueError, match="scale_rewards must be one of"):
        _cfg(GRPOConfig, sft_run, tmp_path, scale_rewards="std")
    with pytest.raises(ValueError, match="advantage_reward must be one of"):
        _cfg(JoyAgentsGRPOConfig, sft_run, tmp_path, advantage_reward="accuracy_only")
    with pytest.raises(ValueError, match="min_reward_spread"):
        _cfg(GRPOConfig, sft_run, tmp_path, min_reward_spread=-0.1)
    with pytest.raises(ValueError, match="max_draws"):
        _cfg(GRPOConfig, sft_run, tmp_path, max_draws=0)
    with pytest.raises(ValueError, match="dtype must be one of"):
        _cfg(GRPOConfig, sft_run, tmp_path, dtype="half")
    assert _cfg(GRPOConfig, sft_run, tmp_path, scale_rewards=False).scale_rewards == "none"


def test_partial_credit_shapes_training_rollouts_only(sft_run, tmp_path, monkeypatch):
    import joy_trainers.rl.loop as loop
    from joy_trainers import evaluation
    from joy_trainers.rundir import RunDir

    cfg = _cfg(GRPOConfig, sft_run, tmp_path / "run", partial_credit=0.5, eval_tasks=1)
    state = loop.prepare(RunDir(cfg.output_dir, "grpo"), cfg, None)
    assert state.engine.prototype.reward_config.partial_credit == 0.5
    assert state.engine.env_kwargs == {} and cfg.env_kwargs == {}  # the reward settings travel on their own
    seen = []
    monkeypatch.setattr(evaluation, "evaluate_team", lambda *a, **k: seen.append(k["env_kwargs"]) or {})
    loop.evaluate(state)  # the evaluation builds its env with the run's own options: the default reward
    assert seen == [{}]
    for bad in (1.5, -0.1, True):
        with pytest.raises(ValueError, match="partial_credit"):
            _cfg(GRPOConfig, sft_run, tmp_path, partial_credit=bad)


def test_an_sft_run_of_another_data_seed_is_refused(sft_run, tmp_path):
    run = tmp_path / "sft"
    shutil.copytree(sft_run, run)
    (run / "results.json").write_text(json.dumps({"trainer": "sft", "seed": 1}))
    assert rl.sft_team(str(run), "tiny-base", 1) == run / "team"
    with pytest.raises(ValueError, match="data seed 1.*data_seed is 0"):
        rl.sft_team(str(run), "tiny-base", 0)


# ------------------------------------------------------------------------------------------ updates
def _team(sft_run):
    from joy_agents.policy import TeamPolicy

    return TeamPolicy.load(os.path.join(sft_run, "team"))


def _samples(team, role, n=4):
    from joy_agents.policy import SamplingConfig

    prompt = team.encode_prompt(role, [{"role": "user", "content": "What is 2 + 2?"}], None)
    (group,) = team.generate(role, [prompt], SamplingConfig(temperature=1.0, max_new_tokens=8), num_samples=n)
    return group


def _synthetic_step(trainer, state, draws_of):
    """Replace the trainer's sampling by groups made from real samples of the team: the k-th batch of tasks drawn
    gets one group per task with the rewards ``draws_of[k]`` (the task index in its key); returns the batches."""
    batches = []

    def sample_groups(state, tasks, *step):
        k = len(batches)
        batches.append(list(tasks))
        groups = []
        for t in tasks:
            role = "qa" if t % 2 else "math"
            samples = _samples(state.team, role, n=2)
            rewards = draws_of[k]
            groups.append(
                rl.Group(role, list(rewards), samples, key=f"task-{t}", accuracy=[float(r >= 1) for r in rewards])
            )
        return groups, [], []

    trainer.sample_groups = sample_groups
    return batches


@pytest.mark.parametrize("trainer_class", [JoyAgentsGRPOTrainer, GRPOTrainer])
def test_dynamic_sampling_draws_until_enough_groups_spread_and_one_update_covers_them_all(
    trainer_class, sft_run, tmp_path, monkeypatch
):
    import joy_trainers.rl.step as step_module

    extra = {"top_k": "all", "memory": False} if trainer_class is JoyAgentsGRPOTrainer else {}
    cfg = _cfg(trainer_class.config_class, sft_run, tmp_path, groups_per_step=3, max_draws=4, **extra)
    trainer = trainer_class(cfg)
    trainer.claim_run_dir()
    state = trainer.start_state()
    # draw 1: both tasks flat (float noise only); draw 2: both spread; draw 3: both spread (never reached)
    batches = _synthetic_step(trainer, state, [(0.2, 0.2 * 6 / 6), (1.2, 0.2), (1.2, 0.0)])
    seen = {}
    real_update = step_module.policy_update

    def spy(team, role, optimizer, samples, advantages, ucfg, reference=None):
        seen.setdefault(role, []).append((list(samples), list(advantages)))
        return real_update(team, role, optimizer, samples, advantages, ucfg, reference)

    monkeypatch.setattr(step_module, "policy_update", spy)
    row = trainer.run_step(state, 0)
    # 2 groups with spread after the second draw < 3: a third draw, then 4 >= 3
    assert row["sampling/draws"] == 3 and len(batches) == 3 and state.tasks_drawn == 3 * cfg.tasks_per_step
    assert [t for b in batches for t in b] == state.rl_tasks[: 3 * cfg.tasks_per_step]
    assert row["groups/total"] == 6 and row["groups/with_spread"] == 4 and row["groups/flat_fraction"] == 1 / 3
    # one optimiser step per role over exactly the samples of the groups that spread, whatever task they came from
    spread_tasks = [t for b in batches[1:] for t in b]
    for role in ("qa", "math"):
        expected = sum(2 for t in spread_tasks if (t % 2 == 1) == (role == "qa"))
        calls = seen.get(role, [])
        assert len(calls) == (1 if expected else 0)
        if expected:
            samples, advantages = calls[0]
            assert len(samples) == expected and all(a != 0 for a in advantages)
    assert row["groups/selected"] == 4
    # the next step draws after the tasks this one took
    assert state.draw_tasks(1) == [state.rl_tasks[(3 * cfg.tasks_per_step) % len(state.rl_tasks)]]


def test_without_dynamic_sampling_a_step_draws_one_batch(sft_run, tmp_path):
    cfg = _cfg(GRPOConfig, sft_run, tmp_path)
    trainer = GRPOTrainer(cfg)
    trainer.claim_run_dir()
    state = trainer.start_state()
    batches = _synthetic_step(trainer, state, [(0.2, 0.2), (1.2, 0.2)])
    row = trainer.run_step(state, 0)
    assert row["sampling/draws"] == 1 and len(batches) == 1 and row["groups/with_spread"] == 0
    assert batches[0] == state.batch_tasks(0, cfg.tasks_per_step) and row["losses/roles_updated"] == 0


def test_the_update_options_are_the_trainer_configs_with_its_defaults():
    """UpdateConfig has no defaults of its own: each field is an RLConfig field with RLConfig's default, and
    update_config copies a trainer config's values, overrides aside."""
    from dataclasses import fields

    from joy_trainers.rl.config import RLConfig

    rl_fields = {f.name: f for f in fields(RLConfig)}
    for f in fields(rl.UpdateConfig):
        assert f.name in rl_fields and f.default == rl_fields[f.name].default, f.name
    cfg = GRPOConfig(beta=0.5, temperature=0.7, epsilon_high=0.28, micro_batch_size=3, loss_type="dapo")
    update = rl.update_config(cfg, beta=0.0)
    assert (update.beta, update.temperature, update.epsilon_high, update.micro_batch_size) == (0.0, 0.7, 0.28, 3)
    assert update.loss_type == "dapo" and update.max_new_tokens == cfg.max_new_tokens


def test_policy_update_changes_only_the_updated_role(sft_run):
    team = _team(sft_run)
    opts = rl.make_optimizers(team, 1e-2)
    before = {r: [p.detach().clone() for p in team.trainable_parameters(r)] for r in team.roles}
    samples = _samples(team, "math")
    cfg = rl.UpdateConfig(temperature=1.0)  # the samples' temperature
    stats = rl.policy_update(team, "math", opts["math"], samples, [1.0, -1.0, 0.5, -0.5], cfg)
    assert stats["samples"] == 4 and abs(stats["ratio_mean"] - 1.0) < 1e-3  # sampling log-probs = training ones
    for role in team.roles:
        changed = any(not torch.equal(a, b) for a, b in zip(before[role], team.trainable_parameters(role), strict=True))
        assert changed == (role == "math"), role


def test_update_epochs_take_that_many_clipped_steps_on_one_batch(sft_run, tmp_path):
    from types import SimpleNamespace

    team = _team(sft_run)
    opts = rl.make_optimizers(team, 1e-2)
    state = SimpleNamespace(team=team, optimizers=opts, reference=None, frozen=frozenset(), micro_batch_size=None)
    group = rl.Group("math", [1.0, 0.0, 1.0, 0.0], _samples(team, "math"))
    cfg = _cfg(GRPOConfig, sft_run, tmp_path, update_epochs=3, beta=0.0, temperature=1.0)
    stats = rl.update_selected(state, [group], cfg)
    adam = next(iter(opts["math"].state.values()))
    assert int(adam["step"]) == 3  # three optimiser steps on the same samples
    assert stats["math"]["ratio_mean"] != 1.0  # the later passes saw the moved policy against the sampling one
    with pytest.raises(ValueError, match="update_epochs"):
        _cfg(GRPOConfig, sft_run, tmp_path, update_epochs=0)


def test_a_frozen_role_is_never_updated_whatever_its_samples(sft_run, tmp_path):
    """``RunState.frozen`` (a customer the team plays, without ``train_customer``): :func:`rl.update_roles` skips
    the role, while the others of the same step train."""
    from types import SimpleNamespace

    team = _team(sft_run)
    opts = rl.make_optimizers(team, 1e-2)
    state = SimpleNamespace(team=team, optimizers=opts, reference=None, frozen=frozenset({"qa"}), micro_batch_size=None)
    before = {r: [p.detach().clone() for p in team.trainable_parameters(r)] for r in ("qa", "math")}
    groups = [rl.Group(r, [1.0, 0.0, 1.0, 0.0], _samples(team, r)) for r in ("qa", "math")]
    stats = rl.update_selected(state, groups, _cfg(GRPOConfig, sft_run, tmp_path, beta=0.0, temperature=1.0))
    assert set(stats) == {"math"}
    assert all(torch.equal(a, b) for a, b in zip(before["qa"], team.trainable_parameters("qa"), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(before["math"], team.trainable_parameters("math"), strict=True))


def test_reference_policy_swaps_its_weights_in_and_restores_the_current_ones(sft_run):
    team = _team(sft_run)
    ref = rl.ReferencePolicy(team, ["math"])
    params = team.trainable_parameters("math")
    with torch.no_grad():
        for p in params:
            p.add_(0.5)  # training moved the weights away from the reference
    current = [p.detach().clone() for p in params]
    samples = _samples(team, "math")
    prompts, completions = [s.prompt_ids for s in samples], [s.completion_ids for s in samples]
    with torch.no_grad():
        moved = team.logprobs("math", prompts, completions, 1.0)
        with ref.active(team, "math"):
            assert all(torch.equal(p, w) for p, w in zip(params, ref.weights["math"], strict=True))
            old = team.logprobs("math", prompts, completions, 1.0)
        again = team.logprobs("math", prompts, completions, 1.0)
    assert all(torch.equal(p, c) for p, c in zip(team.trainable_parameters("math"), current, strict=True))
    assert not all(torch.allclose(a, b) for a, b in zip(moved, old, strict=True))  # the reference was used
    assert all(torch.equal(a, b) for a, b in zip(moved, again, strict=True))  # and the current weights are back
    assert [p is q for p, q in zip(params, team.trainable_parameters("math"), strict=True)] == [True] * len(params)


def test_zero_variance_empty_and_failed_batches_give_finite_updates(sft_run):
    team = _team(sft_run)
    opts = rl.make_optimizers(team, 1e-2)
    ref = rl.ReferencePolicy(team, team.roles)
    cfg = rl.UpdateConfig(beta=0.1)
    samples = _samples(team, "qa")
    flat = rl.advantages_of([rl.Group("qa", [-0.2] * 4, samples)])[0]  # all failed: same reward
    assert flat == [0.0] * 4
    stats = rl.policy_update(team, "qa", opts["qa"], samples, flat, cfg, ref)
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values())
    assert rl.policy_update(team, "qa", opts["qa"], [], [], cfg, ref)["samples"] == 0
    for p in team.trainable_parameters("qa"):
        assert torch.isfinite(p).all()


# ----------------------------------------------------------------------------------- sampling cost
def test_node_wise_sampling_is_linear_in_nodes(sft_run, tmp_path, monkeypatch):
    import joy_trainers.joyagents_grpo as module

    cfg = _cfg(JoyAgentsGRPOConfig, sft_run, tmp_path, group_size=3, max_nodes=3, memory=False)
    trainer = JoyAgentsGRPOTrainer(cfg)
    trainer.claim_run_dir()
    state = trainer.start_state()
    made, make = [], module.make_sampler

    def counted(*args, **kwargs):
        made.append(make(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(module, "make_sampler", counted)
    groups, initial, finished = trainer.node_groups(state, state.batch_tasks(0, 2))
    # one sampler served the step's three phases: the episodes, the node samples and the continuations
    (sampler,) = made
    assert sampler.stats.samples == sum(len(t.nodes) for t in initial + finished)
    nodes = sum(min(len(t.nodes), cfg.max_nodes) for t in initial)
    assert nodes >= 2
    assert len(groups) == nodes and len(finished) == cfg.group_size * nodes  # sum_i G, not G ** N
    for g, traj_nodes in zip(groups, [n for t in initial for n in t.nodes[: cfg.max_nodes]], strict=True):
        assert g.role == traj_nodes.role and len(g.rewards) == cfg.group_size
    for k, g in enumerate(groups):  # each branch starts with its sampled action
        for j, s in enumerate(g.samples):
            assert finished[k * cfg.group_size + j].nodes[0].completion_ids == s.completion_ids


# ------------------------------------------------------------------------------- full small runs
def _read_rows(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.mark.parametrize(
    "trainer_cls,cfg_cls,extra",
    [
        (JoyAgentsGRPOTrainer, JoyAgentsGRPOConfig, {"top_k": 2}),
        (JoyAgentsGRPOTrainer, JoyAgentsGRPOConfig, {"sampling": "trajectory", "memory": False, "top_k": "all"}),
        (GRPOTrainer, GRPOConfig, {}),
    ],
)
def test_small_run_writes_metrics_checkpoints_and_results(
    sft_run, tmp_path, trainer_cls, cfg_cls, extra, undocumented_metrics
):
    out = tmp_path / "run"
    results = trainer_cls(_cfg(cfg_cls, sft_run, out, **extra)).train()
    assert results["steps"] == 2 and results["generated_tokens"] > 0
    rows = _read_rows(out)
    assert [r["step"] for r in rows] == [1, 2]
    assert undocumented_metrics(trainer_cls.name, rows) == []  # docs/trainers/<name>.md lists every key
    for r in rows:
        assert r["groups/selected"] <= r["groups/total"]
        for key in ("charts/reward_mean", "losses/policy_loss", "losses/kl", "time/rollout_s", "time/update_s"):
            assert key in r and r[key] == r[key]  # present and not NaN
    assert (out / "results.json").is_file() and (out / "reward_curve.png").is_file()
    assert (out / "team" / "team.json").is_file() and rl.latest_checkpoint(out / "checkpoints").name == "step-2"


def test_a_run_loads_its_team_in_the_dtype_it_asks_for_and_says_so(sft_run, tmp_path, capsys):
    out = tmp_path / "run"
    results = GRPOTrainer(_cfg(GRPOConfig, sft_run, out, steps_per_iteration=1, dtype="bfloat16")).train()
    assert results["steps"] == 1
    assert "[rl] the team's dtype: bfloat16 (set)" in capsys.readouterr().out
    row = _read_rows(out)[0]
    assert row["losses/policy_loss"] == row["losses/policy_loss"]  # a bfloat16 base trains its float32 adapters
    saved = json.loads((out / "team" / "team.json").read_text())["config"]
    assert saved["dtype"] == "bfloat16"  # a resumed or evaluated team is loaded as it ran
    assert json.loads((Path(sft_run) / "team" / "team.json").read_text())["config"]["dtype"] == "auto"  # untouched


def test_token_budget_stops_at_the_first_step_that_reaches_it(sft_run, tmp_path):
    first = GRPOTrainer(_cfg(GRPOConfig, sft_run, tmp_path / "one", steps_per_iteration=1)).train()
    per_step = first["generated_tokens"]
    assert per_step > 0
    out = tmp_path / "budget"
    cfg = _cfg(
        GRPOConfig,
        sft_run,
        out,
        steps_per_iteration=50,
        checkpoint_every=50,
        token_budget=per_step + 1,
        eval_tasks=2,
        eval_baseline=False,
    )
    results = GRPOTrainer(cfg).train()
    rows = _read_rows(out)
    assert 2 <= results["steps"] == len(rows) < 50  # needed more than one step's tokens, then stopped
    assert results["generated_tokens"] >= per_step + 1
    assert rows[-2]["charts/tokens_generated_total"] < per_step + 1  # it did not stop later than needed
    assert rl.latest_checkpoint(out / "checkpoints").name == f"step-{results['steps']}"
    assert results["baseline_metrics"] is None and results["metrics"]["episodes"] == 2
    with pytest.raises(ValueError, match="token_budget"):
        _cfg(GRPOConfig, sft_run, out, token_budget=-1)


def test_checkpoint_round_trip_restores_weights_optimiser_and_rng(sft_run, tmp_path):
    team = _team(sft_run)
    opts = rl.make_optimizers(team, 1e-2)
    rl.policy_update(team, "math", opts["math"], _samples(team, "math"), [1.0, -1.0, 0.5, -0.5], rl.UpdateConfig())
    rl.save_checkpoint(tmp_path / "ck", 7, team, opts, {"note": "x"})
    expected_next = torch.rand(3)
    weights = [p.detach().clone() for p in team.trainable_parameters("math")]
    other = _team(sft_run)
    other_opts = rl.make_optimizers(other, 1e-2)
    state = rl.load_checkpoint(rl.latest_checkpoint(tmp_path / "ck"), other, other_opts)
    assert state["step"] == 7 and state["note"] == "x"
    assert torch.equal(torch.rand(3), expected_next)  # RNG restored to the checkpoint's state
    for a, b in zip(weights, other.trainable_parameters("math"), strict=True):
        assert torch.equal(a, b)
    assert other_opts["math"].state_dict()["state"].keys() == opts["math"].state_dict()["state"].keys()
    assert not list((tmp_path / "ck").glob(".joy-tmp-*"))


def test_checkpoints_keep_only_the_latest_ones(sft_run, tmp_path):
    team = _team(sft_run)
    opts = rl.make_optimizers(team, 1e-2)
    for step in (1, 2, 3):
        rl.save_checkpoint(tmp_path, step, team, opts, {}, keep=2)
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-2", "step-3"]
    assert (tmp_path / "latest").read_text() == "step-3"


def _train_cmd(sft_run, out, steps):
    sets = {**SMALL_RL, "sft_run": sft_run, "steps_per_iteration": steps, "memory": True}
    cmd = [sys.executable, "-m", "joy_trainers.cli", "--trainer", "joyagents_grpo", "--output-dir", str(out)]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={json.dumps(v)}"]
    return cmd


def test_sigkill_after_a_checkpoint_then_resume_finishes(sft_run, tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": REPO}
    proc = subprocess.Popen(_train_cmd(sft_run, out, 4), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while time.time() < deadline and not (out / "checkpoints" / "step-2").is_dir():
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for ck in (out / "checkpoints").glob("step-*"):  # whatever exists is complete
        for name in ("state.json", "optimizers.pt", "rng.json", "team/team.json"):
            assert (ck / name).is_file(), f"{ck.name} lacks {name}"
    done = subprocess.run(_train_cmd(sft_run, out, 4) + ["--resume"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["steps"] == 4
    assert [r["step"] for r in _read_rows(out)] == [1, 2, 3, 4]


def test_two_processes_end_each_step_with_identical_parameters(sft_run, tmp_path):
    if shutil.which("accelerate") is None:
        pytest.skip("accelerate launcher not on PATH")
    out = tmp_path / "dist"
    script = os.path.join(REPO, "tests", "dist_rl_steps.py")
    cmd = [*TWO_PROCESSES, script, sft_run, str(out)]
    env = {**os.environ, "PYTHONPATH": REPO, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    digests = [json.loads((out / f"params-rank{r}.json").read_text()) for r in (0, 1)]
    assert digests[0]["steps"] == digests[1]["steps"] == 2
    assert digests[0]["tasks_drawn"] == digests[1]["tasks_drawn"] == 2 * 2 * 4  # 2 steps x max_draws x 4 tasks
    assert digests[0]["tasks"] != digests[1]["tasks"]  # each rank rolled out its own share
    assert digests[0]["after_steps"] == digests[1]["after_steps"]
    assert digests[0]["samples"] != digests[1]["samples"]  # the extra update saw different data per rank
    assert digests[0]["params"] == digests[1]["params"]
    assert digests[0]["params"] != digests[0]["initial"]  # and the update did change the weights


def test_the_progress_bar_draws_its_last_line_once():
    import io

    from tqdm import tqdm

    sink = io.StringIO()
    state = rl.RunState(
        config=GRPOConfig(steps_per_iteration=3, iterations=1),
        settings=GenerationSettings(),
        team=None,
        optimizers={},
        banks={},
        engine=None,
        log=None,
        rl_tasks=[],
        accelerator=None,
    )
    state.bar = tqdm(total=3, file=sink, mininterval=0, desc="run")
    for step in range(3):
        state.progress({"charts/tokens_generated": 10, "charts/reward_mean": 0.5 + step, "groups/selected": step})
    state.bar.close()  # finish() closes it again: nothing more is drawn
    drawn = sink.getvalue()
    assert drawn.count("3/3") == 1 and "reward=2.500" in drawn  # the last step's reward on its own line
