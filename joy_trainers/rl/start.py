"""The team an RL run starts from: a given ``sft`` run directory, or for the embedded tiny models (and
SmolLM2-135M-Instruct) an ``sft`` run with the tiny (smol) preset, trained once and cached."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from joy_agents.tiny import BUILD_VERSION, default_cache_dir, env_fingerprint, tiny_base_dir
from joy_trainers.rl.distributed import barrier, world
from joy_trainers.sft import AUTO_SFT_PRESETS, SFTConfig, SFTTrainer
from joy_trainers.sft import PRESETS as SFT_PRESETS

TINY_MODELS = ("tiny-base", "tiny", "tiny-small")
"""The embedded models an RL run fine-tunes by itself (the sft tiny preset) when no ``sft_run`` is given; with
SmolLM2 they make up ``joy_trainers.sft.AUTO_SFT_PRESETS``."""


def sft_team(sft_run: str | None, model: str, seed: int, sft_overrides: dict[str, Any] | None = None) -> Path:
    """The ``team/`` directory an RL run starts from.

    ``sft_run``: a run directory written by the ``sft`` trainer (its ``team/`` is used). Without one and with
    ``model="tiny-base"`` (``tiny``, ``tiny-small``; or ``smollm2-135m-instruct``), the ``sft`` trainer's tiny
    (or smol) preset plus ``sft_overrides`` is run once into the cache (``~/.cache/joyagents/sft-<hash>``) and
    reused by later runs with the same settings.
    """
    if sft_run:
        team = Path(sft_run) / "team"
        if not (team / "team.json").is_file():
            raise FileNotFoundError(f"{sft_run!r} holds no team/team.json; pass a run directory of the sft trainer")
        return team
    if model not in AUTO_SFT_PRESETS:
        raise ValueError(
            f"model={model!r} needs sft_run (a run directory of `joy-train --trainer sft`); only these models are "
            f"fine-tuned automatically: {', '.join(sorted(AUTO_SFT_PRESETS))}"
        )
    run = tiny_sft_dir(model, seed, sft_overrides)
    if (run / "team" / "team.json").is_file():
        return run / "team"
    rank, _ = world()
    if rank == 0:
        # team/team.json is written last: a run interrupted before it is redone from scratch
        if run.exists():
            shutil.rmtree(run)
        preset = AUTO_SFT_PRESETS[model]
        print(f"[rl] no cached SFT team for these settings; running the sft {preset} preset into {run}")
        values = {**tiny_sft_values(model, seed, sft_overrides), "output_dir": str(run)}
        SFTTrainer(SFTConfig.from_dict(values)).train()
    barrier()
    return run / "team"


def tiny_sft_values(model: str, seed: int, sft_overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``sft`` options of the automatic SFT run of ``model`` (its preset in ``AUTO_SFT_PRESETS``: ``tiny``
    for the tiny models, ``smol`` for SmolLM2; then ``sft_overrides``; no evaluation)."""
    preset = SFT_PRESETS[AUTO_SFT_PRESETS.get(model, "tiny")]
    values = {**preset, "model": model, "seed": seed, **(sft_overrides or {})}
    return {**values, "eval_tasks": 0, "output_dir": None}


def tiny_sft_dir(model: str = "tiny", seed: int = 0, sft_overrides: dict[str, Any] | None = None) -> Path:
    """Where :func:`sft_team` caches the automatic tiny SFT run of these settings (it may not exist yet)."""
    # a new tiny-model build (tokenizer or shape) or a changed env (other expert data, other tokenizer
    # corpus) must not reuse a team fine-tuned before
    key = {**tiny_sft_values(model, seed, sft_overrides), "tiny_build": BUILD_VERSION, "env": env_fingerprint()}
    if key["model"] == "tiny-base":  # a rebuilt shipped base must not reuse a team fine-tuned from the old one
        key["tiny_base"] = hashlib.sha256((tiny_base_dir() / "build_info.json").read_bytes()).hexdigest()
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return Path(default_cache_dir()) / f"sft-{digest}"
