"""Runs that survive what real machines do: the same options and seed give the same run whatever ran before it
in the process, refused runs leave their directory as they found it, corrupt files and full disks are one line,
and nothing a run wrote is lost or left half-written."""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import pytest

from joy_trainers.errors import UsageError, WriteError
from joy_trainers.grpo import GRPOConfig, GRPOTrainer


def _rewards(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if not k.startswith("time/") and "per_s" not in k} for r in rows]


# ------------------------------------------------------------------------------------ same seed, same run
def _auto_sft_grpo(out: Path) -> GRPOConfig:
    """A two-step GRPO run from the automatic SFT team (a small one: one adapter epoch on two tasks)."""
    overrides = {"sft_tasks": 2, "base_epochs": 0.0, "adapter_epochs": 1.0, "role_adapter_epochs": {}}
    return GRPOConfig.from_dict(
        dict(
            model="tiny-base",
            sft_overrides=overrides,
            env_id="joy/math-v0",
            output_dir=str(out),
            iterations=1,
            steps_per_iteration=2,
            tasks_per_step=2,
            group_size=2,
            max_new_tokens=32,
            max_cycles=2,
            max_prompt_tokens=256,
            temperature=2.0,
            eval_tasks=0,
        )
    )


def test_an_rl_run_is_the_same_whether_its_sft_team_was_trained_in_process_or_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("JOY_CACHE_DIR", str(tmp_path / "cache"))  # empty: the SFT team is built in this process
    GRPOTrainer(_auto_sft_grpo(tmp_path / "cold")).train()
    GRPOTrainer(_auto_sft_grpo(tmp_path / "warm")).train()  # the cached team
    cold, warm = _rewards(tmp_path / "cold"), _rewards(tmp_path / "warm")
    assert [r["step"] for r in cold] == [1, 2]
    assert cold == warm


# ------------------------------------------------------------------------------------ refusals leave no debris
def test_a_refused_run_leaves_its_directory_as_it_found_it_and_the_next_run_goes_ahead(sft_run, tmp_path, monkeypatch):
    from quick_runs import QuickTrainer, logged_steps, quick_values

    from joy_trainers.cli import train_main

    out = tmp_path / "run"
    bad = ["--trainer", "grpo", "--output-dir", str(out), "--set", "eval_tasks=0"]
    with pytest.raises(SystemExit) as refused:  # found wrong only once the automatic SFT options are read
        train_main([*bad, "--set", 'sft_overrides={"batch_size": 0}'])
    assert refused.value.code == 2 and not out.exists()
    out.mkdir()
    with pytest.raises(UsageError, match="batch_size=0 is out of range"):
        GRPOTrainer(GRPOConfig.from_dict({"output_dir": str(out), "sft_overrides": {"batch_size": 0}})).train()
    assert out.is_dir() and not list(out.iterdir())  # no .lock, no config.json

    def refuse(*args):  # a refusal after the claim (e.g. a starting team that cannot be used)
        raise UsageError("sft_run: refused")

    monkeypatch.setattr("joy_trainers.rl.loop.sft_team", refuse)
    with pytest.raises(UsageError, match="refused"):
        QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, out))).train()
    assert not list(out.iterdir())
    monkeypatch.undo()
    QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, out))).train()
    assert logged_steps(out) == [1, 2, 3, 4, 5, 6]


# ------------------------------------------------------------------------------------ corrupt and foreign files
class _Payload:
    """A pickle that writes a file when unpickled: proof, if the file appears, that something in it ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "ran"))


def _run_with_base(tiny_dir, tmp_path, monkeypatch, out: Path, **kw) -> None:
    """A quick RL run into ``out`` from a cached SFT team on its own base, so the run carries ``base/``."""
    from quick_runs import QuickTrainer, quick_values

    from joy_agents.policy import TeamConfig, TeamPolicy

    cache = tmp_path / "cache"
    monkeypatch.setenv("JOY_CACHE_DIR", str(cache))
    sft = cache / "sft-0123456789ab"
    if not sft.exists():
        shutil.copytree(tiny_dir, sft / "base")
        TeamPolicy(TeamConfig(model=str(sft / "base"), lora_r=2, lora_alpha=4)).save(str(sft / "team"))
    QuickTrainer(GRPOConfig.from_dict(quick_values(str(sft), out, **kw))).train()


def _one_line(capsys, main, argv) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and "Traceback" not in captured.out, captured.err
    return err[0]


def test_corrupt_or_foreign_weights_are_one_line_in_joy_eval_team_load_and_resume(
    tiny_dir, tmp_path, monkeypatch, capsys
):
    import torch
    from quick_runs import Crash, QuickTrainer, quick_values

    from joy_agents.policy import TeamPolicy
    from joy_trainers import cli

    out, crashed = tmp_path / "run", tmp_path / "crashed"
    _run_with_base(tiny_dir, tmp_path, monkeypatch, out)
    with pytest.raises(Crash):
        QuickTrainer(
            GRPOConfig.from_dict(quick_values(str(tmp_path / "cache/sft-0123456789ab"), crashed)), crash_at=3
        ).train()
    monkeypatch.setattr(cli, "evaluate_team", lambda *a, **k: pytest.fail("evaluated a run with a damaged file"))
    adapter = out / "team" / "master" / "adapter_model.safetensors"
    good = adapter.read_bytes()
    adapter.write_bytes(b"\xff" * 64)  # garbage: a header length far past the file's end
    line = _one_line(capsys, cli.eval_main, [str(out), "--tasks", "1"])
    assert "adapter_model.safetensors" in line and "header" in line
    with pytest.raises(ValueError, match="adapter_model.safetensors .*header") as refused:
        TeamPolicy.load(str(out / "team"))
    assert "\n" not in str(refused.value)
    adapter.write_bytes(good[: len(good) // 2])  # truncated
    assert "truncated" in _one_line(capsys, cli.eval_main, [str(out), "--tasks", "1"])
    adapter.write_bytes(good)

    sets = [f"--set={k}={json.dumps(v)}" for k, v in quick_values("", crashed).items() if k not in ("output_dir",)]
    sets = [s for s in sets if not s.startswith("--set=sft_run")]
    resume = ["--trainer", "grpo", "--output-dir", str(crashed), "--resume", *sets]
    for run in (out, crashed):
        weights = run / "base" / "model.safetensors"
        assert weights.is_file()
        weights.write_bytes(b"not a safetensors file at all")
    assert "base/model.safetensors" in _one_line(capsys, cli.eval_main, [str(out), "--tasks", "1"])
    assert "base/model.safetensors" in _one_line(capsys, cli.train_main, resume)
    (crashed / "base" / "model.safetensors").unlink()
    marker = tmp_path / "ran"
    torch.save({"w": _Payload(marker)}, crashed / "base" / "pytorch_model.bin")  # a pickle, as the base's weights
    line = _one_line(capsys, cli.train_main, resume)
    assert "base/pytorch_model.bin refused: it holds objects other than tensors" in line and not marker.exists()
    assert sorted(p.name for p in (crashed / "checkpoints").iterdir()) == ["latest", "step-2"]  # nothing touched


def test_a_rejected_checkpoint_is_kept_aside_said_once_and_the_run_resumes_from_the_last_good_one(
    sft_run, tmp_path, capsys
):
    import torch
    from quick_runs import Crash, QuickTrainer, logged_steps, quick_values

    out = tmp_path / "run"
    with pytest.raises(Crash):
        QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, out)), crash_at=5).train()
    marker = tmp_path / "ran"
    torch.save({"master": _Payload(marker)}, out / "checkpoints" / "step-4" / "optimizers.pt")
    capsys.readouterr()
    QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, out, resume=True))).train()
    said = [line for line in capsys.readouterr().out.splitlines() if "step-4" in line]
    assert len(said) == 1 and "resumed from" in said[0] and "kept aside as step-4.rejected" in said[0], said
    assert not marker.exists() and (out / "checkpoints" / "step-4.rejected" / "optimizers.pt").is_file()
    assert logged_steps(out) == [1, 2, 3, 4, 5, 6]


# ------------------------------------------------------------------------------------ full disks
def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_at_the_start_is_one_line_leaves_nothing_and_the_run_goes_ahead_once_freed(
    tiny_dir, tmp_path, monkeypatch, capsys
):
    from quick_runs import logged_steps

    from joy_trainers.rl import start

    out = tmp_path / "run"
    copy = shutil.copy2
    calls = []

    def fills_up(src, dst, *a, **k):  # the disk fills while the base model is copied
        calls.append(dst)
        if len(calls) > 3:
            _no_space()
        return copy(src, dst, *a, **k)

    monkeypatch.setattr(start.os, "link", _no_space)  # no hard links: the base is copied
    monkeypatch.setattr(start.shutil, "copy2", fills_up)
    expected = r"cannot write the starting team and its base model at .*start_team \(No space left on device, [0-9.]"
    with pytest.raises(WriteError, match=expected) as refused:
        _run_with_base(tiny_dir, tmp_path, monkeypatch, out)
    assert len(calls) > 3 and "\n" not in str(refused.value)
    assert not out.exists()  # no .joy-tmp-*, no partial base/, no config.json, no .lock
    monkeypatch.setattr(start.shutil, "copy2", copy)
    _run_with_base(tiny_dir, tmp_path, monkeypatch, out)
    assert logged_steps(out) == [1, 2, 3, 4, 5, 6]


def test_a_full_disk_at_a_checkpoint_or_the_results_is_one_line_and_resume_continues(sft_run, tmp_path, monkeypatch):
    from quick_runs import QuickTrainer, logged_steps, quick_values

    from joy_trainers.rl import checkpoints, loop

    out = tmp_path / "run"
    save = checkpoints.save_tensors

    def fills_up(obj, path):
        if path.parent.name.startswith(".joy-tmp-") and path.parent.name.endswith("-step-4"):
            _no_space()
        return save(obj, path)

    monkeypatch.setattr(checkpoints, "save_tensors", fills_up)
    with pytest.raises(WriteError, match=r"cannot write the checkpoint of step 4 at .*step-4 \(No space left"):
        QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, out))).train()
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["latest", "step-2"]  # nothing half-written
    monkeypatch.setattr(checkpoints, "save_tensors", save)
    monkeypatch.setattr(loop, "plot_rewards", _no_space)  # the disk fills again at the very end
    with pytest.raises(WriteError, match=r"cannot write the reward curve at .*reward_curve.png"):
        QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, out, resume=True))).train()
    assert not list(out.glob(".joy-tmp-*")) and not (out / "reward_curve.png").exists()
    monkeypatch.undo()
    results = QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, out, resume=True))).train()
    assert results["steps"] == 6 and logged_steps(out) == [1, 2, 3, 4, 5, 6]
    assert (out / "reward_curve.png").is_file()


# ------------------------------------------------------------------------------------ quiet saves
def test_checkpoints_save_without_warnings_and_name_a_stable_base(tiny_dir, tmp_path, monkeypatch, capsys):
    import os
    import warnings

    from quick_runs import QuickTrainer, quick_values

    from joy_agents.policy import TeamConfig, TeamPolicy

    monkeypatch.setenv("JOY_CACHE_DIR", str(tmp_path / "cache"))
    building = tmp_path / "cache" / ".sft-0123456789ab.tmp-1"  # where the cached SFT team is built, then renamed
    shutil.copytree(tiny_dir, building / "base")
    TeamPolicy(TeamConfig(model=str(building / "base"), lora_r=2, lora_alpha=4)).save(str(building / "team"))
    sft = tmp_path / "cache" / "sft-0123456789ab"
    os.replace(building, sft)
    out = tmp_path / "run"
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        QuickTrainer(GRPOConfig.from_dict(quick_values(str(sft), out, iterations=1, steps_per_iteration=2))).train()
    said = [str(w.message) for w in caught] + capsys.readouterr().err.splitlines()
    assert not [s for s in said if "config file" in s or ".tmp-" in s], said
    for config in [*out.glob("checkpoints/step-*/team/*/adapter_config.json"), *out.glob("team/*/adapter_config.json")]:
        base = json.loads(config.read_text())["base_model_name_or_path"]
        assert ".tmp-" not in base and Path(base).resolve() == (out / "base").resolve(), (config, base)


# ------------------------------------------------------------------------------------ out of memory
def test_an_update_out_of_memory_halves_its_micro_batch_says_so_once_and_gives_the_same_step(sft_run, capsys):
    from types import SimpleNamespace

    import torch

    from joy_agents.policy import SamplingConfig, TeamPolicy
    from joy_trainers import rl

    def team_and_samples():
        team = TeamPolicy.load(f"{sft_run}/team")
        torch.manual_seed(0)
        prompt = team.encode_prompt("math", [{"role": "user", "content": "What is 2 + 2?"}], None)
        (group,) = team.generate("math", [prompt], SamplingConfig(temperature=1.0, max_new_tokens=8), num_samples=8)
        return team, group

    advantages = [1.0, -1.0, 0.5, -0.5, 0.25, -0.25, 2.0, -2.0]
    team, samples = team_and_samples()
    rl.policy_update(
        team, "math", rl.make_optimizers(team, 1e-2)["math"], samples, advantages, rl.UpdateConfig(micro_batch_size=2)
    )
    fits = [p.detach().clone() for p in team.trainable_parameters("math")]

    team, samples = team_and_samples()
    logprobs = team.logprobs

    def small_device(role, prompts, completions, temperature=1.0):  # more than 2 rows at once do not fit
        if len(prompts) > 2 and torch.is_grad_enabled():
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 51.00 TiB")
        return logprobs(role, prompts, completions, temperature)

    team.logprobs = small_device
    state = SimpleNamespace(
        team=team, optimizers=rl.make_optimizers(team, 1e-2), frozen=frozenset(), micro_batch_size=None
    )
    capsys.readouterr()
    rl.update_roles(state, {"math": list(zip(samples, advantages, strict=True))}, rl.UpdateConfig(micro_batch_size=8))
    said = [line for line in capsys.readouterr().out.splitlines() if "out of memory" in line]
    assert len(said) == 1 and "math with micro_batch_size=8; continued with 2" in said[0], said  # 8 -> 4 -> 2
    assert state.micro_batch_size == 2  # later steps start from what fits: nothing more is said
    for a, b in zip(fits, team.trainable_parameters("math"), strict=True):
        torch.testing.assert_close(a, b)
    rl.update_roles(state, {"math": list(zip(samples, advantages, strict=True))}, rl.UpdateConfig(micro_batch_size=8))
    assert "out of memory" not in capsys.readouterr().out


def test_an_os_error_the_run_does_not_name_itself_is_still_one_line(monkeypatch, capsys):
    from joy_trainers import cli

    def full(name):
        raise OSError(errno.ENOSPC, "No space left on device", "/runs/sft/work/checkpoint-5/optimizer.pt")

    monkeypatch.setattr(cli, "load_trainer", full)
    with pytest.raises(SystemExit) as exit_:
        cli.train_main(["--trainer", "sft"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 1 and len(err) == 1, err
    assert "No space left on device at /runs/sft/work/checkpoint-5/optimizer.pt" in err[0]
