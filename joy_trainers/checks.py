"""Checks of a run's inputs that ``joy-train`` and ``joy-eval`` make before any long work (building a model,
SFT, loading a team), each failing with a one-line :class:`~joy_trainers.errors.UsageError` that names the
option, the value seen and the fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import joy_env
from joy_agents.models import SMOLLM2_ALIASES
from joy_agents.tiny import TINY_MODELS
from joy_trainers.errors import UsageError


def check_env_id(env_id: str, option: str = "env_id") -> None:
    """``env_id`` must be registered (the built-in ids, or one registered with ``joy_env.register_env``)."""
    ids = joy_env.list_envs()
    if env_id not in ids:
        raise UsageError(f"{option} {env_id!r} is not a registered env id; valid: {', '.join(ids)}")


def check_team_dir(team: Path, option: str) -> None:
    """``team`` must be a team directory written by ``TeamPolicy.save`` (``team.json`` in it)."""
    if not (team / "team.json").is_file():
        run = team.parent
        what = "does not exist" if not run.exists() else f"holds no {team.name}/team.json"
        hint = ""
        if (run / "checkpoints").is_dir():
            hint = " (the run did not finish; continue it with joy-train --resume --output-dir " f"{run})"
        raise UsageError(f"{option} {str(run)!r} {what}{hint}; pass a run directory written by joy-train")


def check_sft_run(sft_run: str | None, model: str) -> None:
    """An RL run starts from ``sft_run``'s team, or from the automatic SFT team for the tiny models and SmolLM2."""
    if sft_run:
        check_team_dir(Path(sft_run) / "team", "sft_run")
    elif model not in (*TINY_MODELS, *SMOLLM2_ALIASES):
        raise UsageError(
            f"model={model!r} needs sft_run (a run directory of `joy-train --trainer sft`); only these models are "
            f"fine-tuned automatically: {', '.join((*TINY_MODELS, *SMOLLM2_ALIASES))}"
        )


def read_results(run: Path) -> dict[str, Any]:
    """A run directory's ``results.json`` ({} if the run has none yet); a damaged one is a UsageError."""
    path = run / "results.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        raise UsageError(
            f"{path} is not valid JSON (truncated: the run crashed or is still writing it); rerun the run or "
            "remove the file"
        ) from None
    if not isinstance(data, dict):
        raise UsageError(f"{path} does not hold a results object; it was not written by joy-train")
    return data
