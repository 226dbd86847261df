"""``examples/gpu/smol_check.py``: its bootstrap intervals, the choice of RL steps within the budget, the table, and
``smol_check.sh --dry-run`` end to end on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from quick_runs import load_script

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "gpu" / "smol_check.sh"
DRIVER = ROOT / "examples" / "gpu" / "smol_check.py"


check = load_script(DRIVER)


# ------------------------------------------------------------------------------------------------ bootstrap
def test_an_interval_holds_the_mean_and_lies_within_the_values():
    values = [1, 0, 0, 1, 1, 0, 1, 1, 0, 1, 1, 1]
    iv = check.bootstrap_interval(values)
    assert iv.estimate == pytest.approx(sum(values) / len(values))
    assert 0.0 <= iv.low < iv.estimate < iv.high <= 1.0


def test_an_interval_narrows_with_more_tasks():
    small = check.bootstrap_interval([1, 0, 0, 0] * 10)
    large = check.bootstrap_interval([1, 0, 0, 0] * 250)
    assert small.estimate == large.estimate == 0.25
    assert large.high - large.low < (small.high - small.low) / 3


def test_an_interval_of_a_constant_is_that_constant():
    assert tuple(check.bootstrap_interval([1.0] * 30)) == (1.0, 1.0, 1.0)
    assert tuple(check.bootstrap_interval([0] * 30)) == (0.0, 0.0, 0.0)


def test_an_interval_is_reproducible_and_its_seed_matters():
    values = [0.1 * i for i in range(40)]
    assert check.bootstrap_interval(values) == check.bootstrap_interval(values)
    assert check.bootstrap_interval(values, seed=1) != check.bootstrap_interval(values, seed=2)


def test_a_wider_level_gives_a_wider_interval():
    values = [1, 0, 1, 1, 0, 0, 1, 0, 1, 1] * 5
    narrow = check.bootstrap_interval(values, level=0.5)
    wide = check.bootstrap_interval(values, level=0.99)
    assert wide.low <= narrow.low and narrow.high <= wide.high


def test_a_paired_difference_of_identical_lists_is_exactly_zero():
    values = [True, False, True, True, False] * 40
    assert tuple(check.paired_difference(values, values)) == (0.0, 0.0, 0.0)


def test_a_paired_difference_is_a_minus_b():
    a = [1, 1, 1, 0, 1, 1, 0, 1] * 10
    b = [0, 1, 0, 0, 1, 0, 0, 1] * 10
    diff = check.paired_difference(a, b)
    assert diff.estimate == pytest.approx(sum(a) / len(a) - sum(b) / len(b))
    assert 0.0 < diff.low < diff.estimate < diff.high
    flipped = check.paired_difference(b, a)
    assert flipped.estimate == pytest.approx(-diff.estimate)
    assert flipped.low == pytest.approx(-diff.high) and flipped.high == pytest.approx(-diff.low)


def test_pairing_narrows_the_interval_of_correlated_teams():
    """Two teams that agree on most tasks: resampling the same tasks for both sees only the tasks they differ on,
    so the paired interval is far narrower than the two teams' own intervals."""
    a = [1, 0] * 100
    b = list(a)
    b[0] = 0  # the second team fails one task the first one solves
    paired = check.paired_difference(a, b)
    own = check.bootstrap_interval(a)
    assert paired.estimate == pytest.approx(1 / 200)
    assert paired.high - paired.low < (own.high - own.low) / 5


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: check.bootstrap_interval([]), "empty"),
        (lambda: check.bootstrap_interval([1.0, float("nan")]), "not finite"),
        (lambda: check.bootstrap_interval([1, 0], level=1.0), "level"),
        (lambda: check.bootstrap_interval([1, 0], resamples=0), "resamples"),
        (lambda: check.paired_difference([1, 0, 1], [1, 0]), "3 and 2"),
    ],
)
def test_bad_inputs_are_errors_that_name_the_problem(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ------------------------------------------------------------------------------------------------ RL steps
def test_rl_steps_fill_the_budget_left():
    # 600 - 100 spent - 50 final evaluation - 10 overhead = 440 s; 440 / (10 * 1.25) = 35.2 -> 35 more
    steps, why = check.choose_rl_steps(600, 100, 50, 10, 10, max_steps=1000, factor=1.25)
    assert steps == 36
    assert "440 s left" in why


def test_rl_steps_are_capped_and_never_fewer_than_the_first():
    assert check.choose_rl_steps(600, 100, 50, 1, 0, max_steps=5)[0] == 5
    steps, why = check.choose_rl_steps(100, 120, 30, 5, 2, max_steps=5)
    assert steps == 1 and "no room" in why
    with pytest.raises(ValueError, match="max_steps"):
        check.choose_rl_steps(100, 0, 0, 1, 0, max_steps=0)


def test_the_table_shows_every_team_and_both_differences():
    evaluations = {
        key: {"success": success, "metrics": {"format_valid_rate": 0.5, "mean_reward": 0.25}}
        for key, success in (("untrained", [0, 0, 0, 1]), ("sft", [1, 0, 1, 1]), ("rl", [1, 1, 1, 1]))
    }
    summary = check.summary_rows(evaluations)
    assert summary["differences"]["sft-untrained"]["success_rate"]["estimate"] == pytest.approx(0.5)
    text = check.format_table(summary)
    for label in ("untrained", "after SFT", "after RL", "SFT - untrained", "RL - SFT", "95% interval"):
        assert label in text


# ------------------------------------------------------------------------------------------------ the script
def _environment() -> dict[str, str]:
    return {**os.environ, "PYTHON": sys.executable}


def test_the_dry_run_trains_evaluates_and_writes_the_table(tmp_path):
    out = tmp_path / "check"
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", str(out)],
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = json.loads((out / "smol_check.json").read_text())
    episodes = {key: len(ev["success"]) for key, ev in record["evaluations"].items()}
    assert set(episodes) == {"untrained", "sft", "rl"}
    assert set(episodes.values()) == {record["eval_tasks"]}
    assert len({tuple(ev["task_ids"]) for ev in record["evaluations"].values()}) == 1
    assert record["rl"]["steps"] >= 1
    assert json.loads((out / "rl" / "results.json").read_text())["steps"] == record["rl"]["steps"]
    assert set(record["phases_s"]) == {"sft", "eval_untrained", "eval_sft", "rl", "eval_rl"}
    for label in ("after SFT", "after RL", "SFT - untrained", "RL - SFT"):
        assert label in proc.stdout
    assert "after RL" in (out / "smol_check.log").read_text()


def test_an_output_directory_of_an_earlier_check_is_refused(tmp_path):
    (tmp_path / "sft").mkdir()
    proc = subprocess.run(
        [sys.executable, str(DRIVER), "--dry-run", "--out", str(tmp_path)],
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [
        f"smol_check: {tmp_path} already holds sft of an earlier check; pass a new output directory"
    ]


def test_without_a_gpu_the_check_refuses_in_one_line(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible: the check would run")
    proc = subprocess.run(
        [sys.executable, str(DRIVER), "--out", str(tmp_path / "check")],
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("smol_check: no CUDA GPU visible"), proc.stderr
