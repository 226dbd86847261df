"""pass^k (tau2-bench's reliability metric) against hand-computed values, and the trials of ``evaluate_team`` and
``joy-eval --trials``: every task played n times, pass^1 .. pass^n overall and per domain, each trial reproducible
from the evaluation's seed."""

from __future__ import annotations

import json
import math
import shutil
import warnings
from fractions import Fraction
from types import SimpleNamespace

import pytest
import torch

from joy_agents.policy import TeamConfig, TeamPolicy
from joy_agents.rollout import Trajectory, summarize
from joy_agents.sampling.settings import GenerationSettings
from joy_trainers import evaluation
from joy_trainers.cli import eval_main
from joy_trainers.evaluation import evaluate_team, pass_hat_k, pass_hat_ks, trial_seed

T, F = True, False
SETTINGS = GenerationSettings(max_new_tokens=8, max_cycles=2, max_prompt_tokens=256)
"""Generation settings of the quick evaluations here."""


@pytest.fixture(scope="module")
def team(tiny_dir):
    return TeamPolicy(TeamConfig(model=str(tiny_dir), lora_r=2, lora_alpha=4))


def _evaluate(team, temperature=0.0, **kw):
    """Metrics of two tasks of the mixed env (of two domains), without the wall time."""
    settings = SETTINGS.replace(temperature=temperature)
    metrics = evaluate_team(team, "joy/mixed-v0", "test", 2, settings=settings, seed=0, **kw)
    assert metrics.pop("eval_wall_s") >= 0
    return metrics


# ------------------------------------------------------------------------------------ the formula
@pytest.mark.parametrize(
    "tasks, k, expected",
    [
        ([[T, T, F, F]], 2, Fraction(1, 6)),  # C(2, 2) / C(4, 2)
        ([[T, T, F, F]], 1, Fraction(1, 2)),
        ([[T, T, F, F]], 3, 0),  # fewer successes than k
        ([[T, T, T, T]], 4, 1),
        ([[T, T, T, T]], 2, 1),
        ([[F, F, F, F]], 1, 0),
        ([[T, T, T, F]], 2, Fraction(3, 6)),  # C(3, 2) / C(4, 2)
        ([[T, T, T, F]], 3, Fraction(1, 4)),  # C(3, 3) / C(4, 3)
        ([[T, T, F, F], [T, T, T, T], [F, F, F, F]], 2, (Fraction(1, 6) + 1 + 0) / 3),
        ([[T, F, T], [F, F, T]], 1, Fraction(3, 6)),  # pass^1: the success rate
        ([[T, F, T], [F, F, T]], 2, (Fraction(1, 3) + 0) / 2),  # C(2, 2) / C(3, 2)
        ([[T]], 1, 1),
        ([[1, 0, 1]], 2, Fraction(1, 3)),  # truthy values count as successes
    ],
)
def test_pass_hat_k_matches_hand_computed_values(tasks, k, expected):
    assert pass_hat_k(tasks, k) == float(expected)


def test_pass_hat_ks_gives_pass_1_to_pass_n_keyed_by_strings():
    tasks = [[T, T, F, F], [T, T, T, T], [F, T, F, F]]
    ks = pass_hat_ks(tasks)
    assert list(ks) == ["1", "2", "3", "4"]
    assert ks == {str(k): pass_hat_k(tasks, k) for k in range(1, 5)}
    assert ks["1"] == 7 / 12 and ks["2"] == (1 / 6 + 1 + 0) / 3 and ks["4"] == 1 / 3
    assert all(ks[str(k)] >= ks[str(k + 1)] for k in range(1, 4))
    assert pass_hat_ks([(T, F)]) == {"1": 0.5, "2": 0.0}  # tuples are sequences too


def test_pass_1_is_exactly_the_success_rate():
    tasks = [[T, F, F], [T, T, F], [F, F, F], [T, T, T], [F, T, F], [F, F, T], [T, F, T]]
    assert pass_hat_k(tasks, 1) == sum(map(sum, tasks)) / (len(tasks) * 3)


@pytest.mark.parametrize(
    "tasks, k, error, expected",
    [
        ([[T, F]], 0, ValueError, "k must be >= 1"),
        ([[T, F]], -1, ValueError, "k must be >= 1"),
        ([[T, F]], 3, ValueError, "at most the number of trials per task (2), got k=3"),
        ([[T, F], [T]], 1, ValueError, "same number of trials for pass^k; got trial counts [1, 2]"),
        ([], 1, ValueError, "at least one task"),
        ([[]], 1, ValueError, "at most the number of trials per task (0)"),
        ([[T, F]], 1.0, TypeError, "k must be an int, got 1.0"),
        ([[T, F]], True, TypeError, "k must be an int, got True"),
        ("TF", 1, TypeError, "sequence of tasks"),
    ],
)
def test_pass_hat_k_refuses_bad_arguments(tasks, k, error, expected):
    with pytest.raises(error) as exc:
        pass_hat_k(tasks, k)
    assert expected in str(exc.value) and "\n" not in str(exc.value)


def test_pass_hat_ks_refuses_no_tasks_and_uneven_or_empty_trials():
    for tasks, expected in (([], "at least one task"), ([[T], [T, F]], "trial counts [1, 2]"), ([[]], "0 trials")):
        with pytest.raises(ValueError) as exc:
            pass_hat_ks(tasks)
        assert expected in str(exc.value)


def test_trial_seeds_are_stable_and_distinct():
    seeds = {(s, t): trial_seed(s, t) for s in range(4) for t in range(8)}
    assert len(set(seeds.values())) == len(seeds) and all(0 <= v < 2**63 for v in seeds.values())
    assert trial_seed(0, 0) == seeds[0, 0] and trial_seed(3, 7) == seeds[3, 7]
    assert trial_seed(0, 0) == 6632167668669359241  # the same in every version: saved pass^k stay reproducible


# ------------------------------------------------------------------------------------ evaluate_team
class CoinEngine:
    """A rollout engine without a model: start ``i`` of a play succeeds when a draw of torch's generator falls
    under ``(i + 1) / 5``, so tasks differ in how often they succeed and each play's draws follow the seeding."""

    plays: list[list[Trajectory]] = []

    def __init__(self, policy, env_id, split, seed, config, **kwargs):
        self.prototype = SimpleNamespace(num_tasks=4)

    def run(self, starts):
        draws = torch.rand(len(starts)).tolist()
        play = [
            Trajectory(
                task_id=f"t{i}",
                domain="ab"[i % 2],
                nodes=[],
                result={"R": float(d), "success": d < (i + 1) / 5, "R_A": float(d < (i + 1) / 5), "nodes": []},
            )
            for i, d in zip(starts, draws, strict=True)
        ]
        CoinEngine.plays.append(play)
        return play


@pytest.fixture
def coins(monkeypatch):
    monkeypatch.setattr(evaluation, "RolloutEngine", CoinEngine)
    CoinEngine.plays = []
    return CoinEngine.plays


def test_pass_k_groups_each_tasks_trials_overall_and_per_domain(coins):
    rng = torch.get_rng_state()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # sampled trials do not warn
        metrics = evaluate_team(None, "joy/mixed-v0", "test", 9, trials=5, settings=GenerationSettings(temperature=1.0))
    assert torch.equal(torch.get_rng_state(), rng)  # the caller's generator is left as it was
    assert len(coins) == 5 and metrics["episodes"] == 4 * 5 and metrics["trials"] == 5
    successes = [[play[i].success for play in coins] for i in range(4)]
    assert metrics["pass_k"] == pass_hat_ks(successes) and list(metrics["pass_k"]) == ["1", "2", "3", "4", "5"]
    assert 0 < metrics["pass_k"]["1"] == metrics["success_rate"] and metrics["pass_k"]["1"] > metrics["pass_k"]["5"]
    for domain, tasks in (("a", [0, 2]), ("b", [1, 3])):
        entry = metrics["per_domain"][domain]
        assert entry["pass_k"] == pass_hat_ks([successes[i] for i in tasks]) and entry["n"] == 10
        assert entry["pass_k"]["1"] == entry["success_rate"]
    # each trial draws from its own (seed, trial) stream: the trials differ, and trial t draws the same whatever
    # the number of trials
    draws = [[t.reward for t in play] for play in coins]
    assert len({tuple(d) for d in draws}) == 5
    evaluate_team(None, "joy/mixed-v0", "test", 9, trials=2, settings=GenerationSettings(temperature=1.0))
    assert [[t.reward for t in play] for play in coins[5:]] == draws[:2]
    evaluate_team(None, "joy/mixed-v0", "test", 9, seed=1, settings=GenerationSettings(temperature=1.0))
    assert [t.reward for t in coins[7]] != draws[0]


def test_trials_on_the_tiny_model_are_sampled_and_reproducible(team, monkeypatch):
    played: list[list[Trajectory]] = []
    monkeypatch.setattr(evaluation, "summarize", lambda ts: played.append(list(ts)) or summarize(ts))
    metrics = _evaluate(team, trials=3, temperature=1.0)
    assert metrics["episodes"] == 2 * 3 and metrics["trials"] == 3
    assert list(metrics["pass_k"]) == ["1", "2", "3"] and metrics["pass_k"]["1"] == metrics["success_rate"]
    assert all(metrics["pass_k"][str(k)] >= metrics["pass_k"][str(k + 1)] for k in (1, 2))
    for entry in metrics["per_domain"].values():
        assert list(entry["pass_k"]) == ["1", "2", "3"] and entry["n"] % 3 == 0  # each task of it, three times
    tokens = [tuple(tuple(n.completion_ids) for n in t.nodes) for t in played[0]]
    assert [t.task_id for t in played[0]] == [t.task_id for t in played[0][:2]] * 3
    assert len({tokens[0], tokens[2], tokens[4]}) == 3  # task 0's three trials drew different tokens
    assert _evaluate(team, trials=3, temperature=1.0) == metrics  # and draw the same again
    assert [tuple(tuple(n.completion_ids) for n in t.nodes) for t in played[1]] == tokens


def test_one_trial_keeps_the_metrics_of_a_single_play(team):
    for metrics in (_evaluate(team), _evaluate(team, temperature=1.0)):
        assert "pass_k" not in metrics and "trials" not in metrics and metrics["episodes"] == 2
        assert all("pass_k" not in d for d in metrics["per_domain"].values())


def test_greedy_trials_warn_that_they_are_identical(team):
    with pytest.warns(UserWarning, match="greedy trials of a deterministic customer are identical"):
        metrics = _evaluate(team, trials=2)
    assert metrics["trials"] == 2 and metrics["episodes"] == 4
    assert metrics["pass_k"]["1"] == metrics["pass_k"]["2"] == metrics["success_rate"]


@pytest.mark.parametrize(
    "kw, expected",
    [
        ({"trials": 0}, "trials must be an int >= 1 (plays of each task), got 0"),
        ({"trials": 2.0}, "trials must be an int >= 1 (plays of each task), got 2.0"),
        ({"trials": True}, "got True"),
        ({"temperature": -0.5}, "temperature must be a number in [0, 100] (0: greedy), got -0.5"),
        ({"temperature": math.nan}, "got nan"),
        ({"temperature": math.inf}, "got inf"),
        ({"temperature": "1"}, "got '1'"),
    ],
)
def test_evaluate_team_refuses_bad_trials_and_temperatures(kw, expected):
    with pytest.raises(ValueError) as exc:
        if "temperature" in kw:  # refused by the settings
            GenerationSettings(**kw)
        else:
            evaluate_team(None, "joy/mixed-v0", "test", 1, **kw)  # refused before the team is used
    assert expected in str(exc.value) and "\n" not in str(exc.value)


# ------------------------------------------------------------------------------------ joy-eval
def test_joy_eval_trials_write_and_print_pass_k(sft_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(sft_run, run)
    config = {"max_new_tokens": 8, "max_cycles": 2, "max_prompt_tokens": 256, "eval_tasks": 2, "seed": 0}
    (run / "results.json").write_text(json.dumps({"trainer": "grpo", "env_id": "joy/math-v0", "config": config}))
    eval_main([str(run), "--trials", "2", "--temperature", "1"])
    out = capsys.readouterr().out
    record = json.loads((run / "eval-test.json").read_text())
    assert record["trials"] == 2 and record["temperature"] == 1.0
    metrics = record["metrics"]
    assert metrics["trials"] == 2 and metrics["episodes"] == 4 and list(metrics["pass_k"]) == ["1", "2"]
    assert list(metrics["per_domain"]["math"]["pass_k"]) == ["1", "2"]
    assert f"pass^1 {metrics['pass_k']['1']:.3f}" in out and "2 tasks x 2 trials at temperature 1" in out

    eval_main([str(run)])  # one greedy play: the record as before
    record = json.loads((run / "eval-test.json").read_text())
    assert set(record) == {"env_id", "env_kwargs", "split", "metrics"} and "pass_k" not in record["metrics"]
    assert "pass^" not in capsys.readouterr().out
