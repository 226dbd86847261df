"""An interrupted ``sft`` run continues with ``--resume`` and ends with the weights and the logged steps of the run
that was never interrupted: from a stage boundary, and from a checkpoint inside the base stage or an adapter
stage."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from joy_agents.policy import TeamPolicy
from joy_trainers import sft_trl
from joy_trainers.errors import UsageError
from joy_trainers.sft import SFTConfig, SFTTrainer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def values(tiny_dir, out: Path, **kw) -> dict:
    return {
        "model": str(tiny_dir),
        "sft_tasks": 6,
        "eval_tasks": 0,
        "base_epochs": 0.5,
        "adapter_epochs": 1.0,
        "batch_size": 2,
        "lora_r": 2,
        "lora_alpha": 4,
        "max_length": 256,
        "max_new_tokens": 12,
        "checkpoint_steps": 2,
        "activation_checkpointing": False,
        "output_dir": str(out),
        **kw,
    }


def digest(team_dir: Path) -> str:
    team = TeamPolicy.load(str(team_dir))
    h = hashlib.sha256()
    for role in team.roles:
        for p in team.trainable_parameters(role):
            h.update(p.detach().to(torch.float32).numpy().tobytes())
    return h.hexdigest()


def logged(out: Path) -> list[tuple]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [(r["stage"], r["step"], r.get("loss")) for r in rows]


@pytest.fixture(scope="module")
def whole_run(tiny_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("sft_whole") / "run"
    results = SFTTrainer(SFTConfig.from_dict(values(tiny_dir, out))).train()
    return out, results


def interrupt_at(monkeypatch, stage: str, step: int) -> None:
    """Ctrl-C in ``stage`` once its optimiser step ``step`` has run (before that step's checkpoint is saved)."""
    original = sft_trl.progress_callback

    def callback(name, epochs, metrics):
        progress = original(name, epochs, metrics)
        if name == stage:
            ended = progress.on_step_end

            def on_step_end(args, state, control, **kwargs):
                ended(args, state, control, **kwargs)
                if state.global_step == step:
                    raise KeyboardInterrupt

            progress.on_step_end = on_step_end
        return progress

    monkeypatch.setattr(sft_trl, "progress_callback", callback)


@pytest.mark.parametrize("stage, step", [("base", 3), ("master", 3), ("qa", 1)])
def test_an_interrupted_sft_run_resumes_to_the_weights_of_the_whole_run(
    whole_run, tiny_dir, tmp_path, monkeypatch, stage, step
):
    whole, whole_results = whole_run
    out = tmp_path / "run"
    with monkeypatch.context() as m:
        interrupt_at(m, stage, step)
        with pytest.raises(KeyboardInterrupt, match=f"stopped in the {stage} stage; .*--resume"):
            SFTTrainer(SFTConfig.from_dict(values(tiny_dir, out))).train()
    assert not (out / "results.json").exists()
    results = SFTTrainer(SFTConfig.from_dict(values(tiny_dir, out, resume=True))).train()
    assert results["steps"] == whole_results["steps"]
    assert digest(out / "team") == digest(whole / "team")
    assert logged(out) == logged(whole)
    assert not (out / "work").exists()


def test_resume_refuses_changed_options_and_a_new_run_refuses_the_directory(whole_run, tiny_dir, tmp_path):
    out = tmp_path / "run"
    SFTTrainer(SFTConfig.from_dict(values(tiny_dir, out, adapter_epochs=0.2, base_epochs=0.0))).train()
    with pytest.raises(UsageError, match=r"ran with other options \(adapter_lr: 0.001 -> 0.01\)"):
        changed = values(tiny_dir, out, adapter_epochs=0.2, base_epochs=0.0, adapter_lr=0.01, resume=True)
        SFTTrainer(SFTConfig.from_dict(changed)).train()
    env = {**os.environ, "PYTHONPATH": REPO}
    cmd = [sys.executable, "-m", "joy_trainers.cli", "--trainer", "sft", "--output-dir", str(out)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert done.returncode == 2
    assert "pass --resume to continue the run in it" in done.stderr and len(done.stderr.splitlines()) == 1
