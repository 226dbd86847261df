"""The pretrained tiny base: its recipe's pieces, a short build, resuming, and the shipped build."""

from __future__ import annotations

import json

import pytest
import torch

from joy_trainers import tiny_base
from joy_trainers.tiny_base import TinyBaseConfig, build_tiny_base, learning_rate


def test_learning_rate_warms_up_then_decays_to_the_floor():
    cfg = TinyBaseConfig(steps=100, lr=1.0, warmup_ratio=0.1, min_lr_ratio=0.1)
    lrs = [learning_rate(s, cfg) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)  # 10 warm-up steps
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:], strict=False))  # then never rises
    assert learning_rate(100, cfg) == pytest.approx(0.1) and lrs[-1] > 0.1


@pytest.mark.parametrize(
    "bad", [{"steps": 0}, {"entity_swap": 1.5}, {"prompt_style": "short"}, {"lr": 0}, {"env_id": "joy/none-v0"}]
)
def test_config_rejects_bad_values(bad):
    with pytest.raises(ValueError, match=next(iter(bad)).split("_")[0]):
        TinyBaseConfig(**bad)


def _short(**kw) -> TinyBaseConfig:
    return TinyBaseConfig(**{"tasks": 12, "steps": 16, "batch_size": 4, "max_length": 256, **kw})


@pytest.fixture(scope="module")
def short_build(tiny_dir, tmp_path_factory):
    return build_tiny_base(tmp_path_factory.mktemp("tiny_base") / "base", _short(), progress=False, init=tiny_dir)


def test_short_build_trains_loads_and_records_its_recipe(short_build, tiny_dir):
    from transformers import AutoModelForCausalLM

    out = short_build
    info = json.loads((out / "build_info.json").read_text())
    assert info["format"] == tiny_base.BUILD_FORMAT and info["config"]["steps"] == 16 and info["rows"] > 0
    curve = [p["loss"] for p in info["loss_curve"]]
    assert curve and curve[-1] < 8.0  # from ~ln(4096) = 8.3 at random init
    model = AutoModelForCausalLM.from_pretrained(out)
    start = AutoModelForCausalLM.from_pretrained(tiny_dir)
    assert not torch.equal(model.model.embed_tokens.weight, start.model.embed_tokens.weight)
    assert not (out.parent / ".base.partial").exists()
    with pytest.raises(FileExistsError, match="finished tiny base"):
        build_tiny_base(out, _short(), progress=False, init=tiny_dir)


def test_the_command_continues_a_build_given_as_init(short_build, tmp_path, capsys):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "continued"
    size = ["--tasks", "12", "--batch-size", "4", "--max-length", "256"]
    tiny_base.main(["--out", str(out), "--init", str(short_build), "--steps", "8", "--lr", "1e-3", *size])
    info = json.loads((out / "build_info.json").read_text())
    before = json.loads((short_build / "build_info.json").read_text())
    assert info["init"] == str(short_build) and info["init_config"] == before["config"]
    assert info["config"]["steps"] == 8 and info["config"]["lr"] == 1e-3
    # it started from the short build's weights, not from random ones: its loss starts where that one ended
    assert info["loss_curve"][-1]["loss"] < before["loss_curve"][-1]["loss"]
    assert "final loss" in capsys.readouterr().err
    assert AutoModelForCausalLM.from_pretrained(out).num_parameters() == before["n_params"]
    with pytest.raises(SystemExit):
        tiny_base.main(["--out", str(tmp_path / "none"), "--init", str(tmp_path / "missing"), *size])
    assert "is not a model directory" in capsys.readouterr().err


def test_an_interrupted_build_resumes_to_the_same_weights(short_build, tiny_dir, tmp_path, monkeypatch):
    from safetensors.torch import load_file

    calls = {"n": 0}
    real = tiny_base.completion_loss

    def failing(model, inputs):
        calls["n"] += 1
        if calls["n"] == 12:  # after the checkpoint at step 8
            raise KeyboardInterrupt
        return real(model, inputs)

    monkeypatch.setattr(tiny_base, "completion_loss", failing)
    with pytest.raises(KeyboardInterrupt):
        build_tiny_base(tmp_path / "again", _short(checkpoint_every=8), progress=False, init=tiny_dir)
    partial = tmp_path / ".again.partial"
    assert (partial / "checkpoint" / "state.json").is_file()
    monkeypatch.setattr(tiny_base, "completion_loss", real)
    with pytest.raises(ValueError, match="another recipe"):
        build_tiny_base(tmp_path / "again", _short(checkpoint_every=8, lr=1e-3), progress=False, init=tiny_dir)
    again = build_tiny_base(tmp_path / "again", _short(checkpoint_every=8), progress=False, init=tiny_dir)
    assert json.loads((again / "build_info.json").read_text())["resumed"] is True
    a, b = load_file(short_build / "model.safetensors"), load_file(again / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # as if never interrupted


def test_the_shipped_base_is_the_documented_recipe_and_loads():
    from dataclasses import asdict

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from joy_agents.tiny import tiny_base_dir
    from joy_trainers.sft import resolve_model

    path = tiny_base_dir()
    assert resolve_model("tiny-base", 0) == str(path)
    info = json.loads((path / "build_info.json").read_text())
    assert info["format"] == tiny_base.BUILD_FORMAT
    assert info["config"] == asdict(TinyBaseConfig())  # `joy-build-tiny-base` with no options rebuilds it
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert sum(p.numel() for p in model.parameters()) == info["n_params"]
    assert model.get_input_embeddings().num_embeddings == len(tokenizer)
    assert info["loss_curve"][-1]["step"] == info["config"]["steps"]
