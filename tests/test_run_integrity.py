"""Runs that keep their promises: one writer per run directory, a resume that refuses changed options and
reproduces the uninterrupted run, no orphaned temporary checkpoints, Ctrl-C ending with a checkpoint, and run
directories that carry what they need (evaluated and resumed after the model cache is cleared)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from quick_runs import Crash, QuickTrainer, logged_steps, quick_values

from joy_trainers import rl
from joy_trainers.errors import UsageError
from joy_trainers.grpo import GRPOConfig, GRPOTrainer
from joy_trainers.rundir import RunDir

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------------------------------------ one writer per dir
_HOLD = """
import sys, time
from joy_trainers.rundir import RunDir
run = RunDir(sys.argv[1], "x")
run.claim()
print("claimed", flush=True)
time.sleep(60)
"""


def test_a_second_run_on_a_directory_in_use_is_refused_in_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": REPO}
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(tmp_path / "run")], stdout=subprocess.PIPE, env=env)
    try:
        assert holder.stdout.readline().strip() == b"claimed"
        second = subprocess.run(
            [sys.executable, "-m", "joy_trainers.cli", "--trainer", "grpo", "--set", "eval_tasks=0"]
            + ["--output-dir", str(tmp_path / "run"), "--resume"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert second.returncode == 2 and len(second.stderr.strip().splitlines()) == 1, second.stderr
        assert f"is in use by another run (process {holder.pid})" in second.stderr
    finally:
        holder.kill()
        holder.wait()
    RunDir(tmp_path / "run", "x").claim(resume=True)  # the dead holder's lock is gone with its process


def test_the_lock_is_released_when_a_run_ends_or_fails(sft_run, tmp_path):
    with pytest.raises(Crash):
        QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, tmp_path / "run")), crash_at=3).train()
    QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, tmp_path / "run", resume=True))).train()
    assert logged_steps(tmp_path / "run") == [1, 2, 3, 4, 5, 6]


# ------------------------------------------------------------------------------------ resume
def test_resume_refuses_options_that_change_the_run_and_allows_safe_ones(sft_run, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(Crash):
        QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, out)), crash_at=3).train()
    for change in ({"lr": 1e-3}, {"group_size": 3}, {"tasks_per_step": 2}, {"seed": 1}):
        with pytest.raises(UsageError, match=rf"--resume: the run in .* ran with other options \({next(iter(change))}"):
            QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, out, resume=True, **change))).train()
    with pytest.raises(UsageError, match=r"lr: 1e-06 -> 0.001; seed: 0 -> 1"):
        QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, out, resume=True, lr=1e-3, seed=1))).train()
    results = QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, out, resume=True, iterations=2))).train()
    assert results["steps"] == 12 and logged_steps(out) == list(range(1, 13))
    assert json.loads((out / "config.json").read_text())["iterations"] == 2


def test_the_cli_refuses_a_changed_option_on_resume_in_one_line(sft_run, tmp_path, capsys):
    from joy_trainers.cli import train_main

    out = tmp_path / "run"
    with pytest.raises(Crash):
        QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, out)), crash_at=3).train()
    args = ["--trainer", "grpo", "--output-dir", str(out), "--resume"]
    sets = [f"--set={k}={json.dumps(v)}" for k, v in quick_values(sft_run, out).items() if k != "output_dir"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        train_main(args + sets + ["--set", "lr=0.5"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and "lr: 1e-06 -> 0.5" in err[0]


def test_orphaned_temporary_checkpoints_are_removed_at_the_next_start(sft_run, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(Crash):
        QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, out)), crash_at=3).train()
    orphan = out / "checkpoints" / ".tmp-step-4-99999"  # what a kill during a checkpoint write leaves
    (orphan / "team").mkdir(parents=True)
    (out / ".results.json.tmp-99999").write_text("{")
    QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, out, resume=True))).train()
    assert not orphan.exists() and not (out / ".results.json.tmp-99999").exists()
    assert not list((out / "checkpoints").glob(".tmp-*"))


def test_ctrl_c_stops_after_the_step_with_a_checkpoint_and_the_run_resumes(sft_run, tmp_path):
    out = tmp_path / "run"

    def press_ctrl_c(step):
        if step == 2:
            os.kill(os.getpid(), signal.SIGINT)

    before = signal.getsignal(signal.SIGINT)  # the default in a terminal; SIG_IGN under nohup or some CI runners
    with pytest.raises(KeyboardInterrupt, match="stopped after step 3 with a checkpoint; continue with"):
        QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, out)), on_step=press_ctrl_c).train()
    assert rl.latest_checkpoint(out / "checkpoints").name == "step-3" and logged_steps(out) == [1, 2, 3]
    assert signal.getsignal(signal.SIGINT) is before  # the loop's handler is gone, whatever was there before
    QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, out, resume=True))).train()
    assert logged_steps(out) == [1, 2, 3, 4, 5, 6]


_CTRL_C = """
import os, signal, sys
sys.argv = ["joy-train", "--trainer", "grpo", "--output-dir", sys.argv[1]] + sys.argv[2:]
from joy_trainers import grpo, cli
step = grpo.GRPOTrainer.step
def stepped(self, state, i, tasks, timer):
    if i == 1:
        os.kill(os.getpid(), signal.SIGINT)
    return step(self, state, i, tasks, timer)
grpo.GRPOTrainer.step = stepped
cli.train_main(sys.argv[1:])
"""


def test_ctrl_c_in_joy_train_is_one_line_and_exit_130(sft_run, tmp_path):
    out = tmp_path / "run"
    sets = [f"--set={k}={json.dumps(v)}" for k, v in quick_values(sft_run, out, steps_per_iteration=4).items()]
    sets = [s for s in sets if not s.startswith("--set=output_dir")]
    env = {**os.environ, "PYTHONPATH": REPO}
    done = subprocess.run(
        [sys.executable, "-c", _CTRL_C, str(out), *sets], capture_output=True, text=True, env=env, timeout=300
    )
    lines = [line[line.index("joy-train:") :] for line in done.stderr.splitlines() if "joy-train:" in line]
    assert done.returncode == 130 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert len(lines) == 1 and "stopped after step 2 with a checkpoint" in lines[0]
    said = [line for line in (done.stdout + done.stderr).splitlines() if "ctrl-c" in line.lower() or "stop" in line]
    assert said == [lines[0]], said  # one line says it all, not one when pressed and another at the end
    assert rl.latest_checkpoint(out / "checkpoints").name == "step-2"


# ------------------------------------------------------------------------------------ reproducible resume
def _grpo(sft_run, out, **kw):
    values = quick_values(sft_run, out, steps_per_iteration=4, tasks_per_step=2, max_new_tokens=40, temperature=1.0)
    values.update(max_prompt_tokens=384, env_id="joy/math-v0")
    return GRPOConfig.from_dict({**values, "lr": 1e-2, **kw})


def _rows(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if not k.startswith("time/") and "per_s" not in k} for r in rows]


def test_a_killed_and_resumed_run_reproduces_the_uninterrupted_one(tmp_path, monkeypatch):
    from joy_agents.policy import TeamConfig, TeamPolicy
    from joy_agents.tiny import tiny_base_dir

    sft_run = str(tmp_path / "sft")  # the pretrained tiny base: its samples differ in length and reward
    TeamPolicy(TeamConfig(model=str(tiny_base_dir()), lora_r=2, lora_alpha=4)).save(f"{sft_run}/team")
    GRPOTrainer(_grpo(sft_run, tmp_path / "whole")).train()
    step = GRPOTrainer.step

    def crashing(self, state, i, tasks, timer):
        if i == 2:
            raise Crash("killed")
        return step(self, state, i, tasks, timer)

    monkeypatch.setattr(GRPOTrainer, "step", crashing)
    with pytest.raises(Crash):
        GRPOTrainer(_grpo(sft_run, tmp_path / "resumed")).train()
    monkeypatch.setattr(GRPOTrainer, "step", step)
    GRPOTrainer(_grpo(sft_run, tmp_path / "resumed", resume=True)).train()
    whole, resumed = _rows(tmp_path / "whole"), _rows(tmp_path / "resumed")
    assert [r["step"] for r in resumed] == [1, 2, 3, 4]
    assert len({r["charts/tokens_generated"] for r in whole[2:]}) > 1  # sampled lengths differ after the resume
    for a, b in zip(whole, resumed, strict=True):
        assert a["charts/reward_mean"] == b["charts/reward_mean"]
        assert a["charts/tokens_generated"] == b["charts/tokens_generated"]
        assert a == pytest.approx(b), a["step"]


# ------------------------------------------------------------------------------------ self-contained runs
def test_a_run_carries_its_base_and_evaluates_and_resumes_once_moved_and_the_cache_is_cleared(
    tiny_dir, tmp_path, monkeypatch, capsys
):
    from joy_agents.policy import TeamConfig, TeamPolicy
    from joy_trainers.cli import eval_main

    cache = tmp_path / "cache"
    monkeypatch.setenv("JOY_CACHE_DIR", str(cache))
    sft = cache / "sft-0123456789ab"  # a cached SFT team on its own fine-tuned base, as sft_team builds it
    shutil.copytree(tiny_dir, sft / "base")
    TeamPolicy(TeamConfig(model=str(sft / "base"), lora_r=2, lora_alpha=4)).save(str(sft / "team"))
    out = tmp_path / "run"
    with pytest.raises(Crash):
        QuickTrainer(GRPOConfig.from_dict(quick_values(str(sft), out, eval_tasks=1)), crash_at=3).train()
    for team_json in [out / "start_team" / "team.json", *out.glob("checkpoints/step-*/team/team.json")]:
        model = json.loads(team_json.read_text())["config"]["model"]
        assert model.startswith("../") and str(cache) not in model, (team_json, model)
    shutil.rmtree(cache)
    moved = tmp_path / "elsewhere" / "run"
    shutil.move(str(out), str(moved))
    QuickTrainer(GRPOConfig.from_dict(quick_values(str(sft), moved, eval_tasks=1, resume=True))).train()
    assert logged_steps(moved) == [1, 2, 3, 4, 5, 6]
    assert json.loads((moved / "team" / "team.json").read_text())["config"]["model"] == "../base"
    eval_main([str(moved), "--tasks", "1"])
    assert json.loads((moved / "eval-test.json").read_text())["metrics"]["episodes"] == 1


def test_resume_compares_the_options_both_sides_hold_and_not_how_the_run_is_invoked(tmp_path):
    from joy_trainers.resume_config import CONFIG_FILE, check_resume_config, resume_changes

    stored = {"lr": 1e-6, "seed": 0, "resume": False, "output_dir": "/a", "overwrite": False}
    requested = {"lr": 1e-6, "seed": 0, "resume": True, "output_dir": "/a/", "overwrite": False, "new_option": 3}
    assert resume_changes(stored, requested, ("iterations",)) == ([], [])
    assert resume_changes({"lr": 1e-6}, {"lr": 1e-3}, ()) == (["lr: 1e-06 -> 0.001"], [])
    (tmp_path / CONFIG_FILE).write_text("[1]")  # JSON, but not the run's options
    with pytest.raises(UsageError, match="is damaged"):
        check_resume_config(tmp_path, GRPOConfig(), has_checkpoint=True)


def test_a_run_saved_with_scale_rewards_true_resumes_under_its_name_group(tmp_path):
    from joy_trainers.resume_config import CONFIG_FILE, check_resume_config, config_values

    stored = {**config_values(GRPOConfig()), "scale_rewards": True}  # the option's spelling before it took names
    (tmp_path / CONFIG_FILE).write_text(json.dumps(stored))
    assert check_resume_config(tmp_path, GRPOConfig(), has_checkpoint=True) == []
    with pytest.raises(UsageError, match='scale_rewards: "group" -> "none"'):
        check_resume_config(tmp_path, GRPOConfig(scale_rewards="none"), has_checkpoint=True)


def test_a_resume_before_the_first_checkpoint_starts_from_the_team_it_names(sft_run, tiny_dir, tmp_path):
    from joy_agents.policy import TeamConfig, TeamPolicy

    out = tmp_path / "run"
    with pytest.raises(Crash):  # stopped in its first step: no checkpoint yet
        QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, out)), crash_at=0).train()
    assert json.loads((out / "start_team" / "team.json").read_text())["config"]["lora_r"] == 2
    other = tmp_path / "other"
    TeamPolicy(TeamConfig(model=str(tiny_dir), lora_r=4, lora_alpha=8)).save(str(other / "team"))
    QuickTrainer(GRPOConfig.from_dict(quick_values(str(other), out, resume=True))).train()
    assert json.loads((out / "start_team" / "team.json").read_text())["config"]["lora_r"] == 4


def test_a_half_copied_starting_team_is_removed_at_the_next_start(tmp_path):
    run = RunDir(tmp_path / "run", "x")
    run.claim()
    (run.path / ".start_team.tmp-12345").mkdir()
    (run.path / ".start_team.tmp-12345" / "team.json").write_text("{")
    run.release()
    run.claim(resume=True)
    assert not (run.path / ".start_team.tmp-12345").exists()
    run.release()
