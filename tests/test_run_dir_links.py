"""What ``--overwrite`` and ``--resume`` remove from a run directory: only the files its runs recorded writing, as
they wrote them (never a user's file added during a run, nor one named like a temporary file), and never anything
outside the directory, whatever links it holds."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from joy_trainers.errors import UsageError
from joy_trainers.rundir import MANIFEST, RunDir, read_manifest, save_team, temp_path, write_json_atomic


class FakeTeam:
    """What :func:`save_team` needs of a team: ``save(folder)``."""

    def save(self, folder: str) -> None:
        Path(folder, "math").mkdir(parents=True)
        Path(folder, "team.json").write_text("{}")
        Path(folder, "math", "adapter_model.safetensors").write_bytes(b"weights")


def _finished_run(path: Path) -> RunDir:
    """A run directory as a run leaves it: results and a team, recorded."""
    run = RunDir(path, "x")
    run.claim()
    write_json_atomic(run.path / "results.json", {"steps": 1})
    save_team(FakeTeam(), run.path / "team")
    run.release()
    return run


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


# ------------------------------------------------------------------------------------ row 1: links
@pytest.mark.parametrize("option", ["overwrite", "resume"])
def test_a_team_that_links_to_another_run_is_refused_in_one_line_and_the_other_run_is_untouched(tmp_path, option):
    victim = _finished_run(tmp_path / "victim").path
    before = _tree(victim)
    out = _finished_run(tmp_path / "sym2").path
    shutil.rmtree(out / "team")
    (out / "team").symlink_to(Path("..") / "victim" / "team")  # ln -s ../victim/team sym2/team
    with pytest.raises(UsageError) as refused:
        RunDir(out, "x").claim(**{option: True})
    line = str(refused.value)
    assert "\n" not in line and f"{out / 'team'} is a link to {victim.resolve() / 'team'}" in line, line
    assert "outside the run directory" in line and "remove the link yourself" in line, line
    assert _tree(victim) == before and (victim / "team" / "team.json").read_text() == "{}"
    assert (out / "team").is_symlink() and (out / "results.json").is_file()  # nothing changed in either


def test_a_link_inside_the_run_directory_is_removed_as_a_link_never_through_it(tmp_path):
    out = _finished_run(tmp_path / "run").path
    mine = out / "notes"  # a user's folder and file beside the run's
    mine.mkdir()
    (mine / "team.json").write_text("mine")
    (mine / "math").mkdir()
    (mine / "math" / "adapter_model.safetensors").write_text("mine")
    (out / "todo.txt").write_text("mine")
    shutil.rmtree(out / "team")
    (out / "team").symlink_to("notes")  # the recorded team/... now lead through a link
    (out / "results.json").unlink()
    (out / "results.json").symlink_to("todo.txt")  # a recorded file now a link
    run = RunDir(out, "x")
    removed = run.claim(overwrite=True)
    run.release()
    assert sorted(removed) == ["results.json", "team"]
    assert not os.path.lexists(out / "team") and not os.path.lexists(out / "results.json")
    assert (mine / "team.json").read_text() == "mine" and (mine / "math" / "adapter_model.safetensors").is_file()
    assert (out / "todo.txt").read_text() == "mine"


def test_a_team_saved_over_a_link_replaces_the_link_and_leaves_what_it_named(tmp_path):
    victim = _finished_run(tmp_path / "victim").path
    (victim / "team" / "notes.md").write_text("the victim's")
    before = _tree(victim)
    run = RunDir(tmp_path / "run", "x")
    run.claim()
    (run.path / "team").symlink_to(victim / "team")
    save_team(FakeTeam(), run.path / "team")  # the end of a run: no crash, nothing written through the link
    run.release()
    assert not (run.path / "team").is_symlink() and (run.path / "team" / "team.json").is_file()
    assert _tree(victim) == before and (victim / "team" / "notes.md").read_text() == "the victim's"


# ------------------------------------------------------------------------------------ row 2: what a run records
def test_a_users_files_added_during_a_run_are_not_recorded_and_survive_overwrite(tmp_path):
    run = RunDir(tmp_path / "run", "x")
    run.claim()
    run.checkpoints.mkdir()
    (run.path / "base").mkdir()
    write_json_atomic(run.checkpoints / "sft.json", {"done": []})
    mine = [run.checkpoints / "NOTES.md", run.path / "base" / "NOTES.md", run.path / "eval-mine.json"]
    for file in mine:  # the user's, while the run goes
        file.write_text("mine")
    write_json_atomic(run.path / "base" / "config.json", {})
    save_team(FakeTeam(), run.path / "team")
    run.release()
    recorded = read_manifest(run.path)
    assert recorded == [
        "base/config.json",
        "checkpoints/sft.json",
        "team/math/adapter_model.safetensors",
        "team/team.json",
    ]
    again = RunDir(run.path, "x")
    removed = again.claim(overwrite=True)
    again.release()
    assert sorted(removed) == recorded
    assert all(file.read_text() == "mine" for file in mine)
    kept = ["base", "base/NOTES.md", "checkpoints", "checkpoints/NOTES.md", "eval-mine.json"]
    assert _tree(run.path) == [".joy-run.json", ".lock", *kept]


def test_resume_removes_only_the_runs_own_temporary_files(tmp_path):
    out = _finished_run(tmp_path / "run").path
    users = [out / ".notes.tmp-2024", out / "checkpoints" / ".plan.tmp-1", out / "notes.tmp"]
    (out / "checkpoints").mkdir()
    for file in users:
        file.write_text("mine")
    orphans = [
        temp_path(out / "results.json"),  # what a run killed mid-write leaves
        temp_path(out / "checkpoints" / "step-4"),
        out / ".results.json.tmp-99999",  # the names earlier versions gave them
        out / "checkpoints" / ".tmp-step-4-99999",
    ]
    for file in orphans:
        file.write_text("{")
    run = RunDir(out, "x")
    run.claim(resume=True)
    run.release()
    assert all(file.read_text() == "mine" for file in users)
    assert not any(os.path.lexists(file) for file in orphans)


# ------------------------------------------------------------------------------------ a whole run
def test_a_run_records_exactly_the_files_it_wrote_and_overwrite_keeps_a_users_file_added_meanwhile(sft_run, tmp_path):
    from quick_runs import QuickTrainer, logged_steps, quick_values

    from joy_trainers.grpo import GRPOConfig

    out = tmp_path / "run"
    mine = [out / "checkpoints" / "NOTES.md", out / "base" / "NOTES.md", out / "eval-notes.json"]

    def add_notes(step: int) -> None:
        if step == 3:  # after the first checkpoint
            for file in mine:
                file.parent.mkdir(exist_ok=True)
                file.write_text("mine")

    config = GRPOConfig.from_dict(quick_values(sft_run, out, steps_per_iteration=4))
    QuickTrainer(config, on_step=add_notes).train()
    written = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() or p.is_symlink()}
    recorded = set(json.loads((out / MANIFEST).read_text())["files"])
    assert recorded == written - {".lock", MANIFEST} - {str(f.relative_to(out)) for f in mine}
    config = GRPOConfig.from_dict(quick_values(sft_run, out, steps_per_iteration=2, overwrite=True))
    assert QuickTrainer(config).train()["steps"] == 2 and logged_steps(out) == [1, 2]
    assert all(file.read_text() == "mine" for file in mine)
