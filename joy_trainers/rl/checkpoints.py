"""Checkpoints: atomic directories ``checkpoints/step-N`` and a ``latest`` pointer, and reading them back
for ``--resume``.

A checkpoint holds ``team/`` (adapters as safetensors, ``team.json``), ``optimizers.pt`` (optimiser state:
tensors and numbers), ``rng.json`` (the Python, NumPy and torch RNG states), ``state.json`` (the loop's
state: step, baseline metrics, token count, wall time, memory banks, the trainer's JSON state) and, when the
trainer has them, ``reference.pt`` (the KL reference weights) and its own files.

Nothing is unpickled: tensor files load with ``torch.load(..., weights_only=True)``, which accepts tensors,
numbers, strings and containers of them and refuses any other object (a crafted file cannot run code), and
the rest is JSON. A checkpoint is written into a temporary directory and renamed when complete, so a crash
leaves the previous checkpoint or the new one, never half of one; :func:`read_checkpoint` still checks every
file, so that ``--resume`` can fall back past a damaged one (see :func:`~joy_trainers.rl.resume_or_evaluate`).
"""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from joy_agents.memory import check_bank_dict
from joy_agents.policy import TeamPolicy
from joy_trainers.checks import check_team_models
from joy_trainers.distributed import all_gather_objects, on_main
from joy_trainers.errors import UsageError, shown
from joy_trainers.random_states import rng_state, set_rng_state
from joy_trainers.rundir import read_json, replace_path, temp_path, writing

if TYPE_CHECKING:
    from joy_trainers.rl.state import RunState
    from joy_trainers.rundir import RunDir


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message names the file and why."""


def restore_rng(rng: dict[str, Any], rank: int, size: int) -> bool:
    """Set this process's RNG states from a checkpoint's ``rng.json`` (its ``ranks`` list, one entry per
    process), so a resumed run draws what the uninterrupted one would have; False (nothing set) when the
    checkpoint has none for ``rank`` of ``size`` processes (written before, or by another number of them)."""
    ranks = rng.get("ranks")
    if not isinstance(ranks, list) or len(ranks) != size:
        return False
    try:
        set_rng_state(ranks[rank])
    except (KeyError, ValueError, TypeError, RuntimeError, OverflowError, AttributeError):
        return False
    return True


def save_tensors(obj: Any, path: Path) -> None:
    """``torch.save`` of tensors, numbers, strings and containers of them (loadable by :func:`load_tensors`)."""
    torch.save(obj, path)


def load_tensors(path: Path) -> Any:
    """Load a file written by :func:`save_tensors` without unpickling any other object: a file that holds one
    (a crafted or foreign pickle) is refused with :class:`CheckpointError` and nothing in it runs."""
    name = f"{path.parent.name}/{path.name}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's notes on pickle protocols of foreign files
            return torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as exc:
        if "Weights only load failed" in str(exc) or "Unsupported global" in str(exc):
            raise CheckpointError(
                f"{name} refused: it holds objects other than tensors and numbers (a file not written by "
                "joy-train, or tampered with); nothing in it was run"
            ) from None
        raise CheckpointError(f"{name} is damaged ({_first_sentence(exc)})") from None
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise CheckpointError(f"{name} is truncated or damaged ({_first_sentence(exc)})") from None


def _first_sentence(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text.split(". ")[0].rstrip(".")


def save_checkpoint(
    directory: str | Path,
    step: int,
    team: Any,
    optimizers: dict[str, torch.optim.Optimizer],
    state: dict[str, Any],
    keep: int = 2,
    write_extra: Callable[[Path], None] | None = None,
    rng_ranks: list[dict[str, Any]] | None = None,
) -> Path:
    """Write ``directory/step-{step}`` atomically (a temporary directory renamed when complete), then point
    ``directory/latest`` at it (also atomically) and drop older checkpoints beyond ``keep``.

    ``state`` is any JSON-able dict (memory banks, metrics history, data order...); RNG states are added.
    ``write_extra(tmp_dir)`` writes a trainer's own files into the checkpoint before it is published;
    ``rng_ranks``: every process's RNG states (rank order), restored per process by :func:`restore_rng`. The
    team's base model, when it lies in the run directory, is named relative to the checkpoint's team.
    """
    directory = Path(directory)
    final = directory / f"step-{step}"
    tmp = temp_path(final)
    pointer = temp_path(directory / "latest")
    # a failure (a full disk) removes the half-written checkpoint; the previous one stays for --resume
    with writing(final, f"the checkpoint of step {step}", cleanup=[tmp, pointer]):
        directory.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        team.save(str(tmp / "team"))
        _relative_base(tmp / "team", directory.parent)
        save_tensors({r: o.state_dict() for r, o in optimizers.items()}, tmp / "optimizers.pt")
        (tmp / "rng.json").write_text(json.dumps({**rng_state(), **({"ranks": rng_ranks} if rng_ranks else {})}))
        if write_extra is not None:
            write_extra(tmp)
        (tmp / "state.json").write_text(json.dumps({"step": step, **state}, default=str))  # last: marks it complete
        for f in tmp.rglob("*"):
            if f.is_file():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
        replace_path(tmp, final)  # a link there is replaced, never followed
        pointer.write_text(final.name)
        with open(pointer, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(pointer, directory / "latest")
    for old in checkpoint_steps(directory)[keep:]:
        shutil.rmtree(directory / f"step-{old}", ignore_errors=True)
    return final


def _relative_base(team_dir: Path, run_dir: Path) -> None:
    """Name the team's base model relative to ``team_dir`` when it lies in ``run_dir`` (the run's ``base/``),
    so the checkpoint loads after the run is moved."""
    file = team_dir / "team.json"
    data = json.loads(file.read_text())
    model = Path(str(data["config"]["model"]))
    if model.is_absolute() and model.is_relative_to(os.path.abspath(run_dir)):
        data["config"]["model"] = os.path.relpath(model, os.path.abspath(team_dir))
        file.write_text(json.dumps(data, indent=2, sort_keys=True))


def checkpoint_steps(directory: str | Path) -> list[int]:
    """The steps of the ``step-N`` directories in ``directory``, newest first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    steps = [p.name[5:] for p in directory.glob("step-*") if p.is_dir()]
    return sorted((int(s) for s in steps if s.isdigit()), reverse=True)


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The checkpoint ``directory/latest`` points at if it holds a ``state.json``, else None."""
    pointer = Path(directory) / "latest"
    if not pointer.is_file():
        return None
    path = Path(directory) / pointer.read_text().strip()
    return path if (path / "state.json").is_file() else None


@dataclass
class CheckpointData:
    """Every file of a checkpoint, read and checked, not yet applied to a run."""

    path: Path
    state: dict[str, Any]
    team: Any
    optimizers: dict[str, Any]
    rng: dict[str, Any]
    reference: dict[str, list[torch.Tensor]] | None


def read_checkpoint(path: str | Path) -> CheckpointData:
    """Read and check every file of the checkpoint at ``path`` (nothing is applied); raises
    :class:`CheckpointError` naming the first file that is missing, damaged or refused."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path.name} does not exist")
    for name in ("state.json", "optimizers.pt", "rng.json", "team/team.json"):
        if not (path / name).is_file():
            raise CheckpointError(f"{path.name} lacks {name} (an incomplete or foreign checkpoint)")
    try:
        state = read_json(path / "state.json", STATE_MAX_BYTES)
        rng = read_json(path / "rng.json", STATE_MAX_BYTES)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path.name}: state.json or rng.json is truncated or damaged ({exc})") from None
    if not isinstance(state, dict) or not isinstance(state.get("step"), int) or not isinstance(rng, dict):
        raise CheckpointError(f"{path.name}: state.json or rng.json does not hold what joy-train writes")
    if path.name.startswith("step-") and path.name[5:] != str(state["step"]):
        raise CheckpointError(f"{path.name}: state.json says step {state['step']}")
    problem = state_problem(state) or rng_problem(rng)
    if problem:
        raise CheckpointError(f"{path.name}: {problem} (damaged or tampered with)")
    if path.parent.name == "checkpoints":  # in a run directory: its team's models inside it or cached
        try:
            check_team_models(path / "team", path.parent.parent, path.name)
        except UsageError as exc:
            raise CheckpointError(str(exc)) from None
    optimizers = load_tensors(path / "optimizers.pt")
    if not isinstance(optimizers, dict):
        raise CheckpointError(f"{path.name}: optimizers.pt does not hold one optimiser state per role")
    for role, saved in optimizers.items():  # the settings load_state_dict puts back (lr, betas, eps, ...)
        groups = saved.get("param_groups") if isinstance(saved, dict) else None
        found = _number_out_of_range(groups, "param_groups")
        if found:
            raise CheckpointError(
                f"{path.name}: optimizers.pt: the optimiser of {shown(role, 40)}: {found[0]} is {shown(found[1])}, not "
                f"a finite number of at most {STATE_NUMBER_MAX} in magnitude (damaged or tampered with)"
            )
    reference = load_tensors(path / "reference.pt") if (path / "reference.pt").is_file() else None
    try:
        team = TeamPolicy.load(str(path / "team"))
    except Exception as exc:  # noqa: BLE001 - any failure to load the saved weights makes it unusable
        raise CheckpointError(f"{path.name}/team does not load ({_first_sentence(exc)})") from None
    return CheckpointData(path, state, team, optimizers, rng, reference)


STATE_MAX_BYTES = 1 << 30
"""The largest ``state.json`` or ``rng.json`` read back (memory banks make up most of a state)."""


STATE_NUMBER_MAX = 2**63 - 1
"""The largest count (step, tokens, tasks drawn) or number of seconds a checkpoint holds, and the largest
magnitude of any number of its baseline metrics and optimiser settings: far beyond any run, and every one
converts to a float (an integer of 400 digits, read back from a tampered file, does not)."""


def _number_out_of_range(data: Any, where: str) -> tuple[str, Any] | None:
    """``(path, value)`` of the first number in ``data`` (JSON-like: dicts, lists, tuples) that is not finite or
    is beyond :data:`STATE_NUMBER_MAX` in magnitude, or None; walked without recursion."""
    stack: list[tuple[str, Any]] = [(where, data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((f"{path}.{str(k)[:40]}", v) for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(value))
        elif isinstance(value, float) and not math.isfinite(value):
            return path, value
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > STATE_NUMBER_MAX:
            return path, value
    return None


def state_problem(state: dict[str, Any]) -> str | None:
    """Why a checkpoint's ``state.json`` (its step already checked) is not what :func:`checkpoint` writes, or
    None: every field it holds of its type and in range (counts and seconds finite, in [0,
    :data:`STATE_NUMBER_MAX`]; the baseline's metrics finite), and every memory bank sound
    (:func:`~joy_agents.memory.check_bank_dict`)."""
    if not 0 <= state["step"] <= STATE_NUMBER_MAX:
        return f"state.json: step {shown(state['step'])} is not in [0, {STATE_NUMBER_MAX}]"
    number = (int, float)
    kinds = {"baseline": (dict, type(None)), "tokens_total": (int,), "wall_s": number, "memory": (dict,)}
    kinds["tasks_drawn"] = (int,)
    kinds["trainer_state"] = (dict,)
    for name, types in kinds.items():
        value = state.get(name)
        if name in state and (isinstance(value, bool) or not isinstance(value, types)):
            return f"state.json: {name} is {shown(value, 60)}, not a {' or '.join(t.__name__ for t in types)}"
        if isinstance(value, number) and not isinstance(value, bool):
            finite = not isinstance(value, float) or math.isfinite(value)
            if not (finite and 0 <= value <= STATE_NUMBER_MAX):
                return f"state.json: {name} is {shown(value)}, not a finite number in [0, {STATE_NUMBER_MAX}]"
    found = _number_out_of_range(state.get("baseline"), "baseline")
    if found:
        return (
            f"state.json: {found[0]} is {shown(found[1])}, not a finite number of at most {STATE_NUMBER_MAX} in "
            "magnitude"
        )
    for role, bank in (state.get("memory") or {}).items():
        try:
            check_bank_dict(bank)
        except ValueError as exc:
            return f"state.json: the memory of {role}: {exc}"
    return None


def rng_problem(rng: dict[str, Any]) -> str | None:
    """Why a checkpoint's ``rng.json`` cannot be set (tried, then the states as they were put back), or None."""
    saved = rng_state()
    ranks = rng.get("ranks")
    if ranks is not None and not isinstance(ranks, list):
        return f"rng.json: ranks is {shown(ranks, 60)}, not a list of every process's random states"
    try:
        # each process's CPU states too (restore_rng sets them; its CUDA states may be another machine's devices,
        # which restore_rng answers by seeding the process instead)
        cpu = [{k: v for k, v in r.items() if k != "cuda"} if isinstance(r, dict) else r for r in ranks or []]
        for where, states in [("", rng), *((f"ranks[{i}] ", r) for i, r in enumerate(cpu))]:
            try:
                set_rng_state(states)
            except (KeyError, ValueError, TypeError, RuntimeError, OverflowError, AttributeError) as exc:
                said = " ".join(str(exc).split())[:120]
                return f"rng.json {where}does not hold random states ({type(exc).__name__}: {said})"
    finally:
        set_rng_state(saved)
    return None


def apply_checkpoint(data: CheckpointData, team: Any, optimizers: dict[str, torch.optim.Optimizer]) -> None:
    """Copy a read checkpoint's weights, optimiser states and RNG states into the run."""
    try:
        for role in team.roles:
            with torch.no_grad():
                saved = data.team.trainable_parameters(role)
                for p, q in zip(team.trainable_parameters(role), saved, strict=True):
                    p.copy_(q.to(p.device))
        for role, opt in optimizers.items():
            opt.load_state_dict(data.optimizers[role])
        set_rng_state(data.rng)
    except (KeyError, ValueError, TypeError, RuntimeError) as exc:
        raise CheckpointError(f"{data.path.name} does not fit this run ({type(exc).__name__}: {exc})") from None


def load_checkpoint(path: str | Path, team: Any, optimizers: dict[str, torch.optim.Optimizer]) -> dict[str, Any]:
    """Load adapters/weights, optimiser and RNG states from a checkpoint; returns its ``state`` dict.
    Raises :class:`CheckpointError` (naming the file) when the checkpoint is incomplete, damaged or refused."""
    data = read_checkpoint(path)
    apply_checkpoint(data, team, optimizers)
    return data.state


def checkpoint(run: RunDir, state: RunState, save_extra: Callable[[Path], None] | None = None) -> None:
    """Rank 0 writes a checkpoint of ``state`` with every rank's RNG states (see :func:`save_checkpoint`), and
    ``save_extra(directory)`` the trainer's own files into it before it is published; every rank waits for it."""
    rng_ranks = all_gather_objects(rng_state())

    def write() -> None:
        if not state.is_main:
            return
        extra = {
            "baseline": state.baseline,
            "tokens_total": state.tokens_total,
            "tasks_drawn": state.tasks_drawn,
            "wall_s": state.wall,
            "memory": {r: b.to_dict() for r, b in state.banks.items()},
            "trainer_state": state.trainer_state,
        }

        def write_extra(directory: Path) -> None:
            if state.reference is not None:
                save_tensors(state.reference.weights, directory / "reference.pt")
            if save_extra is not None:
                save_extra(directory)

        final = save_checkpoint(
            run.checkpoints,
            state.step,
            state.team,
            state.optimizers,
            extra,
            write_extra=write_extra,
            rng_ranks=rng_ranks,
        )
        run.wrote(final, run.checkpoints / "latest")  # what --overwrite may remove

    on_main(write)  # every process waits for it, and stops with its one line when it fails (a full disk)
