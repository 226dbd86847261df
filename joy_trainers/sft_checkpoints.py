"""What an ``sft`` run keeps so that ``--resume`` continues it after a crash, a Ctrl-C or a lost machine.

In the run directory:

- ``checkpoints/sft.json``: the stages finished (``base``, then each role's adapter), the optimiser steps
  they ran, their logs and the baseline metrics, written (atomically) at every stage boundary;
- ``checkpoints/team-<n>/``: the team as it stands after the last finished adapter stage (and before the
  first, so that the adapters a resume trains start from the same initial weights); ``sft.json`` names it, so a
  team half-written by a crash is never read, and older ones are removed once the new one is named;
- ``base/``: the fine-tuned shared base, once the base stage is finished;
- ``work/<stage>/checkpoint-<step>``: TRL's own checkpoint inside a long stage (every ``checkpoint_steps``
  optimiser steps: weights, optimiser, scheduler, random states), from which the stage continues.

A resumed run skips what is finished and continues the stage under way from its newest TRL checkpoint, so it
ends with the weights of the run that was never interrupted (the batches come in a fixed order).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from joy_trainers.errors import UsageError
from joy_trainers.rundir import write_json_atomic, write_text_atomic, writing

PROGRESS_FILE = Path("checkpoints") / "sft.json"
"""The stages an sft run finished, relative to its run directory."""


@dataclass
class SFTProgress:
    """The stages an ``sft`` run has finished and what they produced."""

    done: list[str] = field(default_factory=list)
    """Finished stages, in order: ``baseline``, ``base``, ``team`` (the adapters initialised), then role names."""
    steps: int = 0
    """Optimiser steps of the finished stages."""
    logs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """TRL's log of each finished stage."""
    baseline: dict[str, Any] | None = None
    """The starting team's metrics, once evaluated."""
    team: str | None = None
    """The folder under ``checkpoints/`` holding the team after the last finished adapter stage."""

    def finish(self, stage: str, run_dir: Path) -> None:
        """Record ``stage`` as finished and write the progress file (atomically)."""
        if stage not in self.done:
            self.done.append(stage)
        with writing(run_dir / PROGRESS_FILE.parent, "the SFT checkpoints"):
            (run_dir / PROGRESS_FILE).parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(run_dir / PROGRESS_FILE, asdict(self), "the SFT progress")


def read_progress(run_dir: Path) -> SFTProgress:
    """The progress of the run in ``run_dir`` (empty when it has none yet); a damaged file is a one-line
    ``UsageError``."""
    path = run_dir / PROGRESS_FILE
    if not path.is_file():
        return SFTProgress()
    try:
        data = json.loads(path.read_text())
        progress = SFTProgress(**data)
        if not isinstance(progress.done, list) or not isinstance(progress.steps, int):
            raise TypeError("done must be a list and steps an int")
        if progress.team is not None and (not isinstance(progress.team, str) or "/" in progress.team):
            raise TypeError(f"team must be a folder name, got {progress.team!r}")
    except (OSError, ValueError, TypeError) as exc:
        raise UsageError(
            f"--resume: {path} is damaged ({type(exc).__name__}: {exc}); start the run again with --overwrite"
        ) from None
    return progress


def save_team_checkpoint(team: Any, run_dir: Path, progress: SFTProgress, stage: str) -> None:
    """Write ``team`` as ``checkpoints/team-<n>``, then record ``stage`` as finished with that team (the
    progress file names it), then remove the older teams."""
    checkpoints = run_dir / PROGRESS_FILE.parent
    name = f"team-{len(progress.done)}"
    shutil.rmtree(checkpoints / name, ignore_errors=True)  # half-written by a crash, never named
    with writing(checkpoints / name, "the team at a stage boundary", cleanup=[checkpoints / name]):
        team.save(str(checkpoints / name))
    progress.team = name
    progress.finish(stage, run_dir)
    for old in checkpoints.glob("team-*"):
        if old.name != name:
            shutil.rmtree(old, ignore_errors=True)


def team_checkpoint(run_dir: Path, progress: SFTProgress) -> Path | None:
    """The folder of the team the progress names, or None."""
    if progress.team is None:
        return None
    path = run_dir / PROGRESS_FILE.parent / progress.team
    if not (path / "team.json").is_file():
        raise UsageError(
            f"--resume: {path} is missing or incomplete, yet {run_dir / PROGRESS_FILE} names it; start the run "
            "again with --overwrite"
        )
    return path


def stage_checkpoint(work_dir: Path) -> str | None:
    """The newest complete TRL checkpoint (``checkpoint-<step>`` holding ``trainer_state.json``) in a stage's
    work folder, or None."""
    found = []
    for entry in work_dir.glob("checkpoint-*") if work_dir.is_dir() else []:
        step = entry.name.removeprefix("checkpoint-")
        if step.isdigit() and (entry / "trainer_state.json").is_file():
            found.append((int(step), entry))
    return str(max(found)[1]) if found else None


def keep_metrics(run_dir: Path, done: list[str], work: Path) -> None:
    """Before a run continues: keep the ``metrics.jsonl`` rows of the finished stages, and those of a stage under
    way up to its newest TRL checkpoint (the steps after it run again and log again)."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return
    resumed: dict[str, int] = {}
    for entry in work.iterdir() if work.is_dir() else []:
        found = stage_checkpoint(entry)
        if found is not None:
            resumed[entry.name] = int(found.rpartition("-")[2])
    kept = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:  # a line cut by the crash
            continue
        stage, step = row.get("stage"), row.get("step", 0)
        if stage in done or (stage in resumed and isinstance(step, int) and step <= resumed[stage]):
            kept.append(line)
    write_text_atomic(path, "".join(line + "\n" for line in kept), "the metrics log")
