"""Numbers read back from a run directory and option values from the command line are bounded before use: an
integer of hundreds of digits, a value nested thousands of levels deep or megabytes long is one short line (or,
in a checkpoint, a checkpoint set aside), never a traceback, a line of megabytes, or a run whose own files its
tools refuse. And the advice of an error is the right one: a model that is neither cached nor reachable says so,
and a bad option under two processes is one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from test_tampered_runs import _memory_trainer

REPO = Path(__file__).resolve().parent.parent
HUGE = 10**400
"""An integer no float holds (``float(HUGE)`` raises ``OverflowError``)."""


def _one_line(capsys, call) -> tuple[int, str]:
    """The exit status of ``call()`` (a CLI entry point that stops) and the one line it printed on stderr."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        call()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, [line[:200] for line in err[:5]]
    return stop.value.code, err[0]


# ------------------------------------------------------------------------------------ numbers of a run directory
@pytest.fixture
def finished(sft_run, tmp_path):
    """A copy of a finished run directory with a memory bank: a team, its results.json and memory/master.json."""
    from joy_agents.memory import MemoryBank

    run = tmp_path / "run"
    shutil.copytree(sft_run, run)
    config = {"max_new_tokens": 8, "max_cycles": 2, "max_prompt_tokens": 128, "eval_tasks": 1, "seed": 0}
    results = {"trainer": "joyagents_grpo", "env_id": "joy/math-v0", "config": {**config, "memory": True}}
    (run / "results.json").write_text(json.dumps(results))
    bank = MemoryBank("master")
    bank.write("refund my order", 0, "<answer>ok</answer>", 1.0, 0.0, 1)
    (run / "memory").mkdir()
    (run / "memory" / "master.json").write_text(json.dumps(bank.to_dict()))
    return run


@pytest.mark.parametrize(
    "file, damage, expected",
    [
        ("memory", lambda b: b["entries"][0].update(embedding=[HUGE] * 512), "entries[0].embedding must be"),
        ("memory", lambda b: b["entries"][0].update(margin=HUGE), "entries[0].margin must be a finite number"),
        ("memory", lambda b: b["entries"][0].update(reward=-HUGE), "entries[0].reward must be a finite number"),
        ("memory", lambda b: b["entries"][0].update(time=HUGE), "entries[0].time must be an int in"),
        ("memory", lambda b: b["entries"][0].update(embedding=[1e300] * 512), "(a unit vector's)"),
        ("results", lambda r: r["config"].update(memory_half_life=HUGE), "half_life must be a number in"),
        ("results", lambda r: r["config"].update(memory_top_n=HUGE), "top_n must be an int in"),
        ("team", lambda t: t["config"].update(lora_alpha=HUGE), "lora_alpha must be in"),
        ("team", lambda t: t["config"].update(lora_r=HUGE), "lora_r must be an int in"),
    ],
)
def test_joy_eval_refuses_huge_numbers_in_a_run_directory_in_one_line(
    finished, capsys, monkeypatch, file, damage, expected
):
    from joy_trainers import cli

    path = {
        "memory": finished / "memory" / "master.json",
        "results": finished / "results.json",
        "team": finished / "team" / "team.json",
    }[file]
    data = json.loads(path.read_text())
    damage(data)
    path.write_text(json.dumps(data))
    monkeypatch.setattr(cli, "evaluate_team", lambda *a, **kw: pytest.fail("evaluated a damaged run"))
    code, line = _one_line(capsys, lambda: cli.eval_main([str(finished), "--tasks", "1"]))
    assert code == 2 and line.startswith("joy-eval: error:") and expected in line, line
    assert path.name in line and len(line) < 500, line


def _rank_python_state(rng):
    rng["ranks"][0]["python"][1][0] = HUGE


@pytest.mark.parametrize(
    "file, damage",
    [
        ("state.json", lambda s: s["memory"]["master"]["entries"][0].update(embedding=[HUGE] * 512)),
        ("state.json", lambda s: s.update(wall_s=HUGE)),
        ("state.json", lambda s: s.update(baseline={"success_rate": HUGE})),
        ("rng.json", _rank_python_state),
        ("rng.json", lambda r: r["python"].__setitem__(2, HUGE)),  # the cached normal: kept as any object
    ],
)
def test_a_checkpoint_holding_a_huge_number_is_kept_aside_and_the_run_falls_back(
    sft_run, tmp_path, capsys, file, damage
):
    from quick_runs import Crash, logged_steps, quick_values

    from joy_trainers.grpo import GRPOConfig

    trainer = _memory_trainer()
    out = tmp_path / "run"
    with pytest.raises(Crash):
        trainer(GRPOConfig.from_dict(quick_values(sft_run, out)), crash_at=5).train()
    path = out / "checkpoints" / "step-4" / file
    data = json.loads(path.read_text())
    damage(data)
    path.write_text(json.dumps(data))
    capsys.readouterr()
    results = trainer(GRPOConfig.from_dict(quick_values(sft_run, out, resume=True))).train()
    said = [line for line in capsys.readouterr().out.splitlines() if "step-4" in line]
    assert len(said) == 1 and "resumed from" in said[0] and "kept aside as step-4.rejected" in said[0], said
    assert file in said[0] and len(said[0]) < 800, said
    assert results["steps"] == 6 and logged_steps(out) == [1, 2, 3, 4, 5, 6]


def test_a_metrics_row_holding_a_huge_number_is_one_line_on_resume(sft_run, tmp_path):
    from quick_runs import Crash, QuickTrainer, quick_values

    from joy_trainers.errors import UsageError
    from joy_trainers.grpo import GRPOConfig

    out = tmp_path / "run"
    with pytest.raises(Crash):
        QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, out)), crash_at=3).train()
    lines = (out / "metrics.jsonl").read_text().splitlines()
    row = json.loads(lines[1])
    row["charts/reward_mean"] = HUGE
    lines[1] = json.dumps(row)
    (out / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(UsageError) as refused:
        QuickTrainer(GRPOConfig.from_dict(quick_values(sft_run, out, resume=True))).train()
    line = str(refused.value)
    assert "metrics.jsonl line 2: 'charts/reward_mean'" in line and "\n" not in line and len(line) < 400, line


# ------------------------------------------------------------------------------------ option values
@pytest.fixture
def no_training(monkeypatch):
    """``joy-train`` that stops before any work: a config accepted where it should be refused fails the test."""
    from joy_trainers.base import BaseTrainer

    monkeypatch.setattr(BaseTrainer, "train", lambda self: pytest.fail("a run started"))


def _deep_yaml(path: Path) -> list[str]:
    path.write_text("env_kwargs: " + "[" * 5000 + "]" * 5000 + "\n")
    return ["--config", str(path)]


def _block_yaml(path: Path) -> list[str]:
    path.write_text("".join(" " * i + f"k{i}:\n" for i in range(1200)) + " " * 1200 + "x: 1\n")
    return ["--config", str(path)]


def _digits_yaml(path: Path) -> list[str]:
    path.write_text("seed: " + "7" * 5000 + "\n")
    return ["--config", str(path)]


def _big_yaml(path: Path) -> list[str]:
    path.write_text("model: " + "x" * (3 * 2**20) + "\n")
    return ["--config", str(path)]


@pytest.mark.parametrize(
    "argv, expected",
    [
        (_deep_yaml, "nests deeper than YAML can be read"),
        (_block_yaml, "nests deeper than YAML can be read"),
        (_digits_yaml, "holds an integer of more than"),
        (_big_yaml, "bytes, above the"),
        (lambda p: ["--set", "env_kwargs=" + "[" * 15000 + "]" * 15000], "nests lists and objects deeper"),
        (lambda p: ["--set", "env_kwargs=" + '{"a": ' * 15000 + "1" + "}" * 15000], "nests lists and objects"),
        (lambda p: ["--set", "env_kwargs=" + "[" * 40 + "]" * 40], "nests lists and objects 40 levels deep"),
        (lambda p: ["--set", "seed=" + "7" * 5000], "holds an integer of more than"),
        (lambda p: ["--set", "seed=" + "7" * 4000], "out of range"),
        (lambda p: ["--set", "env_kwargs=" + json.dumps({"path": "x" * (2 * 2**20)})], "characters long, above"),
        (lambda p: ["--set", "eval_split=" + "y" * 100000], "eval_split must be one of"),
        (lambda p: ["--set", "k" * 100000 + "=1"], "unknown GRPOConfig option(s)"),
        (lambda p: ["--seed", "7" * 5000], "argument --seed: a value of 5000 characters"),
    ],
)
def test_deep_huge_or_long_option_values_are_one_short_line(no_training, tmp_path, capsys, argv, expected):
    from joy_trainers import cli

    args = ["--trainer", "grpo", "--output-dir", str(tmp_path / "run"), *argv(tmp_path / "c.yaml")]
    code, line = _one_line(capsys, lambda: cli.train_main(args))
    assert code == 2 and line.startswith("joy-train: error:") and expected in line, line[:600]
    assert len(line) < 1100, len(line)


def test_options_a_run_accepts_are_read_back_by_its_own_tools_and_larger_ones_are_refused(tmp_path):
    from joy_trainers.checks import read_results
    from joy_trainers.cli import build_config
    from joy_trainers.errors import UsageError
    from joy_trainers.grpo import GRPOTrainer
    from joy_trainers.resume_config import CONFIG_MAX_BYTES, read_config, write_config
    from joy_trainers.rundir import JSON_DEPTH_MAX, run_results, write_results

    env = ["env_id=joy/math-v0"]
    deepest = {"path": json.loads("[" * (JSON_DEPTH_MAX - 3) + "]" * (JSON_DEPTH_MAX - 3))}  # results.json: 32 deep
    for sets in (
        [*env, "model=" + "m" * (CONFIG_MAX_BYTES // 2 - 8192)],  # a long option, below what --resume reads back
        [*env, f"env_kwargs={json.dumps(deepest)}"],  # the deepest value
    ):
        cfg = build_config(GRPOTrainer, None, None, sets)
        run = tmp_path / f"run-{len(sets[1])}"
        run.mkdir()
        write_config(run, cfg)
        assert read_config(run / "config.json", type(cfg))["env_id"] == "joy/math-v0"  # what --resume reads
        results = run_results("grpo", cfg, model=cfg.model, steps=0, wall_s=0.0, metrics={}, baseline_metrics=None)
        write_results(run, results)
        assert read_results(run)["config"]["env_kwargs"] == cfg.env_kwargs  # what joy-eval reads
    deeper = {"path": [deepest["path"]]}
    for sets, expected in (
        ([*env, "model=" + "m" * CONFIG_MAX_BYTES], "characters long, above"),
        ([*env, "model=" + "m" * (CONFIG_MAX_BYTES // 2)], "the options of a run take at most"),
        ([*env, f"env_kwargs={json.dumps(deeper)}"], "nests lists and objects 31 levels deep"),
    ):
        with pytest.raises(UsageError) as refused:
            build_config(GRPOTrainer, None, None, sets)
        assert expected in str(refused.value) and len(str(refused.value)) < 400, str(refused.value)[:400]


# ------------------------------------------------------------------------------------ the right advice
def test_a_model_neither_cached_nor_reachable_is_one_line_saying_so(no_training, tmp_path, capsys, monkeypatch):
    from joy_trainers import cli
    from joy_trainers.sft import SFTTrainer

    monkeypatch.setattr(SFTTrainer, "train", lambda self: (self.check(), pytest.fail("a run started")))
    model = "joyagents-no-such-org/no-such-model-0"
    args = ["--trainer", "sft", "--set", f"model={model}", "--set", "eval_tasks=0", "--output-dir", str(tmp_path / "r")]
    code, line = _one_line(capsys, lambda: cli.train_main(args))
    assert code == 2 and f"model='{model}' is neither a local directory nor in the local Hugging Face cache" in line
    assert "free space" not in line and f"hf download {model}" in line, line


def test_a_failed_model_download_found_while_loading_is_not_called_a_full_disk(capsys):
    from huggingface_hub.errors import LocalEntryNotFoundError

    from joy_trainers import cli

    def load():
        try:
            raise LocalEntryNotFoundError("Cannot find the requested files in the disk cache")
        except LocalEntryNotFoundError as exc:
            raise OSError(
                "We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the "
                "cached files."
            ) from exc

    code, line = _one_line(capsys, lambda: cli._run("joy-train", load))
    assert code == 1 and "neither in the local Hugging Face cache nor reachable" in line, line
    assert "free space" not in line, line


@pytest.mark.skipif(shutil.which("accelerate") is None, reason="accelerate launcher not on PATH")
def test_a_bad_option_under_two_processes_is_one_line_and_none_of_our_tracebacks(tmp_path):
    from quick_runs import TWO_PROCESSES

    cmd = [*TWO_PROCESSES, "-m", "joy_trainers.cli", "--trainer", "grpo", "--output-dir", str(tmp_path / "r")]
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}
    for bad in (["--set", "no_such_option=1"], ["--seed", "-1"]):
        done = subprocess.run([*cmd, *bad], env=env, capture_output=True, text=True, timeout=300)
        said = [line for line in done.stderr.splitlines() if "joy-train: error:" in line]
        frames = [line for line in done.stderr.splitlines() if line.strip().startswith('File "')]
        ours = [line for line in frames if "/joy_trainers/" in line or "/joy_agents/" in line]
        assert done.returncode != 0 and len(said) == 1 and not ours, done.stderr[-3000:]
        assert not (tmp_path / "r").exists()  # the launcher's own report of the failure follows (docs/distributed.md)
