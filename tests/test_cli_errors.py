"""Every user mistake is one line on stderr naming the option, the value and the fix, with exit status 2,
found before any long work (no model is built, no team is loaded)."""

from __future__ import annotations

import json
import shutil

import pytest

from joy_agents.sampling.settings import VLLMConfig
from joy_env.demo import main as demo_main
from joy_trainers.cli import eval_main, train_main


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    """An empty model cache: a mistake must be reported before the tiny model is built into it."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("JOY_CACHE_DIR", str(cache))
    return cache


def _error(capsys, main, argv) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert exit_.value.code == 2, err
    assert len(lines) == 1, err
    return lines[0]


SFT = ["--trainer", "sft", "--preset", "tiny"]


@pytest.mark.parametrize(
    "content, expected",
    [
        (None, "no such file"),
        ("dir", "is a directory"),
        ("eval_tasks: [1, 2\nseed: 0\n", "not valid YAML"),
        ("- a\n- b\n", "expected a mapping"),
    ],
)
def test_config_file_mistakes(capsys, tmp_path, empty_cache, content, expected):
    path = tmp_path / "c.yaml"
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_text(content)
    line = _error(capsys, train_main, [*SFT, "--config", str(path)])
    assert line.startswith("joy-train: error: --config") and str(path) in line and expected in line
    assert not empty_cache.exists()


def test_an_option_of_the_wrong_type_is_named_with_its_value(capsys, empty_cache):
    line = _error(capsys, train_main, [*SFT, "--set", "sft_tasks=abc"])
    assert "option sft_tasks expects an integer, got 'abc'" in line and "--set sft_tasks=" in line
    line = _error(capsys, train_main, ["--trainer", "grpo", "--set", "top_k=3"])
    assert "unknown GRPOConfig option(s) ['top_k']" in line and "--list-options" in line
    line = _error(capsys, train_main, [*SFT, "--seed", "-1"])
    assert "--seed" in line and "'-1'" in line


def test_an_unwritable_output_directory_is_found_first(capsys, tmp_path, empty_cache):
    blocker = tmp_path / "file"
    blocker.write_text("")
    line = _error(capsys, train_main, [*SFT, "--output-dir", str(blocker / "run")])
    assert "--output-dir" in line and str(blocker / "run") in line and "cannot be written" in line
    assert not empty_cache.exists()  # before the tiny model build


def test_a_used_run_directory_needs_resume_or_overwrite(capsys, tmp_path, empty_cache):
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text("{}")
    line = _error(capsys, train_main, [*SFT, "--output-dir", str(run)])
    assert "--output-dir" in line and "not empty (results.json)" in line and "--overwrite" in line
    line = _error(capsys, train_main, ["--trainer", "grpo", "--output-dir", str(run), "--resume", "--overwrite"])
    assert "--resume" in line and "--overwrite" in line
    assert not empty_cache.exists()


def test_a_bad_env_id_is_found_before_the_model_or_team(capsys, tmp_path, empty_cache, sft_run):
    line = _error(capsys, train_main, [*SFT, "--set", "env_id=joy/shop-v9", "--output-dir", str(tmp_path / "a")])
    assert "env_id 'joy/shop-v9'" in line and "joy/mixed-v0" in line
    grpo = ["--trainer", "grpo", "--set", f"sft_run={json.dumps(sft_run)}", "--output-dir", str(tmp_path / "b")]
    line = _error(capsys, train_main, [*grpo, "--set", "env_id=joy/shop-v9"])
    assert "env_id 'joy/shop-v9'" in line
    assert not empty_cache.exists()


def test_a_bad_sft_run_is_found_before_any_work(capsys, tmp_path, empty_cache):
    missing = tmp_path / "nowhere"
    line = _error(
        capsys,
        train_main,
        ["--trainer", "grpo", "--set", f"sft_run={json.dumps(str(missing))}", "--output-dir", str(tmp_path / "run")],
    )
    assert f"sft_run '{missing}' does not exist" in line and "joy-train" in line
    line = _error(capsys, train_main, ["--trainer", "grpo", "--set", "model=gpt2", "--output-dir", str(tmp_path / "r")])
    assert "model='gpt2' needs sft_run" in line
    assert not empty_cache.exists()


@pytest.fixture
def finished_run(sft_run, tmp_path):
    """A copy of a finished run directory: a team and its results.json."""
    run = tmp_path / "run"
    shutil.copytree(sft_run, run)
    config = {"max_new_tokens": 8, "max_cycles": 2, "max_prompt_tokens": 128, "eval_tasks": 1, "seed": 0}
    (run / "results.json").write_text(json.dumps({"trainer": "grpo", "env_id": "joy/math-v0", "config": config}))
    return run


def test_joy_eval_mistakes(capsys, finished_run, tmp_path):
    line = _error(capsys, eval_main, [str(finished_run), "--tasks", "-5"])
    assert "--tasks" in line and "'-5'" in line and "integer in [1, 1000000]" in line
    line = _error(capsys, eval_main, [str(finished_run), "--tasks", "0"])
    assert "--tasks" in line and "'0'" in line
    line = _error(capsys, eval_main, [str(finished_run), "--env", "joy/nope"])
    assert "--env 'joy/nope'" in line and "joy/mixed-v0" in line
    line = _error(capsys, eval_main, [str(tmp_path / "nothing-here")])
    assert "does not exist" in line


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--trials", "0"], "argument --trials: invalid integer in [1, 100] value: '0'"),
        (["--trials", "-2"], "argument --trials: invalid integer in [1, 100] value: '-2'"),
        (["--trials", "2.5"], "argument --trials: invalid integer in [1, 100] value: '2.5'"),
        (["--trials", "many"], "argument --trials: invalid integer in [1, 100] value: 'many'"),
        (["--temperature", "-1"], "argument --temperature: invalid number in [0, 100] (0: greedy) value: '-1'"),
        (["--temperature", "nan"], "argument --temperature: invalid number in [0, 100] (0: greedy) value: 'nan'"),
        (["--temperature", "inf"], "argument --temperature: invalid number in [0, 100] (0: greedy) value: 'inf'"),
        (["--temperature", "hot"], "argument --temperature: invalid number in [0, 100] (0: greedy) value: 'hot'"),
    ],
)
def test_joy_eval_refuses_bad_trials_and_temperatures(capsys, finished_run, argv, expected):
    line = _error(capsys, eval_main, [str(finished_run), *argv])
    assert line.startswith("joy-eval: error:") and expected in line and "joy-eval --help" in line


def test_joy_eval_refuses_bad_engine_settings_in_a_runs_results(capsys, finished_run):
    saved = json.loads((finished_run / "results.json").read_text())
    for key, value, expected in (
        ("draft_tokens", -1, "draft_tokens must be an int >= 0 (0: no drafts), got -1"),
        ("draft_tokens", "3", "draft_tokens must be an int >= 0 (0: no drafts), got '3'"),
        ("draft_max_rows", 0, "draft_max_rows must be an int >= 1, got 0"),
        ("rollout_engine", "fast", "engine must be one of continuous, generate, vllm, got 'fast'"),
        ("vllm_options", {"gpu": 1}, "unknown vLLM option(s) ['gpu']"),
        ("vllm_options", [1], "expected an object of VLLMConfig fields"),
    ):
        config = {**saved["config"], key: value}
        (finished_run / "results.json").write_text(json.dumps({**saved, "config": config}))
        line = _error(capsys, eval_main, [str(finished_run), "--tasks", "1"])
        assert "results.json" in line and expected in line


def test_joy_eval_draft_tokens_reach_the_engine(finished_run, monkeypatch):
    from joy_trainers import cli

    seen = []
    monkeypatch.setattr(cli, "evaluate_team", lambda *a, **kw: seen.append(kw) or {"success_rate": 0.0})
    eval_main([str(finished_run), "--tasks", "1"])
    eval_main([str(finished_run), "--tasks", "1", "--draft-tokens", "0", "--draft-max-rows", "8"])
    settings = [kw["settings"] for kw in seen]
    assert [s.draft_tokens for s in settings] == [3, 0] and settings[0].vllm == VLLMConfig()
    played = [(kw["trials"], s.temperature) for kw, s in zip(seen, settings, strict=True)]
    assert played == [(1, 0.0), (1, 0.0)]  # one greedy play by default
    assert [s.draft_max_rows for s in settings] == [64, 8]


def test_joy_eval_on_a_half_written_run(capsys, finished_run):
    text = (finished_run / "results.json").read_text()
    (finished_run / "results.json").write_text(text[: len(text) // 2])
    line = _error(capsys, eval_main, [str(finished_run)])
    assert "results.json is not valid JSON" in line and "truncated" in line
    (finished_run / "results.json").unlink()
    line = _error(capsys, eval_main, [str(finished_run)])
    assert "has no results.json yet" in line
    (finished_run / "team" / "team.json").unlink()
    (finished_run / "checkpoints").mkdir()
    line = _error(capsys, eval_main, [str(finished_run)])
    assert "holds no team/team.json" in line and "--resume" in line


@pytest.mark.parametrize(
    "argv, option, value",
    [
        (["--episodes", "0"], "--episodes", "'0'"),
        (["--episodes", "-1"], "--episodes", "'-1'"),
        (["--seed", "-1"], "--seed", "'-1'"),
        (["--env", "joy/x"], "--env", "'joy/x'"),
    ],
)
def test_joy_demo_mistakes(capsys, argv, option, value):
    line = _error(capsys, demo_main, argv)
    assert line.startswith("joy-demo: error:") and option in line and value in line
