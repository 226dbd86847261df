"""Every option checked when the config is built: each numeric option of each trainer's config is walked with
zero, negative and absurdly large values, and the CLI refuses them in one line before any model load or
evaluation; sizes within range but beyond the model (its width, its context, the memory there is) and dict
options that do not fit the others are refused in one line before any work too."""

from __future__ import annotations

import dataclasses
import time
import types
import typing

import pytest

from joy_trainers.cli import train_main
from joy_trainers.grpo import GRPOConfig
from joy_trainers.joyagents_grpo import JoyAgentsGRPOConfig
from joy_trainers.mappo import MAPPOConfig
from joy_trainers.rl.config import RLConfig
from joy_trainers.run_config import RunConfig
from joy_trainers.sft import SFTConfig

CONFIGS = (SFTConfig, RLConfig, GRPOConfig, JoyAgentsGRPOConfig, MAPPOConfig)

ZERO_IS_VALID = {
    RunConfig: {"draft_tokens"},
    SFTConfig: {
        "seed",
        "rl_fraction",
        "recovery_rate",
        "entity_swap",
        "base_epochs",
        "adapter_epochs",
        "batch_tokens",
        "warmup_ratio",
        "eval_tasks",
        "checkpoint_steps",
    },
    RLConfig: {
        "seed",
        "data_seed",
        "partial_credit",
        "beta",
        "eval_tasks",
        "token_budget",
        "min_reward_spread",
        "groups_per_step",
    },
    JoyAgentsGRPOConfig: {"initial_temperature", "continuation_temperature", "memory_min_similarity"},
    MAPPOConfig: {"gamma", "gae_lambda"},
}
"""Options where 0 means something (none, skip, greedy, the first seed); every other numeric option refuses 0."""


def _zero_ok(cls: type) -> set[str]:
    return set().union(*(ZERO_IS_VALID.get(klass, set()) for klass in cls.__mro__))


def _numeric_fields(cls: type) -> list[str]:
    hints = typing.get_type_hints(cls)

    def numeric(kind: typing.Any) -> bool:
        if typing.get_origin(kind) in (typing.Union, types.UnionType):
            return any(numeric(k) for k in typing.get_args(kind))
        return kind in (int, float)

    return [f.name for f in dataclasses.fields(cls) if numeric(hints[f.name])]


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda c: c.__name__)
def test_every_numeric_option_refuses_zero_and_negative_values_unless_zero_means_something(cls):
    names = _numeric_fields(cls)
    assert names and set(names) <= set(cls.RANGES), f"options without a declared range: {set(names) - set(cls.RANGES)}"
    assert _zero_ok(cls) <= set(names)
    for name in names:
        with pytest.raises(ValueError, match=rf"option {name}=-1 is out of range: valid values are .*--set {name}="):
            cls.from_dict({name: -1})
        with pytest.raises(ValueError, match=rf"option {name}[= ]"):  # out of range, or not an integer
            cls.from_dict({name: -0.5})
        if name in _zero_ok(cls):
            cls.from_dict({name: 0})
        else:
            with pytest.raises(ValueError, match=rf"option {name}=0 is out of range"):
                cls.from_dict({name: 0})


def test_cross_field_and_type_checks_name_the_options():
    with pytest.raises(
        ValueError, match=r"batch_size=2.5 is out of range: valid values are an integer in \[1, 1000000\]"
    ):
        SFTConfig(batch_size=2.5)  # built in Python, past the CLI's type check
    with pytest.raises(ValueError, match="max_new_tokens=128 leaves no prompt within max_length=100"):
        SFTConfig(max_length=100)
    with pytest.raises(
        ValueError, match=r"top_k='some' is out of range: valid values are an integer in \[1, 1000000\] or 'all'"
    ):
        JoyAgentsGRPOConfig(top_k="some")
    with pytest.raises(ValueError, match="domain_weights"):
        SFTConfig(domain_weights={"math": -1.0})
    assert JoyAgentsGRPOConfig(top_k="all").top_k == "all" and MAPPOConfig(value_clip=None).value_clip is None


@pytest.mark.parametrize(
    "trainer,option",
    [
        ("sft", "batch_size=0"),
        ("sft", "lora_r=0"),
        ("sft", "max_length=-1"),
        ("sft", "adapter_lr=-1"),
        ("sft", "eval_tasks=-1"),
        ("grpo", "eval_tasks=-1"),
        ("joyagents_grpo", "max_nodes=0"),
        ("mappo", "critic_max_tokens=0"),
    ],
)
def test_the_cli_refuses_an_out_of_range_option_in_one_line_before_any_work(trainer, option, capsys, tmp_path):
    started = time.perf_counter()
    with pytest.raises(SystemExit) as exit_:
        train_main(["--trainer", trainer, "--preset", "tiny", "--set", option, "--output-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    name, _, value = option.partition("=")
    assert exit_.value.code == 2 and len(err) == 1, err
    assert f"option {name}={value} is out of range: valid values are" in err[0]
    assert time.perf_counter() - started < 10 and not (tmp_path / "r").exists()  # nothing loaded, nothing written


def test_non_finite_and_huge_values_are_refused_in_one_line():
    for text in ("lr=1.0e999", "lr=nan", "temperature=-inf"):
        name, value = text.split("=")
        with pytest.raises(ValueError, match=f"option {name}="):
            GRPOConfig.from_dict({name: float(value)})
    with pytest.raises(ValueError, match="option eval_tasks="):
        GRPOConfig.from_dict({"eval_tasks": -(10**400)})


HUGE = (10**20, 99999999999, 1e20)
"""Absurdly large values: each one a refusal in one line, not an evaluation then a traceback."""
TRAINERS = {"sft": SFTConfig, "grpo": GRPOConfig, "joyagents_grpo": JoyAgentsGRPOConfig, "mappo": MAPPOConfig}


@pytest.fixture
def no_work(monkeypatch):
    """Fail a test that lets a run claim its directory or evaluate (the first long work) instead of refusing."""
    from joy_trainers import evaluation
    from joy_trainers.rundir import RunDir

    def work(*args, **kwargs):
        raise AssertionError("the run started its work instead of refusing")

    monkeypatch.setattr(RunDir, "claim", work)
    monkeypatch.setattr(evaluation, "evaluate_team", work)


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda c: c.__name__)
def test_every_numeric_option_refuses_absurdly_large_values(cls):
    for name in _numeric_fields(cls):
        for value in HUGE:
            with pytest.raises(
                ValueError, match=rf"option {name}(=.* is out of range: valid values are | expects).*--set {name}="
            ):
                cls.from_dict({name: value})


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_the_cli_refuses_every_absurdly_large_option_in_one_line_at_once(trainer, capsys, tmp_path, no_work):
    for name in _numeric_fields(TRAINERS[trainer]):
        for value in ("99999999999", "99999999999999999999999"):
            started = time.perf_counter()
            with pytest.raises(SystemExit) as exit_:
                train_main(["--trainer", trainer, "--set", f"{name}={value}", "--output-dir", str(tmp_path / "r")])
            err = capsys.readouterr().err.strip().splitlines()
            assert exit_.value.code == 2 and len(err) == 1 and f"option {name}={value} is out of range" in err[0], err
            assert time.perf_counter() - started < 5 and not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "trainer,option,said",
    [
        ("sft", "lora_r=5000", "lora_r=5000 is above the width of tiny-base (hidden_size 128)"),
        ("sft", "max_length=100000", "max_length=100000 is above the context of tiny-base (max_position_embeddings"),
        ("sft", "batch_size=1000000", "batch_size=1000000 rows of max_length=512 (512000000 tokens per forward) need"),
        ("sft", "batch_tokens=16000000", "batch_tokens=16000000 (16000000 tokens per forward) need at least"),
        ("grpo", "max_prompt_tokens=100000", "max_prompt_tokens=100000 + max_new_tokens=96 = 100096 tokens per turn"),
        ("grpo", "micro_batch_size=1000000", "micro_batch_size=1000000 sequences of up to"),
        ("grpo", "tasks_per_step=1000000", "tasks_per_step=1000000 x group_size=5 = 5000000 samples"),
        ("joyagents_grpo", 'sft_overrides={"lora_r": 5000}', "sft_overrides: lora_r=5000 is above the width"),
        ("mappo", "critic_max_tokens=1000000", "critic_max_tokens=1000000 is above the context of tiny-base"),
        ("sft", 'domain_weights={"nosuch": 1}', "domain_weights {'nosuch': 1} names unknown domain(s) ['nosuch']"),
        ("grpo", 'sft_overrides={"domain_weights": {"nosuch": 1}}', "sft_overrides: domain_weights {'nosuch'"),
        (
            "sft",
            'domain_weights={"math": 0, "qa": 0, "general": 0, "ecommerce": 0, "collaborative": 0}',
            "give every domain weight 0, which leaves no task to train on",
        ),
    ],
)
def test_sizes_beyond_the_model_or_the_memory_and_unfit_dict_options_are_one_line_before_any_work(
    trainer, option, said, capsys, tmp_path, no_work
):
    with pytest.raises(SystemExit) as exit_:
        train_main(["--trainer", trainer, "--preset", "tiny", "--set", option, "--output-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and said in err[0], err
    assert not (tmp_path / "r").exists()
