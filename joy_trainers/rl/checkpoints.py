"""Checkpoints: atomic directories ``checkpoints/step-N`` (adapters, optimisers, RNG states, the loop's
state as JSON and any trainer files), a ``latest`` pointer, and loading them for ``--resume``."""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from joy_agents.policy import TeamPolicy
from joy_trainers.rl.distributed import barrier

if TYPE_CHECKING:
    from joy_trainers.rl.state import RunState
    from joy_trainers.rundir import RunDir


def _rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(
    directory: str | Path,
    step: int,
    team: Any,
    optimizers: dict[str, torch.optim.Optimizer],
    state: dict[str, Any],
    keep: int = 2,
    write_extra: Callable[[Path], None] | None = None,
) -> Path:
    """Write ``directory/step-{step}`` atomically (a temporary directory renamed when complete), then point
    ``directory/latest`` at it (also atomically) and drop older checkpoints beyond ``keep``.

    ``state`` is any JSON-able dict (memory banks, metrics history, data order...); RNG states are added.
    ``write_extra(tmp_dir)`` writes a trainer's own files into the checkpoint before it is published.
    A crash at any moment leaves either the previous complete checkpoint or the new one, never half of one.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"step-{step}"
    tmp = directory / f".tmp-step-{step}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    team.save(str(tmp / "team"))
    torch.save({r: o.state_dict() for r, o in optimizers.items()}, tmp / "optimizers.pt")
    torch.save(_rng_state(), tmp / "rng.pt")
    (tmp / "state.json").write_text(json.dumps({"step": step, **state}, default=str))
    if write_extra is not None:
        write_extra(tmp)
    for f in tmp.rglob("*"):
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    pointer = directory / ".latest.tmp"
    pointer.write_text(final.name)
    with open(pointer, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(pointer, directory / "latest")
    steps = sorted(
        (int(p.name.split("-")[1]) for p in directory.glob("step-*") if p.name.split("-")[1].isdigit()),
        reverse=True,
    )
    for old in steps[keep:]:
        shutil.rmtree(directory / f"step-{old}", ignore_errors=True)
    return final


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The checkpoint ``directory/latest`` points at, or None."""
    pointer = Path(directory) / "latest"
    if not pointer.is_file():
        return None
    path = Path(directory) / pointer.read_text().strip()
    return path if (path / "state.json").is_file() else None


def load_checkpoint(path: str | Path, team: Any, optimizers: dict[str, torch.optim.Optimizer]) -> dict[str, Any]:
    """Load adapters/weights, optimiser and RNG states from a checkpoint; returns its ``state`` dict."""
    path = Path(path)
    saved = TeamPolicy.load(str(path / "team"))
    for role in team.roles:
        with torch.no_grad():
            for p, q in zip(team.trainable_parameters(role), saved.trainable_parameters(role), strict=True):
                p.copy_(q.to(p.device))
    del saved
    opt_states = torch.load(path / "optimizers.pt", weights_only=False)
    for role, opt in optimizers.items():
        opt.load_state_dict(opt_states[role])
    _set_rng_state(torch.load(path / "rng.pt", weights_only=False))
    return json.loads((path / "state.json").read_text())


def checkpoint(run: RunDir, state: RunState) -> None:
    """Rank 0 writes a checkpoint of ``state`` (see :func:`save_checkpoint`); every rank waits for it."""
    if state.is_main:
        extra = {
            "baseline": state.baseline,
            "tokens_total": state.tokens_total,
            "wall_s": state.wall,
            "memory": {r: b.to_dict() for r, b in state.banks.items()},
            "trainer_state": state.trainer_state,
        }

        def write_extra(directory: Path) -> None:
            if state.reference is not None:
                torch.save(state.reference.weights, directory / "reference.pt")
            if state.save_extra is not None:
                state.save_extra(directory)

        save_checkpoint(run.checkpoints, state.step, state.team, state.optimizers, extra, write_extra=write_extra)
    barrier()
