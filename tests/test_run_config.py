"""The options every trainer shares (``RunConfig``), the generation settings built from them, the rename of
the SFT token cap, and the options the automatic SFT run takes from its RL run."""

from __future__ import annotations

import dataclasses
import types

import pytest

import joy_env
from joy_agents.sampling import settings as sampling_settings
from joy_agents.sampling.settings import ENGINES, GenerationSettings, VLLMConfig
from joy_env.protocol import TURN_STOP
from joy_trainers.base import BaseTrainer
from joy_trainers.cli import build_config, eval_main
from joy_trainers.errors import UsageError
from joy_trainers.grpo import GRPOConfig, GRPOTrainer
from joy_trainers.resume_config import resume_changes
from joy_trainers.rl import RLConfig, RLTrainer
from joy_trainers.rl.start import auto_sft_overrides, sft_cache_key, tiny_sft_values
from joy_trainers.run_config import RunConfig
from joy_trainers.sft import SFTConfig, SFTTrainer


def test_sft_and_rl_configs_extend_one_base_and_trainers_one_skeleton():
    assert issubclass(SFTConfig, RunConfig) and issubclass(RLConfig, RunConfig)
    assert issubclass(SFTTrainer, BaseTrainer) and issubclass(RLTrainer, BaseTrainer)
    shared = {f.name for f in dataclasses.fields(RunConfig)}
    assert shared <= {f.name for f in dataclasses.fields(SFTConfig)} & {f.name for f in dataclasses.fields(RLConfig)}
    assert "rollout_engine" in shared and "max_new_tokens" in shared
    assert "rollout_engine" not in RLConfig.RESUME_SAFE  # it changes the sampling


@pytest.mark.parametrize("config", [SFTConfig, GRPOConfig])
def test_rollout_engine_is_checked_with_a_one_line_error(config, monkeypatch):
    monkeypatch.setattr(sampling_settings, "vllm_available", lambda: True)  # installed or not (see below)
    for engine in ENGINES:
        assert config(rollout_engine=engine).rollout_engine == engine
    with pytest.raises(ValueError, match=r"rollout_engine must be one of continuous, generate, vllm, got 'fast'"):
        config(rollout_engine="fast")


def test_rollout_engine_on_the_command_line():
    assert build_config(GRPOTrainer, "tiny", None, ["rollout_engine=generate"]).rollout_engine == "generate"
    with pytest.raises(UsageError, match="rollout_engine"):
        build_config(SFTTrainer, "tiny", None, ["rollout_engine=fast"])


def _evaluation_settings(monkeypatch, cfg):
    """The generation settings a run's evaluation (``evaluate_config``) plays its episodes with."""
    from joy_trainers import evaluation

    seen = {}

    class Engine:
        def __init__(self, team, env_id, split, seed, config, **kw):
            seen["config"] = config
            self.prototype = type("P", (), {"num_tasks": 0})

        def run(self, starts):
            return []

    monkeypatch.setattr(evaluation, "RolloutEngine", Engine)
    monkeypatch.setattr(evaluation, "summarize", lambda trajectories: {})
    evaluation.evaluate_config(None, cfg, seed=0, tasks=1)
    return seen["config"].generation


def test_draft_tokens_reach_every_rollout_and_evaluation(monkeypatch):
    cfg = build_config(GRPOTrainer, "tiny", None, ["draft_tokens=5"])
    assert cfg.draft_tokens == 5 and "draft_tokens" in RLConfig.RESUME_SAFE  # the same samples, in fewer forwards
    assert cfg.generation_settings().draft_tokens == 5
    assert GRPOConfig().generation_settings().draft_tokens == GenerationSettings().draft_tokens == 3  # one default
    assert _evaluation_settings(monkeypatch, cfg).draft_tokens == 5
    with pytest.raises(UsageError, match="draft_tokens"):
        build_config(SFTTrainer, "tiny", None, ["draft_tokens=-1"])


def test_draft_max_rows_reach_every_rollout_and_evaluation(monkeypatch):
    cfg = build_config(GRPOTrainer, "tiny", None, ["draft_max_rows=8"])
    assert cfg.draft_max_rows == 8 and "draft_max_rows" in RLConfig.RESUME_SAFE
    assert cfg.generation_settings().draft_max_rows == 8
    assert GRPOConfig().generation_settings().draft_max_rows == GenerationSettings().draft_max_rows == 64
    assert _evaluation_settings(monkeypatch, cfg).draft_max_rows == 8
    with pytest.raises(UsageError, match="draft_max_rows"):
        build_config(SFTTrainer, "tiny", None, ["draft_max_rows=0"])


def test_vllm_options_build_the_vllm_engine_of_rollouts_and_evaluations(monkeypatch):
    cfg = build_config(GRPOTrainer, "tiny", None, ['vllm_options={"gpu_memory_utilization": 0.55, "seed": 3}'])
    assert cfg.vllm_options == {"gpu_memory_utilization": 0.55, "seed": 3}
    vllm = cfg.generation_settings().vllm
    assert vllm == VLLMConfig(gpu_memory_utilization=0.55, seed=3)
    assert GRPOConfig().generation_settings().vllm == VLLMConfig()
    assert _evaluation_settings(monkeypatch, cfg).vllm == vllm
    with pytest.raises(UsageError, match=r"vllm_options: unknown vLLM option\(s\) \['gpu_memory'\]; valid: "):
        build_config(GRPOTrainer, "tiny", None, ['vllm_options={"gpu_memory": 0.5}'])
    with pytest.raises(UsageError, match=r"vllm_options: VLLMConfig.gpu_memory_utilization must be in \(0, 1\]"):
        build_config(SFTTrainer, "tiny", None, ['vllm_options={"gpu_memory_utilization": 2}'])


def test_joy_eval_draft_tokens_are_checked(capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        eval_main([str(tmp_path), "--draft-tokens", "-2"])
    assert exc.value.code == 2 and "--draft-tokens" in capsys.readouterr().err


def test_joy_eval_engine_choices(capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        eval_main([str(tmp_path), "--engine", "fast"])
    assert exc.value.code == 2 and "--engine" in capsys.readouterr().err


def test_generation_settings_come_from_one_builder():
    cfg = GRPOConfig(max_new_tokens=40, max_cycles=5, max_prompt_tokens=300, rollout_engine="generate")
    settings = cfg.generation_settings()
    assert settings == GenerationSettings(max_new_tokens=40, max_cycles=5, max_prompt_tokens=300, engine="generate")
    sampling = settings.sampling(1.2, 0.9)
    assert (sampling.temperature, sampling.top_p, sampling.max_new_tokens, sampling.stop) == (1.2, 0.9, 40, TURN_STOP)
    greedy = settings.sampling()
    assert greedy.temperature == 0.0 and greedy.stop == TURN_STOP
    sft = SFTConfig(max_new_tokens=96, eval_max_cycles=12, max_length=512)
    limits = sft.generation_settings()  # prompts cut to the view it trained on
    assert (limits.max_new_tokens, limits.max_cycles, limits.max_prompt_tokens) == (96, 12, 416)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.max_new_tokens = 1  # one frozen object, passed whole


def test_the_old_sft_token_cap_name_still_reads_for_one_release():
    with pytest.warns(FutureWarning, match="eval_max_new_tokens is now called max_new_tokens"):
        cfg = SFTConfig.from_dict({"eval_max_new_tokens": 50})
    assert cfg.max_new_tokens == 50
    with pytest.warns(FutureWarning):  # a --set of the old name overrides the preset's new one
        assert build_config(SFTTrainer, "tiny", None, ["eval_max_new_tokens=40"]).max_new_tokens == 40


def test_the_automatic_sft_run_gets_the_rl_runs_env():
    cfg = GRPOConfig(
        env_id="joy/ecommerce-v0",
        env_kwargs={"source": "tau2"},
        rollout_engine="generate",
        draft_tokens=0,
        draft_max_rows=8,
    )
    assert auto_sft_overrides(cfg) == {
        "env_id": "joy/ecommerce-v0",
        "env_kwargs": {"source": "tau2"},
        "train_customer": False,
        "rollout_engine": "generate",
        "draft_tokens": 0,
        "draft_max_rows": 8,
        "vllm_options": {},
    }
    mine = GRPOConfig(env_kwargs={}, sft_overrides={"env_id": "joy/qa-v0", "sft_tasks": 5})
    assert auto_sft_overrides(mine)["env_id"] == "joy/qa-v0" and auto_sft_overrides(mine)["sft_tasks"] == 5


def test_train_customer_is_shared_refused_on_resume_and_freezes_only_a_customer_the_team_plays():
    assert "train_customer" in {f.name for f in dataclasses.fields(RunConfig)}
    refused, _ = resume_changes({"train_customer": False}, {"train_customer": True}, RLConfig.RESUME_SAFE)
    assert refused == ["train_customer: false -> true"]
    team_customer = types.SimpleNamespace(customer="customer", possible_agents=[*joy_env.AGENTS, "customer"])
    env_customer = types.SimpleNamespace(customer="customer", possible_agents=list(joy_env.AGENTS))  # scripted
    assert GRPOConfig().frozen_roles(team_customer) == {"customer"} == SFTConfig().frozen_roles(team_customer)
    assert GRPOConfig(train_customer=True).frozen_roles(team_customer) == frozenset()
    assert GRPOConfig().frozen_roles(env_customer) == frozenset() == GRPOConfig().frozen_roles(joy_env.make())
    assert auto_sft_overrides(GRPOConfig(train_customer=True))["train_customer"] is True
    # a frozen customer (the default) keeps the cache keys of the automatic SFT teams made before the option
    values = tiny_sft_values("tiny-base", 0)
    frozen, trained = ({**values, "train_customer": flag} for flag in (False, True))
    assert sft_cache_key(values) == sft_cache_key(frozen) != sft_cache_key(trained)


def test_the_documented_supervised_plugin_shape_writes_its_results(tmp_path, tiny_dir):
    from joy_agents.policy import TeamConfig, TeamPolicy
    from joy_trainers import base
    from joy_trainers.run_config import RunConfig

    class Mine(base.BaseTrainer):  # the README's MySupervised, evaluation left out
        name = "mine"

        def run_training(self) -> base.Trained:
            team = TeamPolicy(TeamConfig(model=str(tiny_dir), lora_r=2, lora_alpha=4))
            return base.Trained(team=team, steps=100)

    results = Mine(RunConfig(output_dir=str(tmp_path / "run"), eval_tasks=0)).train()
    assert results["model"] == "tiny-base" and results["wall_s"] >= 0
    assert results["steps"] == 100 and results["processes"] == 1
    assert "model `tiny-base`" in (tmp_path / "run" / "results.md").read_text()
    assert (tmp_path / "run" / "team" / "team.json").is_file()


def test_rollout_engine_vllm_without_vllm_is_refused_before_any_work(monkeypatch):
    from joy_trainers.run_config import RunConfig

    monkeypatch.setattr(sampling_settings, "vllm_available", lambda: False)
    with pytest.raises(ValueError, match=r"rollout_engine=vllm needs vLLM.*joyagents\[vllm\]"):
        RunConfig(rollout_engine="vllm")
    monkeypatch.setattr(sampling_settings, "vllm_available", lambda: True)
    assert RunConfig(rollout_engine="vllm").rollout_engine == "vllm"
