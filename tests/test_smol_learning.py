"""``benchmarks/smol_learning.py``: its report (teams, paired differences over seeds, sampled figures), its phases
on disk (a finished phase is read back, also from a published copy; a study of other settings refused), and
``--quick`` end to end (slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from quick_runs import load_script

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "smol_learning.py"


sl = load_script(SCRIPT)


def _evaluation(success, format_valid=None):
    return {"success": [float(x) for x in success], "format_valid": format_valid or [1.0] * len(success)}


def test_one_seed_reports_each_method_once_with_the_four_paired_differences():
    evaluations = {
        "untrained": _evaluation([0, 0, 0, 0], [0.0] * 4),
        "sft": _evaluation([1, 0, 0, 0]),
        "joyagents_grpo-s0": _evaluation([1, 1, 1, 0]),
        "grpo-s0": _evaluation([1, 1, 0, 0]),
    }
    summary = sl.report(evaluations, [0])
    assert list(summary["teams"]) == ["untrained", "sft", "joyagents_grpo", "grpo"]
    assert summary["teams"]["joyagents_grpo"]["success"]["estimate"] == pytest.approx(0.75)
    diffs = {k: v["success"]["estimate"] for k, v in summary["differences"].items()}
    assert diffs == pytest.approx(
        {"sft - untrained": 0.25, "joyagents_grpo - sft": 0.5, "grpo - sft": 0.25, "joyagents_grpo - grpo": 0.25}
    )
    assert summary["differences"]["sft - untrained"]["format_valid"]["estimate"] == pytest.approx(1.0)
    for d in summary["differences"].values():
        assert d["success"]["low"] <= d["success"]["estimate"] <= d["success"]["high"]
    text = sl.table(summary)
    assert "joyagents_grpo - grpo" in text and "+0.250" in text


def test_several_seeds_pair_the_mean_over_seeds_task_by_task_and_show_each_seed():
    evaluations = {
        "untrained": _evaluation([0, 0]),
        "sft": _evaluation([0, 0]),
        "joyagents_grpo-s0": _evaluation([1, 0]),
        "grpo-s0": _evaluation([0, 0]),
        "joyagents_grpo-s1": _evaluation([1, 1]),
        "grpo-s1": _evaluation([1, 0]),
    }
    summary = sl.report(evaluations, [0, 1])
    assert {"joyagents_grpo-s0", "joyagents_grpo-s1", "joyagents_grpo", "grpo"} <= set(summary["teams"])
    assert summary["teams"]["joyagents_grpo"]["success"]["estimate"] == pytest.approx(0.75)  # (1+1)/2, (0+1)/2
    assert summary["differences"]["joyagents_grpo - grpo"]["success"]["estimate"] == pytest.approx(0.5)
    assert summary["differences"]["joyagents_grpo-s1 - sft"]["success"]["estimate"] == pytest.approx(1.0)


def test_an_episode_counts_its_well_formed_turns_and_an_empty_one_none():
    nodes = [{"format_ok": True}, {"format_ok": False}, {"format_ok": True}, {"format_ok": True}]
    trajectories = [
        SimpleNamespace(
            task_id="a", domain="qa", success=True, result={"nodes": nodes}, reward=1.0, generated_tokens=7
        ),
        SimpleNamespace(task_id="b", domain="math", success=False, result={"nodes": []}, reward=-1, generated_tokens=0),
    ]
    values = sl.episode_values(trajectories)
    assert values["success"] == [1.0, 0.0] and values["format_valid"] == [0.75, 0.0]
    assert values["generated_tokens"] == 7 and values["task_ids"] == ["a", "b"]


def test_sampled_episodes_give_the_mean_success_and_pass_hat_k_per_task_and_pair_like_greedy_ones():
    values = {
        "task_ids": ["a", "a", "a", "b", "b", "b"],
        "success": [1.0, 1.0, 1.0, 1.0, 0.0, 0.0],
        "format_valid": [1.0, 1.0, 0.5, 1.0, 0.0, 0.5],
        "generated_tokens": 60,
    }
    sampled = sl.per_task(values, 3)
    assert sampled["task_ids"] == ["a", "b"] and sampled["sampled_success"] == pytest.approx([1.0, 1 / 3])
    assert sampled["pass^3"] == [1.0, 0.0] and sampled["sampled_format_valid"] == pytest.approx([5 / 6, 0.5])
    greedy = {"task_ids": ["a", "b"], "success": [1.0, 0.0], "format_valid": [1.0, 1.0], "reward": [1.2, 0.2]}
    sft = sl.merged(greedy, sampled)
    assert set(sft) == {
        "task_ids",
        "success",
        "format_valid",
        "sampled_success",
        "pass^3",
        "pass@3",
        "sampled_format_valid",
    }
    assert sft["pass@3"] == [1.0, 1.0]  # b: one of its three samples succeeds
    better = {**sft, "sampled_success": [1.0, 1.0], "pass^3": [1.0, 1.0]}
    summary = sl.report({"sft": sft, "joyagents_grpo-s0": better}, [0])
    diff = summary["differences"]["joyagents_grpo - sft"]
    assert diff["sampled_success"]["estimate"] == pytest.approx(1 / 3) and diff["pass^3"]["estimate"] == 0.5
    assert diff["success"]["estimate"] == 0.0
    with pytest.raises(SystemExit, match="other tasks"):
        sl.merged(greedy, {**sampled, "task_ids": ["b", "a"]})


def test_by_template_averages_each_teams_figures_over_the_tasks_of_a_template():
    teams = {"sft": {"task_ids": ["a", "b", "c"], "success": [1.0, 0.0, 1.0], "sampled_success": [0.5, 0.25, 1.0]}}
    out = sl.by_template(teams, ["capital", "river", "capital"])
    assert out["capital"] == {"n": 2, "sft": {"success": 1.0, "sampled_success": 0.75}}
    assert out["river"]["n"] == 1 and out["river"]["sft"]["sampled_success"] == 0.25


def test_a_phase_published_elsewhere_is_taken_and_every_finished_phase_published(tmp_path):
    published = tmp_path / "published"
    sl.Phases(tmp_path / "one", published).run("eval-sft-test", lambda: {"value": 1})
    assert (published / "phases" / "eval-sft-test.json").is_file()
    calls = []
    again = sl.Phases(tmp_path / "two", published).run("eval-sft-test", lambda: calls.append(1) or {"value": 2})
    assert calls == [] and again["value"] == 1 and (tmp_path / "two" / "phases" / "eval-sft-test.json").is_file()


def test_a_finished_phase_is_read_back_not_redone(tmp_path):
    phases = sl.Phases(tmp_path)
    calls = []

    def work():
        calls.append(1)
        return {"value": 3}

    first = phases.run("eval-sft", work)
    second = sl.Phases(tmp_path).run("eval-sft", work)
    assert calls == [1] and first == second and second["value"] == 3 and second["wall_s"] >= 0


def test_a_study_of_other_settings_is_refused_in_one_line(tmp_path):
    sl.claim(tmp_path, {"budget": 100, "seeds": [0]})
    sl.claim(tmp_path, {"budget": 100, "seeds": [0]})  # the same study continues
    with pytest.raises(SystemExit, match=r"other settings \(budget\).*same options"):
        sl.claim(tmp_path, {"budget": 200, "seeds": [0]})


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--budget", "0"], "--budget must be >= 1"),
        (["--eval-tasks", "0"], "--eval-tasks must be >= 1"),
        (["--seeds", "1", "1"], "--seeds must be distinct"),
        (["--eval-rows", "0"], "--eval-rows must be in [1, 4096], got 0"),
    ],
)
def test_bad_options_are_one_line(tmp_path, argv, message, capsys):
    with pytest.raises(SystemExit):
        sl.parse_args(["--out", str(tmp_path), *argv])
    assert message in capsys.readouterr().err


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


@pytest.mark.slow
def test_quick_runs_every_phase_then_a_second_call_redoes_none(tmp_path):
    out = tmp_path / "study"
    command = [sys.executable, str(SCRIPT), "--quick", "--out", str(out), "--eval-tasks", "3", "--train-tasks", "2"]
    command += ["--untrained", "--eval-rows", "2", "--set", "groups_per_step=2", "--budget", "200"]
    first = subprocess.run(command, env=_environment(), capture_output=True, text=True, timeout=1500)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    record = json.loads((out / "smol_learning.json").read_text())
    assert record["complete"] and set(record["summary"]) == set(sl.EVAL_SETS)
    for summary in record["summary"].values():
        assert set(summary["teams"]) == {"untrained", "sft", "joyagents_grpo", "grpo"}
        assert set(summary["differences"]) == {f"{a} - {b}" for a, b in sl.PAIRS}
        assert set(summary["differences"]["joyagents_grpo - sft"]) == {
            "success", "format_valid", "sampled_success", "pass^2", "pass@2", "sampled_format_valid"
        }  # fmt: skip
    assert record["sets"]["train"]["split"] == "train" and len(record["sets"]["train"]["tasks"]) == 2
    assert sum(t["n"] for t in record["by_template"]["test"].values()) == 3
    assert all(r["generated_tokens"] >= 200 and r["curves"]["reward"] for r in record["rl"].values())
    assert all(r["curves"]["draws"] and r["tasks_drawn"] >= 2 for r in record["rl"].values())
    assert (out / "smol_learning.png").stat().st_size > 0
    evaluations = [json.loads(p.read_text()) for p in (out / "phases").glob("eval-*.json")]
    assert len(evaluations) == 24 and all(e["max_batch_rows"] == 2 for e in evaluations)  # 6 sampled episodes a set
    second = subprocess.run(command, env=_environment(), capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stdout.count("finished earlier") == 27  # sft, 2 runs, 4 teams x 3 sets x greedy and sampled
    other = subprocess.run([*command[:-1], "300"], env=_environment(), capture_output=True, text=True, timeout=600)
    assert other.returncode != 0 and "other settings (budget)" in other.stderr


def test_phases_outside_the_patterns_are_left_to_another_call_but_finished_ones_are_read(tmp_path):
    sl.Phases(tmp_path).run("eval-sft-test", lambda: {"value": 1})
    only = sl.Phases(tmp_path, only=["rl-grpo-*", "eval-grpo-*"])
    assert only.run("eval-sft-test", lambda: {"value": 2})["value"] == 1  # finished: read back
    assert only.run("eval-sft-validation", lambda: {"value": 3}) is None  # another call's
    assert only.run("eval-grpo-s0-test", lambda: {"value": 4})["value"] == 4
    assert not (tmp_path / "phases" / "eval-sft-validation.json").exists()
