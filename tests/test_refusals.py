"""Inputs refused in one line that names them: a path that is no model, a file that is no run directory, a
tampered weights file (in joy-eval and TeamPolicy.load), unknown reset options; and evaluations of other envs
or task sources written beside the run's own instead of over it."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest

import joy_env
from joy_trainers.cli import eval_file_name, eval_main, train_main


class _Planted:
    def __reduce__(self):
        return (print, ("planted code ran",))


def _sft_like_run(tiny_dir, run: Path) -> None:
    from joy_agents.policy import TeamConfig, TeamPolicy

    shutil.copytree(tiny_dir, run / "base")
    TeamPolicy(TeamConfig(model=str(run / "base"), lora_r=2, lora_alpha=4)).save(str(run / "team"))
    config = {"max_length": 160, "max_new_tokens": 8, "eval_max_cycles": 2, "seed": 0, "eval_tasks": 1}
    (run / "results.json").write_text(json.dumps({"trainer": "sft", "env_id": "joy/math-v0", "config": config}))


def _one_error_line(err: str, prog: str) -> str:
    lines = [line for line in err.splitlines() if line.strip() and not line.lstrip().startswith("Loading")]
    lines = [line.rpartition("\r")[2] for line in lines]  # progress bars redraw with \r
    lines = [line for line in lines if line.strip() and not line.startswith("Loading")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"{prog}: error:")
    return lines[0]


def test_a_model_path_that_does_not_exist_is_no_such_model(capsys, tmp_path):
    for trainer in ("grpo", "sft"):
        with pytest.raises(SystemExit) as exit_:
            train_main(["--trainer", trainer, "--set", "model=/nonexistent/model", "--output-dir", str(tmp_path / "r")])
        line = _one_error_line(capsys.readouterr().err, "joy-train")
        assert exit_.value.code == 2 and "no such model" in line and "/nonexistent/model" in line
        assert "sft_run" not in line


def test_joy_eval_of_a_plain_file_says_it_is_not_a_run_directory(capsys, tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(SystemExit) as exit_:
        eval_main([str(tmp_path / "afile")])
    line = _one_error_line(capsys.readouterr().err, "joy-eval")
    assert exit_.value.code == 2 and "is a file, not a run directory" in line


@pytest.mark.parametrize("target", ["adapter", "base"])
def test_a_tampered_weights_file_is_one_line_in_joy_eval_and_team_load(tiny_dir, tmp_path, capsys, target):
    from joy_agents.policy import TeamPolicy

    run = tmp_path / "run"
    _sft_like_run(tiny_dir, run)
    if target == "adapter":
        (run / "team" / "math" / "adapter_model.safetensors").unlink()
        planted = run / "team" / "math" / "adapter_model.bin"
    else:
        (run / "base" / "model.safetensors").unlink()
        planted = run / "base" / "pytorch_model.bin"
    planted.write_bytes(pickle.dumps(_Planted()))
    with pytest.raises(ValueError) as exc:
        TeamPolicy.load(str(run / "team"))
    assert exc.value.__cause__ is None and exc.value.__suppress_context__
    assert "\n" not in str(exc.value) and str(planted) in str(exc.value) and "refused" in str(exc.value)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        eval_main([str(run), "--tasks", "1"])
    out = capsys.readouterr()
    line = _one_error_line(out.err, "joy-eval")
    assert exit_.value.code == 2 and planted.name in line and "planted code ran" not in out.out + out.err
    assert "weights_only" not in line


def test_unknown_reset_options_are_refused():
    env = joy_env.make("joy/math-v0", split="test", seed=0)
    with pytest.raises(ValueError, match=r"unknown reset option\(s\) \['foo'\]; valid: task, task_id, task_index"):
        env.reset(options={"foo": 1})
    env.reset(options={"options": 1})  # what PettingZoo's conformance test passes
    env.reset(options={"task_index": 0})


def test_evaluations_are_named_by_env_options_and_split():
    run_env = ("joy/mixed-v0", {})
    assert eval_file_name("joy/mixed-v0", {}, "test", run_env) == "eval-test.json"  # the run's own env
    tau2 = eval_file_name("joy/ecommerce-v0", {"source": "tau2"}, "test", run_env)
    assert tau2 == "eval-ecommerce-v0-source=tau2-test.json"
    assert eval_file_name("joy/ecommerce-v0", {"source": "tau2"}, "all", run_env).endswith("-all.json")
    with_path = eval_file_name("joy/math-v0", {"source": "gsm8k", "path": "/data/gsm8k/test.jsonl"}, "test", run_env)
    assert with_path.startswith("eval-math-v0-path=") and "/" not in with_path and with_path.endswith("-test.json")
    assert eval_file_name("joy/ecommerce-v0", {}, "test", ("joy/ecommerce-v0", {"source": "tau2"})) == (
        "eval-ecommerce-v0-test.json"
    )


def test_joy_eval_on_another_source_keeps_the_runs_own_evaluation(tiny_dir, tmp_path, capsys):
    run = tmp_path / "run"
    _sft_like_run(tiny_dir, run)
    gsm8k = Path(__file__).parent / "data" / "gsm8k_sample.jsonl"
    eval_main([str(run), "--tasks", "1"])
    eval_main([str(run), "--tasks", "1", "--env-kwargs", json.dumps({"source": "gsm8k", "path": str(gsm8k)})])
    names = sorted(p.name for p in run.glob("eval-*.json"))
    assert len(names) == 2 and "eval-test.json" in names
    assert json.loads((run / "eval-test.json").read_text())["env_kwargs"] == {}
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        eval_main([str(run), "--tasks", "1", "--split", "all"])  # the generated math tasks have no split "all"
    line = _one_error_line(capsys.readouterr().err, "joy-eval")
    assert exit_.value.code == 2 and "'all'" in line and "no such split" in line
