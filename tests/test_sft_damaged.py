"""An ``sft`` run that a damaged checkpoint or a full disk interrupted resumes to the weights, steps and logged lines
of the run that was never interrupted: a damaged checkpoint (a team's, the fine-tuned base, TRL's own) is kept aside
as ``...rejected`` with one line and the run falls back past it; a write that fails anywhere in the run is one line
naming the path and the free space, and ``--resume`` continues from what was written before it."""

from __future__ import annotations

import contextlib
import errno
import shutil
from collections import Counter
from pathlib import Path

import pytest
from disk_support import fill, tmpfs
from test_sft_resume import digest, interrupt_at, logged
from test_sft_resume import values as resume_values

from joy_trainers import rundir, sft, sft_checkpoints, sft_plot, sft_trl
from joy_trainers.errors import WriteError
from joy_trainers.sft import SFTConfig, SFTTrainer

UNTRAINED = {"qa": 0, "ecommerce": 0, "general": 0}
"""Roles left as initialised: the run's stages are the base, the adapters' start, master and math."""


def values(tiny_dir, out: Path, **kw) -> dict:
    return resume_values(tiny_dir, out, **{"role_adapter_epochs": UNTRAINED, **kw})


@pytest.fixture(scope="module")
def whole(tiny_dir, tmp_path_factory):
    """The run never interrupted: its directory and results."""
    out = tmp_path_factory.mktemp("sft_whole") / "run"
    results = SFTTrainer(SFTConfig.from_dict(values(tiny_dir, out))).train()
    return out, results


def assert_as_whole(out: Path, results: dict, whole) -> None:
    whole_dir, whole_results = whole
    assert results["steps"] == whole_results["steps"]
    assert digest(out / "team") == digest(whole_dir / "team")
    assert logged(out) == logged(whole_dir)
    assert not (out / "work").exists()


# ------------------------------------------------------------------------------------ damaged checkpoints
def _zero(path: Path) -> None:
    path.write_bytes(b"")


def _halve(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize(
    "stage, step, damaged, damage, said, kept",
    [
        (  # the newest team: the run falls back to the one before it
            "math",
            3,
            "checkpoints/team-2/master/adapter_model.safetensors",
            _zero,
            "checkpoints/team-2 master/adapter_model.safetensors is 0 bytes, too short for a safetensors header "
            "(truncated); kept aside as checkpoints/team-2.rejected; the adapter stages continue from "
            "checkpoints/team-1 (after team)",
            "checkpoints/team-2.rejected",
        ),
        (  # the only team (the adapters as initialised): the adapters start again
            "master",
            3,
            "checkpoints/team-1/math/adapter_model.safetensors",
            _halve,
            "kept aside as checkpoints/team-1.rejected; the adapter stages run again from their start",
            "checkpoints/team-1.rejected",
        ),
        (
            "base",
            5,
            "work/base/checkpoint-4/model.safetensors",
            _halve,
            "work/base/checkpoint-4 model.safetensors holds tensor",
            "checkpoints/base-checkpoint-4.rejected",
        ),
        (
            "master",
            3,
            "work/master/checkpoint-2/trainer_state.json",
            _halve,
            "work/master/checkpoint-2 trainer_state.json is not valid JSON (truncated or damaged); kept aside as "
            "checkpoints/master-checkpoint-2.rejected; the master stage runs again from its start",
            "checkpoints/master-checkpoint-2.rejected",
        ),
        (
            "math",
            3,
            "work/math/checkpoint-2/optimizer.pt",
            _halve,
            "work/math/checkpoint-2 optimizer.pt is truncated or damaged (not a torch file); kept aside as "
            "checkpoints/math-checkpoint-2.rejected; the math stage runs again from its start",
            "checkpoints/math-checkpoint-2.rejected",
        ),
        (
            "master",
            3,
            "base/model.safetensors",
            _zero,
            "base/ model.safetensors is 0 bytes, too short for a safetensors header (truncated); kept aside as "
            "checkpoints/base.rejected; the base stage runs again from its start",
            "checkpoints/base.rejected",
        ),
    ],
    ids=["newest-team", "only-team", "trl-weights", "trl-state", "trl-optimizer", "base"],
)
def test_a_damaged_checkpoint_is_kept_aside_in_one_line_and_the_run_falls_back_to_the_whole_runs_weights(
    whole, tiny_dir, tmp_path, monkeypatch, capsys, stage, step, damaged, damage, said, kept
):
    out = tmp_path / "run"
    with monkeypatch.context() as m:
        interrupt_at(m, stage, step)
        with pytest.raises(KeyboardInterrupt):
            SFTTrainer(SFTConfig.from_dict(values(tiny_dir, out))).train()
    damage(out / damaged)
    capsys.readouterr()
    results = SFTTrainer(SFTConfig.from_dict(values(tiny_dir, out, resume=True))).train()
    lines = [line for line in capsys.readouterr().out.splitlines() if "kept aside" in line]
    assert len(lines) == 1 and lines[0].startswith("[sft] --resume: ") and said in lines[0], lines
    assert (out / kept).is_dir(), sorted(p.name for p in (out / "checkpoints").iterdir())
    assert_as_whole(out, results, whole)


def test_a_damaged_team_and_a_damaged_trl_checkpoint_after_it_are_each_kept_aside_in_one_line(
    whole, tiny_dir, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "run"
    with monkeypatch.context() as m:
        interrupt_at(m, "math", 3)
        with pytest.raises(KeyboardInterrupt):
            SFTTrainer(SFTConfig.from_dict(values(tiny_dir, out))).train()
    _zero(out / "checkpoints/team-2/team.json")
    _halve(out / "work/math/checkpoint-2/rng_state.pth")
    capsys.readouterr()
    results = SFTTrainer(SFTConfig.from_dict(values(tiny_dir, out, resume=True))).train()
    lines = [line for line in capsys.readouterr().out.splitlines() if "kept aside" in line]
    assert lines == [
        "[sft] --resume: checkpoints/team-2 team.json is not valid JSON (truncated or damaged); kept aside as "
        "checkpoints/team-2.rejected; the adapter stages continue from checkpoints/team-1 (after team)",
        "[sft] --resume: work/math/checkpoint-2 rng_state.pth is truncated or damaged (not a torch file); kept aside "
        "as checkpoints/math-checkpoint-2.rejected; the math stage runs again from its start",
    ]
    assert_as_whole(out, results, whole)


# ------------------------------------------------------------------------------------ a write that fails
def full_at(monkeypatch, pick) -> list[tuple[str, Path]]:
    """Every write of the run (its ``writing`` blocks: what and where, listed as they begin); the one that
    ``pick(what, n)`` selects (the ``n``-th write of ``what``) fails as on a full disk, before it writes a byte."""
    real = rundir.writing
    seen: Counter = Counter()
    writes: list[tuple[str, Path]] = []

    @contextlib.contextmanager
    def writing(path, what, cleanup=()):
        with real(path, what, cleanup):
            seen[what] += 1
            writes.append((what, Path(path)))
            if pick(what, seen[what]):
                raise OSError(errno.ENOSPC, "No space left on device")
            yield

    for module in (rundir, sft, sft_trl, sft_checkpoints, sft_plot):
        monkeypatch.setattr(module, "writing", writing)
    return writes


def _fail_then_resume(tiny_dir, out: Path, monkeypatch, pick) -> tuple[str, dict]:
    with monkeypatch.context() as m:
        full_at(m, pick)
        with pytest.raises(WriteError) as failed:
            SFTTrainer(SFTConfig.from_dict(values(tiny_dir, out))).train()
    line = str(failed.value)
    assert "\n" not in line and "No space left on device" in line and "MB free there" in line, line
    return line, SFTTrainer(SFTConfig.from_dict(values(tiny_dir, out, resume=True))).train()


@pytest.mark.parametrize(
    "what, n",
    [
        ("the metrics log", 3),
        ("the base stage's checkpoint of step 4", 1),
        ("the fine-tuned base", 1),
        ("the SFT progress", 1),
        ("the team at a stage boundary", 1),  # the adapters as initialised (a resume drew other ones)
        ("the master stage's checkpoint of step 4", 1),
        ("the team at a stage boundary", 2),
        ("the trained team", 1),
    ],
)
def test_a_full_disk_at_any_write_of_each_stage_is_one_line_and_resume_gives_the_whole_run(
    whole, tiny_dir, tmp_path, monkeypatch, what, n
):
    out = tmp_path / "run"
    line, results = _fail_then_resume(tiny_dir, out, monkeypatch, lambda w, k: (w, k) == (what, n))
    assert line.startswith(f"cannot write {what} at {out}"), line
    assert_as_whole(out, results, whole)


@pytest.mark.slow  # every write of a run: about 70 runs and resumes (ten minutes on two CPU cores)
def test_a_full_disk_at_every_write_of_the_run_resumes_to_the_whole_run(whole, tiny_dir, tmp_path, monkeypatch):
    with monkeypatch.context() as m:
        writes = full_at(m, lambda w, k: False)
        SFTTrainer(SFTConfig.from_dict(values(tiny_dir, tmp_path / "counted"))).train()
    claim = 2  # the manifest and config.json: a run refused before it began, nothing to resume
    for i in range(claim, len(writes)):
        out = tmp_path / f"run-{i}"
        count = iter(range(len(writes)))  # the writes so far: the i-th fails
        _, results = _fail_then_resume(tiny_dir, out, monkeypatch, lambda w, k, i=i, c=count: next(c) == i)
        assert_as_whole(out, results, whole)
        shutil.rmtree(out)


# ------------------------------------------------------------------------------------ a really full disk
@pytest.fixture
def small_disk(tmp_path):
    """A 64 MB tmpfs (root only), unmounted at the end."""
    with tmpfs(tmp_path / "disk", 64) as disk:
        yield disk


def _fill_before(monkeypatch, disk: Path, where: str) -> None:
    """Fill ``disk`` just before the run writes ``where``: the adapters as initialised (the first team), the
    fine-tuned base (3 MB left for its 5 MB of weights), or the base stage's TRL checkpoint of step 4
    (``trl-weights``: no room for its weights; ``trl-optimizer``: room for its weights, not its optimiser state)."""
    from transformers import PreTrainedModel, Trainer

    if where == "team":
        original = sft.save_team_checkpoint

        def filled(*args, **kwargs):
            fill(disk, 64 * 1024)
            return original(*args, **kwargs)

        monkeypatch.setattr(sft, "save_team_checkpoint", filled)
    elif where == "base":
        save_pretrained = PreTrainedModel.save_pretrained

        def filled_at_base(self, save_directory, *args, **kwargs):
            if Path(save_directory).name.endswith("base"):
                fill(disk, 3 * 10**6)
            return save_pretrained(self, save_directory, *args, **kwargs)

        monkeypatch.setattr(PreTrainedModel, "save_pretrained", filled_at_base)
    else:
        save = Trainer._save_checkpoint

        def filled_at_step_4(self, model, trial):
            if self.state.global_step == 4 and Path(self.args.output_dir).name == "base":
                fill(disk, 3 * 10**6 if where == "trl-weights" else 7 * 10**6)
            return save(self, model, trial)

        monkeypatch.setattr(Trainer, "_save_checkpoint", filled_at_step_4)


@pytest.mark.parametrize(
    "where, failed",
    [
        ("team", "the team at a stage boundary at {out}/checkpoints/team-1"),
        ("base", "the fine-tuned base at {out}/base"),
        ("trl-weights", "the base stage's checkpoint of step 4 at {out}/work/base/checkpoint-4"),
        ("trl-optimizer", "the base stage's checkpoint of step 4 at {out}/work/base/checkpoint-4"),
    ],
)
def test_a_really_full_disk_is_one_line_with_the_path_and_a_moved_run_resumes_to_the_whole_run(
    small_disk, whole, tiny_dir, tmp_path, monkeypatch, where, failed
):
    out = small_disk / "run"
    with monkeypatch.context() as m:
        _fill_before(m, small_disk, where)
        with pytest.raises(WriteError) as refused:
            SFTTrainer(SFTConfig.from_dict(values(tiny_dir, out))).train()
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"cannot write {failed.format(out=out)} (No space left on device, ")
    assert "MB free there)" in line, line
    left = [p for p in out.rglob("*") if p.name.startswith(".joy-tmp-") or p.name == "checkpoint-4"]
    assert left == []  # nothing half-written
    moved = tmp_path / "moved"  # a roomier disk
    shutil.move(out, moved)
    results = SFTTrainer(SFTConfig.from_dict(values(tiny_dir, moved, resume=True))).train()
    assert_as_whole(moved, results, whole)
