"""benchmarks/grpo_step_vs_trl.py: both sides run real GRPO steps on the same settings and the JSON reports them."""

from __future__ import annotations

import importlib.util
import json
import math
import os

import pytest

pytest.importorskip("trl")
pytest.importorskip("peft")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _benchmark():
    path = os.path.join(REPO, "benchmarks", "grpo_step_vs_trl.py")
    spec = importlib.util.spec_from_file_location("grpo_step_vs_trl", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_distinct_char_reward():
    bench = _benchmark()
    assert bench.distinct_char_reward("") == 0.0
    assert bench.distinct_char_reward("aaaa") == 0.25
    assert bench.distinct_char_reward("abcd") == 1.0


def test_quick_run_compares_real_steps(tmp_path, tiny_dir):
    bench = _benchmark()
    out = tmp_path / "x.json"
    argv = ["--model", str(tiny_dir), "--quick"]
    argv += ["--prompts", "2", "--group-size", "2", "--max-new-tokens", "8", "--lr", "1e-3"]
    argv += ["--lora-r", "4", "--lora-alpha", "8", "--threads", "1", "--out", str(out)]
    result = bench.main(argv)
    saved = json.loads(out.read_text())
    assert saved == json.loads(json.dumps(result))

    for key in (
        "ratio_vs_trl",
        "ours_s_per_step",
        "trl_s_per_step",
        "ours_generate_s",
        "ours_update_s",
        "trl_generate_s",
        "trl_update_s",
        "ours_completion_tokens_mean",
        "trl_completion_tokens_mean",
        "settings",
        "versions",
        "machine",
        "date",
    ):
        assert key in saved, key
    for lib in ("torch", "transformers", "trl", "peft"):
        assert saved["versions"][lib]
    assert saved["machine"]["cpu_count"] >= 1 and "platform" in saved["machine"]
    settings = saved["settings"]
    assert (settings["prompts"], settings["group_size"], settings["max_new_tokens"]) == (2, 2, 8)
    assert settings["beta"] == 0.04 and settings["loss_type"] == "dapo" and settings["lora"]["r"] == 4

    steps = settings["steps_per_round"] * settings["rounds"]
    assert steps >= 1
    assert saved["ours_steps"] == steps and saved["trl_steps"] == steps
    assert len(saved["ours_step_s"]) == steps and len(saved["trl_step_s"]) == steps

    # the random tiny model almost never samples an end token: both sides generate ~the full length
    for side in ("ours", "trl"):
        assert 0.75 * 8 <= saved[f"{side}_completion_tokens_mean"] <= 8
        for key in ("s_per_step", "generate_s", "update_s"):
            value = saved[f"{side}_{key}"]
            assert math.isfinite(value) and value > 0, (side, key, value)
        assert saved[f"{side}_reference_s"] > 0  # beta > 0: both ran a reference forward
        # the generate and update phases make up the step
        assert saved[f"{side}_generate_s"] < saved[f"{side}_s_per_step"]
    for key in ("ratio_vs_trl", "generate_ratio_vs_trl", "update_ratio_vs_trl"):
        assert math.isfinite(saved[key]) and saved[key] > 0, key

    # both updates did real work: the trained (LoRA) parameters moved
    assert saved["ours_param_max_abs_change"] > 0
    assert saved["trl_param_max_abs_change"] > 0
