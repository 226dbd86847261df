"""What an ``sft`` run keeps so that ``--resume`` continues it after a crash, a Ctrl-C, a full disk or a lost
machine, and how a resumed run checks it first.

In the run directory:

- ``checkpoints/sft.json``: the stages finished (``baseline``, ``base``, ``team``, then each role's adapter), the
  optimiser steps they ran, their logs and the baseline metrics, written (atomically) at every stage boundary;
- ``checkpoints/team-<n>/``: the team as it stands after the ``n``-th finished stage (the first holds the adapters
  as initialised, so that the adapters a resume trains start from the same weights); ``sft.json`` names the
  newest, so a team half-written by a crash is never read; the one before it is kept for a fall-back;
- ``base/``: the fine-tuned shared base, once the base stage is finished (written into a temporary folder and
  renamed when complete);
- ``work/<stage>/checkpoint-<step>``: TRL's own checkpoint inside a long stage (every ``checkpoint_steps``
  optimiser steps: weights, optimiser, scheduler, random states), from which the stage continues.

Before a resumed run reads any of them, :func:`recover` checks each: every file it needs is there, every
safetensors header fits its file, every JSON file parses, and the optimiser, scheduler and random states load with
``torch.load(weights_only=True)`` (nothing in them runs). A damaged one is renamed ``<name>.rejected`` in
``checkpoints/`` (kept, never deleted; TRL's as ``<stage>-checkpoint-<step>.rejected``, out of the way of TRL's
own clean-up), one line says so, and the run falls back: a TRL checkpoint to the stage's previous intact one or the
stage's start; a team to the team before it or the adapters' start; ``base/`` to the base stage's start.

A resumed run ends with the weights of the run that was never interrupted, wherever it stopped: the batches come
in a fixed order, each TRL stage seeds its random state from the run's seed (and a TRL checkpoint restores it),
``sft.json`` keeps the random states each finished stage left, which a resumed run sets before the next stage (so
the adapters are initialised as in the uninterrupted run, whatever it skipped), and a stage whose outputs were not
all written runs again from its start.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from joy_agents.weight_files import TORCH_FILES, safetensors_problem, torch_file_problem, weights_files
from joy_trainers.errors import UsageError, shown
from joy_trainers.random_states import rng_state, set_rng_state
from joy_trainers.rundir import read_json, replace_path, temp_path, write_json_atomic, write_text_atomic, writing, wrote

PROGRESS_FILE = Path("checkpoints") / "sft.json"
"""The stages an sft run finished, relative to its run directory."""

JSON_MAX_BYTES = 1 << 30
"""The largest JSON file of a checkpoint read back (a tokenizer's, the logs in ``trainer_state.json``)."""

_TEAM = re.compile(r"team-(\d+)")
_TRL = re.compile(r"checkpoint-(\d+)")


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
    rng: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each finished stage's Python, NumPy and torch random states at its end (the main process's): a resumed run
    sets the last one's before the next stage (:meth:`resume_rng`), so that it draws (the adapters' initial
    weights, say) what the uninterrupted run drew."""

    def finish(self, stage: str, run_dir: Path) -> None:
        """Record ``stage`` as finished and write the progress file (atomically)."""
        if stage not in self.done:
            self.done.append(stage)
        self.write(run_dir)

    def write(self, run_dir: Path) -> None:
        """Write the progress file of ``run_dir`` (atomically)."""
        with writing(run_dir / PROGRESS_FILE.parent, "the SFT checkpoints"):
            (run_dir / PROGRESS_FILE).parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(run_dir / PROGRESS_FILE, asdict(self), "the SFT progress")

    def resume_rng(self) -> None:
        """Set the random states the last finished stage left (none written by a version without them: nothing;
        CUDA states written on another set of devices: the CPU's only)."""
        state = self.rng.get(self.done[-1]) if self.done else None
        if state is None:
            return
        cuda = state.get("cuda")
        if cuda is not None and (not torch.cuda.is_available() or len(cuda) != torch.cuda.device_count()):
            state = {k: v for k, v in state.items() if k != "cuda"}
        set_rng_state(state)

    def roll_back(self, keep: int) -> list[str]:
        """Forget the finished stages after the first ``keep`` (they run again), with their steps, logs and
        baseline metrics; returns the stages forgotten."""
        dropped = self.done[keep:]
        del self.done[keep:]
        for stage in dropped:
            self.rng.pop(stage, None)
            log = self.logs.pop(stage, None)
            if log and isinstance(log[-1], dict) and isinstance(log[-1].get("step"), int):
                self.steps -= log[-1]["step"]  # TRL's last log line of a stage holds its steps
            if stage == "baseline":
                self.baseline = None
        return dropped


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
            raise TypeError(f"team must be a folder name, got {shown(progress.team)}")
        if not isinstance(progress.rng, dict) or not all(isinstance(v, dict) for v in progress.rng.values()):
            raise TypeError(f"rng must map stages to random states, got {shown(progress.rng)}")
        saved = rng_state()
        try:
            progress.resume_rng()  # tried here, so that damaged states are this line, not a traceback later
        finally:
            set_rng_state(saved)
    except (OSError, ValueError, TypeError, KeyError, RuntimeError, OverflowError) as exc:
        raise UsageError(
            f"--resume: {path} is damaged ({type(exc).__name__}: {shown(str(exc), 200)}); start the run again with "
            "--overwrite"
        ) from None
    return progress


def save_team_checkpoint(team: Any, run_dir: Path, progress: SFTProgress, stage: str) -> None:
    """Write ``team`` as ``checkpoints/team-<n>`` (its base named relative to it when the base lies in the run
    directory, so the run can be moved), then record ``stage`` as finished with that team (the progress file
    names it), then remove the teams older than the one it replaces."""
    checkpoints = run_dir / PROGRESS_FILE.parent
    name = f"team-{len(progress.done)}"
    previous = progress.team
    folder = checkpoints / name
    tmp = temp_path(folder)
    with writing(folder, "the team at a stage boundary", cleanup=[tmp]):
        checkpoints.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        team.save(str(tmp))
        _relative_base(tmp, folder, run_dir)
        if folder.is_symlink():
            folder.unlink()
        elif folder.exists():  # written before the progress named it (a crash in between): never read
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    wrote(folder)
    progress.team = name
    progress.finish(stage, run_dir)
    for old in checkpoints.iterdir():
        if _TEAM.fullmatch(old.name) and old.name not in (name, previous):
            _remove(old)


def _relative_base(team_dir: Path, final: Path, run_dir: Path) -> None:
    """Name the team's base model in ``team_dir/team.json`` relative to ``final`` (where the team will lie) when
    the base lies in ``run_dir`` (the run's ``base/``)."""
    file = team_dir / "team.json"
    data = json.loads(file.read_text())
    model = str(data["config"]["model"])
    if os.path.isabs(model) and Path(model).is_relative_to(os.path.abspath(run_dir)):
        data["config"]["model"] = os.path.relpath(model, os.path.abspath(final))
        file.write_text(json.dumps(data, indent=2, sort_keys=True))


def save_base(model: Any, tokenizer: Any, path: Path) -> None:
    """Write the fine-tuned base (``model`` and ``tokenizer``) into a temporary folder beside ``path``, renamed
    over it when complete: a failure (a full disk) leaves no half-written base and is one line naming the path."""
    tmp = temp_path(path)
    with writing(path, "the fine-tuned base", cleanup=[tmp]):
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        replace_path(tmp, path)  # a link there is replaced, never followed; a user's files in it are kept
    wrote(path)


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
    found = [(step, entry) for step, entry in _trl_checkpoints(work_dir) if (entry / "trainer_state.json").is_file()]
    return str(max(found)[1]) if found else None


def _trl_checkpoints(work_dir: Path) -> list[tuple[int, Path]]:
    """TRL's checkpoints in a stage's work folder, newest first."""
    found = []
    for entry in work_dir.iterdir() if work_dir.is_dir() else []:
        match = _TRL.fullmatch(entry.name)
        if match and entry.is_dir() and not entry.is_symlink():
            found.append((int(match[1]), entry))
    return sorted(found, reverse=True)


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


# ------------------------------------------------------------------------------------------ checks and fall-backs
def recover(run_dir: Path) -> list[str]:
    """Before a resumed run reads its checkpoints: check TRL's checkpoints in ``work/``, ``base/`` and the team
    ``sft.json`` names (:func:`checkpoint_problem`), keep each damaged one aside (:func:`set_aside`) and fall back
    (see the module documentation), rewriting ``sft.json`` when a finished stage must run again. Returns one line
    per fall-back, saying what was damaged, where it was kept and where the run goes on from."""
    checkpoints = run_dir / PROGRESS_FILE.parent
    progress = read_progress(run_dir)
    line = _recover_base(run_dir, progress) if "base" in progress.done else None
    if line is None and progress.team is not None:
        line = _recover_team(checkpoints, progress)
    said = [line] if line else []
    for folder in _work_folders(run_dir / "work"):
        said.append(_recover_stage(folder, checkpoints, restart=line is not None))
    if line is not None:
        _remove(run_dir / "work")  # TRL's checkpoints of the stages after the fall-back: they run again
        for old in checkpoints.iterdir():
            if _TEAM.fullmatch(old.name) and old.name != progress.team:
                _remove(old)  # intact teams after the fall-back's, never named again
        progress.write(run_dir)
    return [text for text in said if text]


def _work_folders(work: Path) -> list[Path]:
    return sorted(p for p in work.iterdir() if p.is_dir() and not p.is_symlink()) if work.is_dir() else []


def _recover_stage(folder: Path, checkpoints: Path, restart: bool = False) -> str | None:
    """Keep aside the newest TRL checkpoints of the stage of ``folder`` down to the first intact one; one line
    saying so and where the stage continues from (its start when ``restart``: an earlier stage runs again), or
    None when the newest is intact (or there is none)."""
    stage = folder.name
    rejected = []
    for _, path in _trl_checkpoints(folder):
        problem = trl_checkpoint_problem(path, stage)
        if problem is None:
            break
        kept = set_aside(path, checkpoints, f"{stage}-{path.name}")
        rejected.append(f"work/{stage}/{path.name} {problem}; kept aside as checkpoints/{kept.name}")
    else:
        path = None
    if not rejected:
        return None
    go_on = f"continues from {path.name}" if path is not None and not restart else "runs again from its start"
    return "; ".join(rejected) + f"; the {stage} stage {go_on}"


def _recover_base(run_dir: Path, progress: SFTProgress) -> str | None:
    """With ``base`` finished: None when ``base/`` is intact, else keep it aside, roll the progress back to
    before the base stage and say so."""
    problem = base_problem(run_dir / "base")
    if problem is None:
        return None
    kept = set_aside(run_dir / "base", run_dir / PROGRESS_FILE.parent) if _exists(run_dir / "base") else None
    where = f"; kept aside as checkpoints/{kept.name}" if kept else ""
    progress.roll_back(progress.done.index("base"))
    progress.team = None
    return f"base/ {problem}{where}; the base stage runs again from its start"


def _recover_team(checkpoints: Path, progress: SFTProgress) -> str | None:
    """None when the team ``sft.json`` names is intact; else keep it aside, and each damaged team before it down to
    the first intact one, roll the progress back to that team (or to before the adapters' start) and say so."""
    named = progress.team or ""
    problem = _team_problem(checkpoints / named)
    if problem is None:
        return None
    rejected = [_reject_team(checkpoints / named, problem)]
    newest = int(match[1]) if (match := _TEAM.fullmatch(named)) else len(progress.done)
    for n in sorted(_team_numbers(checkpoints), reverse=True):
        if n >= newest or n >= len(progress.done) or progress.done[n] in ("baseline", "base"):
            continue  # not a team of this run's finished adapter stages
        path = checkpoints / f"team-{n}"
        problem = _team_problem(path)
        if problem is None:
            progress.roll_back(n + 1)
            progress.team = path.name
            return (
                "; ".join(rejected)
                + f"; the adapter stages continue from checkpoints/{path.name} (after {progress.done[-1]})"
            )
        rejected.append(_reject_team(path, problem))
    progress.roll_back(progress.done.index("team") if "team" in progress.done else len(progress.done))
    progress.team = None
    return "; ".join(rejected) + "; the adapter stages run again from their start"


def _team_problem(path: Path) -> str | None:
    return team_problem(path) if _exists(path) else "does not exist"


def _reject_team(path: Path, problem: str) -> str:
    """Keep the damaged team ``path`` aside (when it exists); what to say of it."""
    where = f"; kept aside as checkpoints/{set_aside(path).name}" if _exists(path) else ""
    return f"checkpoints/{path.name} {problem}{where}"


def _team_numbers(checkpoints: Path) -> list[int]:
    return [int(m[1]) for p in checkpoints.iterdir() if (m := _TEAM.fullmatch(p.name))] if checkpoints.is_dir() else []


def checkpoint_problem(path: Path, required: tuple[str, ...] = ()) -> str | None:
    """Why the checkpoint folder ``path`` cannot be used (None when it can): one of the ``required`` files is
    missing, or a file in it does not read back (:func:`file_problem`). Says the first, as ``<file> <why>``."""
    if not path.is_dir() or path.is_symlink():
        return "is not a folder (damaged)"
    for name in required:
        if not (path / name).is_file():
            return f"lacks {name} (incomplete)"
    for folder, _, files in sorted(os.walk(path)):  # a link to a folder is not walked into
        for name in sorted(files):
            file = Path(folder) / name
            problem = file_problem(file)
            if problem:
                return f"{file.relative_to(path)} {problem}"
    return None


def file_problem(file: Path) -> str | None:
    """Why ``file`` of a checkpoint does not read back (None when it does, or when it is not read back by a
    resume): a safetensors file whose header does not fit it, JSON that does not parse, a torch file (optimiser,
    scheduler, random states, weights) that ``torch.load(weights_only=True)`` refuses."""
    name = file.name
    if name.endswith(".safetensors"):
        return safetensors_problem(str(file))
    if name.endswith(".json"):
        try:
            read_json(file, JSON_MAX_BYTES)
        except OSError as exc:
            return f"cannot be read ({exc.strerror or exc})"
        except ValueError:
            return "is not valid JSON (truncated or damaged)"
        return None
    if name.startswith("rng_state") and name.endswith(".pth"):
        from transformers.trainer_pt_utils import safe_globals  # NumPy's random state: the arrays TRL allows

        with safe_globals():
            return torch_file_problem(str(file))
    if name in ("optimizer.pt", "scheduler.pt", "scaler.pt", *TORCH_FILES):
        return torch_file_problem(str(file))
    return None  # e.g. TRL's training_args.bin, which a resume never reads


def team_problem(path: Path) -> str | None:
    """Why the team checkpoint ``path`` cannot be used (None when it can): :func:`checkpoint_problem`, and a
    role of ``team.json`` without weights."""
    problem = checkpoint_problem(path, ("team.json",))
    if problem:
        return problem
    config = read_json(path / "team.json", JSON_MAX_BYTES)
    roles = config.get("config", {}).get("roles") if isinstance(config, dict) else None
    if not isinstance(roles, list) or not all(isinstance(r, str) and r and "/" not in r for r in roles):
        return "team.json does not name the team's roles (damaged)"
    for role in roles:
        if not weights_files(str(path / role)):
            return f"lacks {role}'s weights (incomplete)"
    return None


def base_problem(path: Path) -> str | None:
    """Why the fine-tuned base ``path`` cannot be used (None when it can): :func:`checkpoint_problem`, and no
    weights."""
    problem = checkpoint_problem(path, ("config.json",))
    if problem is None and not weights_files(str(path)) and not (path / "model.safetensors.index.json").is_file():
        problem = "lacks its weights (incomplete)"
    return problem


def trl_checkpoint_problem(path: Path, stage: str) -> str | None:
    """Why TRL's checkpoint ``path`` of ``stage`` cannot be used (None when it can): :func:`checkpoint_problem`;
    ``trainer_state.json`` of another step; no weights (the model's, or the adapter of the role ``stage``); no
    random states; no optimiser or scheduler state (unless DeepSpeed or FSDP keep it in their own files)."""
    problem = checkpoint_problem(path, ("trainer_state.json",))
    if problem:
        return problem
    state = read_json(path / "trainer_state.json", JSON_MAX_BYTES)
    step = _TRL.fullmatch(path.name)
    if not isinstance(state, dict) or step is None or state.get("global_step") != int(step[1]):
        return f"trainer_state.json is not the state of step {step[1] if step else '?'} (damaged)"
    weights = weights_files(str(path)) or weights_files(str(path / stage))
    if not weights and not (path / "model.safetensors.index.json").is_file():
        return "lacks the stage's weights (incomplete)"
    if not list(path.glob("rng_state*.pth")):
        return "lacks rng_state.pth (incomplete)"
    own = [*path.glob("global_step*"), *path.glob("optimizer_*"), *path.glob("optimizer.bin")]
    for name in ("optimizer.pt", "scheduler.pt") if not own else ():
        if not (path / name).is_file():
            return f"lacks {name} (incomplete)"
    return None


def set_aside(path: Path, folder: Path | None = None, name: str | None = None) -> Path:
    """Rename the damaged checkpoint ``path`` to ``<name>.rejected`` in ``folder`` (default: its own name, beside
    it; ``.rejected-2``, ... when taken): kept as evidence, never deleted, and no longer read by ``--resume``."""
    folder = folder or path.parent
    name = name or path.name
    dest = folder / f"{name}.rejected"
    n = 2
    while _exists(dest):
        dest = folder / f"{name}.rejected-{n}"
        n += 1
    folder.mkdir(parents=True, exist_ok=True)
    os.replace(path, dest)  # not recorded as the run's: --overwrite keeps it too, as it keeps RL's step-N.rejected
    return dest


def _exists(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def _remove(path: Path) -> None:
    """Remove ``path``: a link or file is unlinked (a link never followed), a folder removed with what it holds."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with suppress(OSError):
            path.unlink()
