"""joy-train / joy-eval argument handling (no training here)."""

import pytest

from joy_trainers import TRAINERS
from joy_trainers.cli import build_config, load_trainer, train_main
from joy_trainers.sft import PRESETS, SFTConfig, SFTTrainer


def test_unknown_trainer_lists_installed_ones():
    with pytest.raises(SystemExit, match="installed trainers: grpo, joyagents_grpo, mappo, .*sft"):
        load_trainer("ppo")
    with pytest.raises(SystemExit, match="installed trainers"):
        train_main(["--trainer", "nope"])


def test_registry_resolves_sft():
    assert TRAINERS["sft"] == "joy_trainers.sft:SFTTrainer"
    assert load_trainer("sft") is SFTTrainer


def test_registry_resolves_the_rl_trainers_and_their_tiny_presets():
    for name in ("grpo", "joyagents_grpo"):
        cls = load_trainer(name)
        assert cls.name == name
        cfg = build_config(cls, "tiny", None, ["seed=3"])
        assert cfg.seed == 3 and cfg.model == "tiny"


def test_resume_needs_a_checkpointing_trainer_and_a_run_directory():
    with pytest.raises(SystemExit, match="does not checkpoint"):
        train_main(["--trainer", "sft", "--resume", "--output-dir", "x"])
    with pytest.raises(SystemExit, match="--output-dir"):
        train_main(["--trainer", "grpo", "--preset", "tiny", "--resume"])


def test_config_layers_preset_file_and_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("eval_tasks: 7\nadapter_lr: 0.5\n")
    cfg = build_config(SFTTrainer, "tiny", str(path), ["adapter_lr=0.25", "env_id=joy/math-v0"])
    assert isinstance(cfg, SFTConfig)
    assert cfg.sft_tasks == PRESETS["tiny"]["sft_tasks"]  # from the preset
    assert cfg.eval_tasks == 7  # from the file
    assert cfg.adapter_lr == 0.25 and cfg.env_id == "joy/math-v0"  # overrides win


def test_config_errors_name_the_problem(tmp_path):
    with pytest.raises(SystemExit, match="unknown sft option.*colour"):
        build_config(SFTTrainer, None, None, ["colour=red"])
    with pytest.raises(SystemExit, match="unknown preset 'huge'"):
        build_config(SFTTrainer, "huge", None, [])
    with pytest.raises(SystemExit, match="key=value"):
        build_config(SFTTrainer, None, None, ["oops"])
    with pytest.raises(SystemExit, match="rl_fraction"):
        build_config(SFTTrainer, None, None, ["rl_fraction=1.5"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a\n- b\n")
    with pytest.raises(SystemExit, match="expected a mapping"):
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
            assert cfg.model.startswith("Qwen/")
