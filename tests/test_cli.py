"""joy-train / joy-eval argument handling (no training here)."""

import pytest

from joy_trainers import TRAINERS
from joy_trainers.cli import build_config, load_trainer, train_main
from joy_trainers.errors import UsageError
from joy_trainers.presets import SFT_PRESETS as PRESETS
from joy_trainers.sft import SFTConfig, SFTTrainer


def test_unknown_trainer_lists_installed_ones(capsys):
    with pytest.raises(UsageError, match="installed trainers: grpo, joyagents_grpo, mappo, .*sft"):
        load_trainer("ppo")
    with pytest.raises(SystemExit) as exit_:
        train_main(["--trainer", "nope"])
    assert exit_.value.code == 2 and "installed trainers" in capsys.readouterr().err


def test_registry_resolves_sft():
    assert TRAINERS["sft"] == "joy_trainers.sft:SFTTrainer"
    assert load_trainer("sft") is SFTTrainer


def test_registry_resolves_the_rl_trainers_and_their_tiny_presets():
    for name in ("grpo", "joyagents_grpo"):
        cls = load_trainer(name)
        assert cls.name == name
        cfg = build_config(cls, "tiny", None, ["seed=3"])
        assert cfg.seed == 3 and cfg.model == "tiny-base"


def test_resume_needs_a_checkpointing_trainer_and_a_run_directory(capsys, monkeypatch):
    from joy_trainers import cli
    from joy_trainers.base import BaseTrainer

    class NoCheckpoints(BaseTrainer):  # a plugin whose Config has no resume option
        name = "plain"

    monkeypatch.setattr(cli, "load_trainer", lambda name: NoCheckpoints if name == "plain" else load_trainer(name))
    for argv, message in (
        (["--trainer", "plain", "--resume", "--output-dir", "x"], "does not checkpoint"),
        (["--trainer", "sft", "--preset", "tiny", "--resume"], "--output-dir"),
        (["--trainer", "grpo", "--preset", "tiny", "--resume"], "--output-dir"),
    ):
        with pytest.raises(SystemExit) as exit_:
            train_main(argv)
        assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_config_layers_preset_file_and_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("eval_tasks: 7\nadapter_lr: 0.5\n")
    cfg = build_config(SFTTrainer, "tiny", str(path), ["adapter_lr=0.25", "env_id=joy/math-v0"])
    assert isinstance(cfg, SFTConfig)
    assert cfg.sft_tasks == PRESETS["tiny"]["sft_tasks"]  # from the preset
    assert cfg.eval_tasks == 7  # from the file
    assert cfg.adapter_lr == 0.25 and cfg.env_id == "joy/math-v0"  # overrides win


def test_config_errors_name_the_problem(tmp_path):
    with pytest.raises(UsageError, match="unknown SFTConfig option.*colour"):
        build_config(SFTTrainer, None, None, ["colour=red"])
    with pytest.raises(UsageError, match="unknown preset 'huge'"):
        build_config(SFTTrainer, "huge", None, [])
    with pytest.raises(UsageError, match="KEY=VALUE"):
        build_config(SFTTrainer, None, None, ["oops"])
    with pytest.raises(UsageError, match="rl_fraction"):
        build_config(SFTTrainer, None, None, ["rl_fraction=1.5"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a\n- b\n")
    with pytest.raises(UsageError, match="expected a mapping"):
        build_config(SFTTrainer, None, str(bad), [])


def test_shipped_yaml_configs_are_valid():
    import glob
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for trainer in ("sft", "grpo", "joyagents_grpo"):
        files = glob.glob(os.path.join(root, "examples", "configs", f"{trainer}_*.yaml"))
        assert files, trainer
        for f in files:
            cfg = build_config(load_trainer(trainer), None, f, [])
            assert cfg.model.startswith("Qwen/") or cfg.model == "smollm2-135m-instruct", f


@pytest.mark.parametrize("name", ["sft", "grpo", "joyagents_grpo", "mappo"])
def test_list_options_prints_every_field_with_its_default_and_doc(name, capsys):
    import dataclasses

    from joy_trainers.options import config_options

    train_main(["--trainer", name, "--list-options"])
    out = capsys.readouterr().out
    cls = load_trainer(name).config_class
    for f in dataclasses.fields(cls):
        assert f"\n{f.name} (" in out, f.name
    for option in config_options(cls):
        assert option.doc.split()[0] in out
    if name == "joyagents_grpo":
        assert "top_k (int | str, default 5)\n    Groups updated per step, by reward variance" in out
        assert "memory_reuse_similarity (float | None, default null)" in out


def test_field_docs_come_from_the_docstring_under_each_field_and_subclasses_win():
    from dataclasses import dataclass, field

    from joy_trainers.options import config_options, field_docs

    @dataclass
    class Base:
        a: int = 1
        """The a."""
        b: str = "x"

    @dataclass
    class Child(Base):
        a: int = 2
        """Another a,
        over two lines."""
        c: dict = field(default_factory=dict)

    assert field_docs(Child) == {"a": "Another a, over two lines."}
    options = {o.name: o for o in config_options(Child)}
    assert options["a"].default == 2 and options["b"].doc == "" and options["c"].default == {}


def test_generation_settings_of_runs_saved_before_they_had_a_generation_block():
    from joy_trainers.generation import saved_settings

    def limits(config):
        s = saved_settings({"config": config})
        return s.max_new_tokens, s.max_cycles, s.max_prompt_tokens

    sft = {"max_length": 512, "max_new_tokens": 96, "eval_max_cycles": 12}
    assert limits(sft) == (96, 12, 416)  # prompts cut to max_length - max_new_tokens
    old_sft = {"max_length": 512, "eval_max_new_tokens": 96, "eval_max_cycles": 12}  # saved before the rename
    assert limits(old_sft) == (96, 12, 416)
    assert SFTConfig.from_dict(sft).generation_settings() == saved_settings({"config": sft})
    rl = {"max_new_tokens": 64, "max_cycles": 8, "max_prompt_tokens": 300, "rollout_engine": "generate"}
    assert limits(rl) == (64, 8, 300) and saved_settings({"config": rl}).engine == "generate"
    with pytest.raises(ValueError, match="max_length"):
        saved_settings({"config": {"eval_max_new_tokens": 96}})


def test_yaml_numbers_written_as_text_are_read_as_numbers(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("adapter_lr: 5e-6\nsft_tasks: 12\n")  # YAML reads 5e-6 (no dot) as a string
    cfg = build_config(SFTTrainer, None, str(path), [])
    assert cfg.adapter_lr == 5e-6 and cfg.sft_tasks == 12
    with pytest.raises(UsageError, match="option sft_tasks expects an integer, got '12x'"):
        build_config(SFTTrainer, None, None, ["sft_tasks=12x"])


def test_joy_eval_uses_the_data_seed_a_run_trained_on():
    from joy_trainers.cli import data_seed_of

    assert data_seed_of({"seed": 2, "data_seed": 0}) == 0  # an RL run at seed 2 on the tasks of data seed 0
    assert data_seed_of({"seed": 3}) == 3  # an sft run: its seed is the data seed
    assert data_seed_of({}) == 0


def test_joy_eval_reads_memory_with_the_runs_memory_settings():
    from joy_trainers.cli import memory_config_of
    from joy_trainers.joyagents_grpo import JoyAgentsGRPOConfig, JoyAgentsGRPOTrainer

    saved = {"seed": 0, "memory_top_n": 3, "memory_min_similarity": 0.9, "memory_reuse_similarity": 0.95}
    got = memory_config_of(saved)
    assert (got.top_n, got.min_similarity, got.reuse_similarity) == (3, 0.9, 0.95)
    # the trainer's own mapping of its options gives the same settings
    trainer = JoyAgentsGRPOTrainer.__new__(JoyAgentsGRPOTrainer)
    trainer.config = JoyAgentsGRPOConfig(memory_top_n=3, memory_min_similarity=0.9, memory_reuse_similarity=0.95)
    assert trainer.memory_config() == got
