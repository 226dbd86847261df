"""Every option checked when the config is built: each numeric option of each trainer's config is walked with
zero and negative values, and the CLI refuses them in one line before any model load or evaluation."""

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
    },
    RLConfig: {"seed", "data_seed", "partial_credit", "beta", "eval_tasks", "token_budget"},
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
    with pytest.raises(ValueError, match="batch_size=2.5 is out of range: valid values are an integer >= 1"):
        SFTConfig(batch_size=2.5)  # built in Python, past the CLI's type check
    with pytest.raises(ValueError, match="max_new_tokens=128 leaves no prompt within max_length=100"):
        SFTConfig(max_length=100)
    with pytest.raises(ValueError, match="top_k='some' is out of range: valid values are an integer >= 1 or 'all'"):
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
