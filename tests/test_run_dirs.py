"""Run directories you can trust: one run per directory, resume that walks back past damaged checkpoints and
never logs a step twice, nothing unpickled from a checkpoint, relocatable runs, and caches that two
processes can build at once."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from quick_runs import Crash, QuickTrainer, logged_steps, quick_values

from joy_trainers import rl
from joy_trainers.errors import UsageError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _config(sft_run, out, **kw):
    return rl.RLConfig.from_dict(quick_values(sft_run, out, **kw))


def _run(sft_run, out, crash_at=None, **kw):
    trainer = QuickTrainer(_config(sft_run, out, **kw), crash_at=crash_at)
    try:
        return trainer.train()
    except Crash:
        return None


# ------------------------------------------------------------------------------------ one run per dir
def test_a_new_run_into_a_used_directory_stops_and_overwrite_removes_only_project_files(sft_run, tmp_path):
    out = tmp_path / "run"
    assert _run(sft_run, out, steps_per_iteration=2)["steps"] == 2
    (out / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="not empty .*--resume .*--overwrite"):
        _run(sft_run, out, steps_per_iteration=2)
    assert logged_steps(out) == [1, 2]  # the old run was left as it was
    with pytest.raises(UsageError, match="--resume .* --overwrite"):
        _run(sft_run, out, resume=True, overwrite=True)
    assert _run(sft_run, out, steps_per_iteration=3, overwrite=True)["steps"] == 3
    assert logged_steps(out) == [1, 2, 3] and (out / "notes.txt").read_text() == "mine"


def test_an_unwritable_output_directory_is_refused_before_any_work(sft_run, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UsageError, match="cannot be written"):
        _run(sft_run, blocker / "run")
    with pytest.raises(UsageError, match="is a file"):
        _run(sft_run, blocker)


# --------------------------------------------------------------------------------------------- resume
def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


DAMAGE = {
    "optimizers.pt truncated": lambda ck: _truncate(ck / "optimizers.pt"),
    "state.json truncated": lambda ck: _truncate(ck / "state.json"),
    "adapter truncated": lambda ck: _truncate(next((ck / "team").rglob("*.safetensors"))),
    "directory gone": lambda ck: shutil.rmtree(ck),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_resume_walks_back_past_a_damaged_checkpoint_and_never_logs_a_step_twice(sft_run, tmp_path, damage, capsys):
    out = tmp_path / "run"
    _run(sft_run, out, crash_at=4)  # steps 1-4 logged, checkpoints at 2 and 4, crash in step 5
    assert logged_steps(out) == [1, 2, 3, 4]
    assert (out / "checkpoints" / "latest").read_text() == "step-4"
    DAMAGE[damage](out / "checkpoints" / "step-4")
    _run(sft_run, out, crash_at=3, resume=True)  # walks back to step 2, redoes 3, crashes in 4
    said = [line for line in capsys.readouterr().out.splitlines() if "step-4" in line]
    assert len(said) == 1 and "resumed from" in said[0] and "step-2" in said[0], said  # said once, in one line
    assert "kept aside as step-4.rejected" in said[0] or "latest points at step-4" in said[0]
    assert logged_steps(out) == [1, 2, 3]
    results = _run(sft_run, out, resume=True)  # from step 2 again (3 had no checkpoint): 3, 4, 5, 6
    assert results["steps"] == 6 and logged_steps(out) == [1, 2, 3, 4, 5, 6]


def test_resume_sequences_of_crashes_keep_every_step_once(sft_run, tmp_path):
    out = tmp_path / "run"

    def check(expected):
        steps = logged_steps(out)
        assert steps == sorted(set(steps)) == expected, steps

    _run(sft_run, out, crash_at=0, resume=True)  # --resume before any checkpoint exists, crash at once
    check([])
    _run(sft_run, out, crash_at=3, resume=True)  # from step 0: 1-3 logged, checkpoint at 2
    check([1, 2, 3])
    _run(sft_run, out, crash_at=4, resume=True)  # from step 2: 3-4 logged again, checkpoint at 4
    check([1, 2, 3, 4])
    _truncate(out / "checkpoints" / "step-4" / "optimizers.pt")
    _run(sft_run, out, crash_at=5, resume=True)  # step-4 damaged: from step 2, 3-5 logged, checkpoint at 4
    check([1, 2, 3, 4, 5])
    _run(sft_run, out, resume=True)  # from step 4 to the end
    check([1, 2, 3, 4, 5, 6])
    with open(out / "metrics.jsonl", "a") as f:  # a later crash mid-write left half a line
        f.write('{"step": 7, "charts/rew')
    shutil.rmtree(out / "checkpoints" / "step-6")  # and the newest checkpoint is gone: latest points nowhere
    results = _run(sft_run, out, resume=True)
    assert results["steps"] == 6
    check([1, 2, 3, 4, 5, 6])


def test_resume_without_any_usable_checkpoint_says_so_and_starts_nothing(sft_run, tmp_path):
    out = tmp_path / "run"
    _run(sft_run, out, crash_at=3)
    for ck in (out / "checkpoints").glob("step-*"):
        _truncate(ck / "optimizers.pt")
    with pytest.raises(UsageError, match="no usable checkpoint.*step-2.*optimizers.pt.*--overwrite"):
        _run(sft_run, out, resume=True)
    assert logged_steps(out) == [1, 2, 3]


class _Exploit:
    def __reduce__(self):
        return (os.system, (f"touch {os.environ['JOY_EXPLOIT_MARKER']}",))


@pytest.mark.parametrize("target", ["optimizers.pt", "reference.pt"])
def test_a_planted_pickle_is_refused_and_runs_nothing(sft_run, tmp_path, monkeypatch, target):
    out = tmp_path / "run"
    _run(sft_run, out, crash_at=2)  # one checkpoint: step-2
    marker = tmp_path / "pwned"
    monkeypatch.setenv("JOY_EXPLOIT_MARKER", str(marker))
    ck = out / "checkpoints" / "step-2"
    assert (ck / target).is_file()
    (ck / target).write_bytes(pickle.dumps({"state": _Exploit()}))
    with pytest.raises(UsageError, match=f"no usable checkpoint.*{target} refused"):
        _run(sft_run, out, resume=True)
    assert not marker.exists()
    with pytest.raises(rl.CheckpointError, match="refused"):
        rl.load_tensors(ck / target)
    assert not marker.exists()


def test_no_run_file_is_loaded_with_unrestricted_unpickling():
    for root in ("joy_env", "joy_agents", "joy_trainers", "benchmarks", "examples"):
        for path in Path(REPO, root).rglob("*.py"):
            text = path.read_text()
            assert "weights_only=False" not in text, path
            assert "pickle.load" not in text and "pickle.loads" not in text, path


# ------------------------------------------------------------------------------------ relocatable runs
def _sft_like_run(tiny_dir, run: Path) -> None:
    """A run directory as the sft trainer writes it: base/, team/ on top of it, results.json."""
    from joy_agents.policy import TeamConfig, TeamPolicy

    shutil.copytree(tiny_dir, run / "base")
    TeamPolicy(TeamConfig(model=str(run / "base"), lora_r=2, lora_alpha=4)).save(str(run / "team"))
    config = {"max_length": 160, "max_new_tokens": 8, "eval_max_cycles": 2, "seed": 0, "eval_tasks": 1}
    results = {"trainer": "sft", "env_id": "joy/math-v0", "config": config}
    (run / "results.json").write_text(json.dumps(results))


def test_a_moved_run_directory_still_evaluates(tiny_dir, tmp_path, capsys):
    from joy_trainers.cli import eval_main

    _sft_like_run(tiny_dir, tmp_path / "before")
    team_json = json.loads((tmp_path / "before" / "team" / "team.json").read_text())
    assert team_json["config"]["model"] == "../base"  # stored relative to the team
    shutil.move(str(tmp_path / "before"), str(tmp_path / "elsewhere" / "after"))
    eval_main([str(tmp_path / "elsewhere" / "after"), "--tasks", "1"])
    assert json.loads((tmp_path / "elsewhere" / "after" / "eval-test.json").read_text())["metrics"]["episodes"] == 1


def test_a_team_whose_base_model_is_gone_is_one_line_naming_it(tiny_dir, tmp_path, capsys):
    from joy_trainers.cli import eval_main

    run = tmp_path / "run"
    _sft_like_run(tiny_dir, run)
    data = json.loads((run / "team" / "team.json").read_text())
    data["config"]["model"] = str(tmp_path / "old-place" / "base")  # a run saved with an absolute path, then moved
    (run / "team" / "team.json").write_text(json.dumps(data))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        eval_main([str(run), "--tasks", "1"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "old-place" in err and "does not exist" in err and "team.json" in err


# ------------------------------------------------------------------------------------- shared caches
_BUILD = """
import json, sys
from joy_agents.tiny import build_tiny_model
out = build_tiny_model(sys.argv[1], corpus_tasks=3)
info = json.loads((out / "build_info.json").read_text())
print(json.dumps({"dir": str(out), "sha256": info["sha256"], "files": info["files"]}))
"""


def test_two_tiny_model_builds_at_once_both_finish_with_the_same_build(tmp_path):
    out = tmp_path / "cache" / "tiny"
    env = {**os.environ, "PYTHONPATH": REPO}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _BUILD, str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err[-2000:]
    first, second = (json.loads(o.strip().splitlines()[-1]) for o, _ in outputs)
    assert first == second and first["dir"] == str(out)
    assert sorted(p.name for p in out.parent.iterdir()) == [".tiny.lock", "tiny"]  # no temporary left behind


SMALL_SFT = {
    "sft_tasks": 4,
    "base_epochs": 0.0,
    "adapter_epochs": 0.2,
    "role_adapter_epochs": {},
    "max_length": 128,
    "batch_size": 4,
}

_SFT_TEAM = """
import hashlib, json, sys
from joy_trainers.rl import sft_team
team = sft_team(None, "tiny-base", 0, json.loads(sys.argv[1]))
files = {str(p.relative_to(team)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(team.rglob("*"))
         if p.is_file()}
print(json.dumps({"team": str(team), "files": files}))
"""


@pytest.mark.slow  # trains a small SFT team from the shipped tiny base (minutes on two CPU cores)
def test_two_runs_needing_the_same_cached_sft_team_at_once_share_one_build(tmp_path):
    cache = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": REPO, "JOY_CACHE_DIR": str(cache)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _SFT_TEAM, json.dumps(SMALL_SFT)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=1800) for p in procs]
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err[-3000:]
    first, second = (json.loads(o.strip().splitlines()[-1]) for o, _ in outputs)
    assert first == second and first["files"]
    assert "another process built the cached SFT team" in outputs[0][0] + outputs[1][0]  # one waited, one trained
    assert not list(cache.glob(".*tmp*"))  # no temporary directory left behind


_FAKE_SFT = """
import hashlib, json, os, sys, time
from pathlib import Path
from joy_trainers.rl import sft_team
from joy_trainers.sft import SFTTrainer

def train(self):  # stands in for SFT: slow, and writes team.json last like the real trainer
    with open(os.environ["JOY_TRAINED_LOG"], "a") as f:
        f.write(f"{os.getpid()}\\n")
    out = Path(self.config.output_dir)
    (out / "team").mkdir(parents=True)
    (out / "team" / "adapter.bin").write_bytes(os.urandom(64))
    time.sleep(2)
    (out / "team" / "team.json").write_text(json.dumps({"by": os.getpid()}))

SFTTrainer.train = train
team = sft_team(None, "tiny-base", 0, json.loads(sys.argv[1]))
files = {str(p.relative_to(team)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(team.rglob("*"))
         if p.is_file()}
print(json.dumps({"team": str(team), "files": files}))
"""


def test_two_processes_needing_the_same_cached_sft_team_train_it_once(tmp_path, monkeypatch):
    from joy_trainers.rl.start import tiny_sft_dir

    cache = tmp_path / "cache"
    log = tmp_path / "trained"
    env = {**os.environ, "PYTHONPATH": REPO, "JOY_CACHE_DIR": str(cache), "JOY_TRAINED_LOG": str(log)}
    stale = cache / ".sft-0.tmp-crashed"  # a crashed build of another key: left alone
    stale.mkdir(parents=True)
    monkeypatch.setenv("JOY_CACHE_DIR", str(cache))
    half = tiny_sft_dir("tiny-base", 0, SMALL_SFT) / "team"  # a build of this key that crashed half-way
    half.mkdir(parents=True)
    (half / "partial.bin").write_bytes(b"x")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _FAKE_SFT, json.dumps(SMALL_SFT)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err[-3000:]
    first, second = (json.loads(o.strip().splitlines()[-1]) for o, _ in outputs)
    assert first == second and set(first["files"]) == {"adapter.bin", "team.json"}  # the half build is gone
    assert Path(first["team"]) == half
    assert len(log.read_text().split()) == 1  # one process trained, the other waited and used its team
    assert "another process built the cached SFT team" in outputs[0][0] + outputs[1][0]
    team = Path(first["team"])
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [".sft-0.tmp-crashed", team.parent.name, f"{team.parent.name}.lock"]
    )


def test_the_sft_cache_key_ignores_evaluation_options():
    from joy_trainers.presets import SFT_PRESETS as PRESETS
    from joy_trainers.rl.start import sft_cache_key, tiny_sft_values

    rl_values = tiny_sft_values(PRESETS["tiny"]["model"], 0)  # what an RL preset asks for: no evaluation
    user_run = {**PRESETS["tiny"], "output_dir": "runs/sft-1", "eval_tasks": 100, "overwrite": True}
    assert sft_cache_key(rl_values) == sft_cache_key(user_run)
    assert sft_cache_key(rl_values) != sft_cache_key({**user_run, "adapter_lr": 1e-3})


def test_an_sft_run_trained_from_python_records_itself_for_rl_presets(sft_run, tmp_path, monkeypatch, capsys):
    """The registration is part of the SFT run's own life (its outputs), not of the CLI: ``SFTTrainer.train()``
    from Python records a tiny model's run, and an RL preset with the same settings reuses its team."""
    from joy_agents.policy import TeamPolicy
    from joy_trainers.base import Trained
    from joy_trainers.rl.start import sft_cache_key, tiny_sft_values
    from joy_trainers.sft import SFTConfig, SFTTrainer

    monkeypatch.setenv("JOY_CACHE_DIR", str(tmp_path / "cache"))
    values = {**tiny_sft_values("tiny", 0, SMALL_SFT), "eval_tasks": 0, "output_dir": str(tmp_path / "mine")}

    def trained(self):  # the team the stages would have trained (training itself is tested in test_sft.py)
        self.logs = {}
        return Trained(team=TeamPolicy.load(str(Path(sft_run) / "team")), steps=1)

    monkeypatch.setattr(SFTTrainer, "run_training", trained)
    results = SFTTrainer(SFTConfig.from_dict(values)).train()
    entry = tmp_path / "cache" / "sft-runs" / f"{sft_cache_key(results['config'])}.json"
    assert json.loads(entry.read_text()) == {"run": str((tmp_path / "mine").resolve())}
    monkeypatch.setattr(SFTTrainer, "train", lambda self: pytest.fail("the recorded SFT run should be reused"))
    team = rl.sft_team(None, "tiny", 0, SMALL_SFT)
    assert "reusing the SFT team of" in capsys.readouterr().out
    TeamPolicy.load(str(team))


def test_an_rl_preset_reuses_a_matching_sft_run_instead_of_training(sft_run, tmp_path, monkeypatch, capsys):
    from dataclasses import asdict

    from joy_agents.policy import TeamPolicy
    from joy_trainers.rl.start import tiny_sft_values
    from joy_trainers.sft import SFTConfig, SFTTrainer, register_sft_run

    monkeypatch.setenv("JOY_CACHE_DIR", str(tmp_path / "cache"))
    run = tmp_path / "runs" / "sft-mine"
    shutil.copytree(sft_run, run)  # as `joy-train --trainer sft --preset tiny` would have written it
    config = asdict(SFTConfig.from_dict({**tiny_sft_values("tiny", 0, SMALL_SFT), "eval_tasks": 100}))
    (run / "results.json").write_text(json.dumps({"trainer": "sft", "config": config}))
    register_sft_run(run, config)

    def no_training(self):
        raise AssertionError("the matching SFT run should have been reused")

    monkeypatch.setattr(SFTTrainer, "train", no_training)
    team = rl.sft_team(None, "tiny", 0, SMALL_SFT)
    assert "reusing the SFT team of" in capsys.readouterr().out
    assert team.parent.parent == tmp_path / "cache" and team.parent.name.startswith("sft-")
    TeamPolicy.load(str(team))  # a complete copy that loads on its own
    assert rl.sft_team(None, "tiny", 0, SMALL_SFT) == team  # and later runs find it in the cache
