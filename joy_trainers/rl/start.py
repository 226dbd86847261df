"""The team an RL run starts from: a given ``sft`` run directory, or for the embedded tiny models (and
SmolLM2-135M-Instruct) an ``sft`` run with the tiny (smol) preset, trained once and cached.

The cache (``$JOY_CACHE_DIR``, default ``~/.cache/joyagents``) holds ``sft-<key>/`` per set of SFT options,
where the key covers the options that shape the team (not its evaluation), the tiny-model build version and
a fingerprint of the ``joy_env`` source (the tiny tokenizer and the expert data come from it, so editing
``joy_env`` retrains once). An ``sft`` run of the tiny models (``joy-train --trainer sft`` or ``SFTTrainer.train()``)
records itself in ``sft-runs/<key>.json``, so an RL preset with the same settings copies that team instead of
training again.

Safe under concurrency: the team is built in a temporary directory of its own and renamed into place in one
step, while a lock file makes a second process wait for the first instead of training the same team twice;
no process removes a directory another one may be writing.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from joy_agents.tiny import (
    cache_lock,
    cache_locks_work,
    default_cache_dir,
)
from joy_trainers.checks import check_domain_weights, check_sft_run, check_sft_sizes, read_results
from joy_trainers.distributed import barrier, world
from joy_trainers.errors import UsageError
from joy_trainers.presets import AUTO_SFT_PRESETS, SFT_PRESETS
from joy_trainers.rl.config import RLConfig
from joy_trainers.rundir import replace_path, temp_path, writing, wrote
from joy_trainers.sft import SFTConfig, SFTTrainer, sft_cache_key

"""``sft`` options that do not change the trained team (left out of the cache key)."""


def sft_team(sft_run: str | None, model: str, seed: int, sft_overrides: dict[str, Any] | None = None) -> Path:
    """The ``team/`` directory an RL run starts from; ``seed`` is the run's data seed.

    ``sft_run``: a run directory written by the ``sft`` trainer (its ``team/`` is used). Without one and with
    one of the embedded models (``tiny-base``, ``tiny``, ``tiny-small``) or ``smollm2-135m-instruct``, the
    ``sft`` trainer's tiny (or smol) preset (plus ``sft_overrides``) is run once into the cache and reused by
    later runs with the same settings (see the module documentation).
    """
    check_sft_run(sft_run, model, seed)
    if sft_run:
        return Path(sft_run) / "team"
    values = tiny_sft_values(model, seed, sft_overrides)
    run = tiny_sft_dir(model, seed, sft_overrides)
    if world()[0] == 0 and not _complete(run):
        _build(run, values)
    barrier()
    return run / "team"


def auto_sft_overrides(cfg: RLConfig) -> dict[str, Any]:
    """The options of the automatic SFT run that come from the RL run ``cfg``: its env, its env's options,
    ``train_customer`` and its generation engine, then ``cfg.sft_overrides`` (which win)."""
    inherited = {
        "env_id": cfg.env_id,
        "env_kwargs": dict(cfg.env_kwargs),
        "train_customer": cfg.train_customer,
        "rollout_engine": cfg.rollout_engine,
        "draft_tokens": cfg.draft_tokens,
        "draft_max_rows": cfg.draft_max_rows,
        "vllm_options": dict(cfg.vllm_options),
    }
    return {**inherited, **cfg.sft_overrides}


def check_auto_sft(cfg: RLConfig, env: Any) -> None:
    """The automatic SFT run of the RL run ``cfg`` (without ``sft_run``), checked before any work: its options
    (``sft_overrides`` over the preset), its sizes against the model and its ``domain_weights`` against the
    domains of ``env`` (the RL run's train split, when the SFT run trains on the same env)."""
    values = tiny_sft_values(cfg.model, cfg.data_seed, auto_sft_overrides(cfg))
    tiny_sft_dir(cfg.model, cfg.data_seed, auto_sft_overrides(cfg))  # its options, as its cache key reads them
    config = SFTConfig.from_dict({**values, "output_dir": None})
    try:
        check_sft_sizes(config)
        if (config.env_id, config.env_kwargs) == (cfg.env_id, cfg.env_kwargs):
            check_domain_weights(config.domain_weights, env, config.sft_tasks, config.rl_fraction, config.seed)
    except UsageError as exc:
        raise UsageError(f"sft_overrides: {exc}") from None


def tiny_sft_values(model: str, seed: int, sft_overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``sft`` options of the automatic SFT run of ``model`` (its preset in ``AUTO_SFT_PRESETS``: ``tiny``
    for the tiny models, ``smol`` for SmolLM2; then ``sft_overrides``; no evaluation)."""
    preset = SFT_PRESETS[AUTO_SFT_PRESETS.get(model, "tiny")]
    values = {**preset, "model": model, "seed": seed, **(sft_overrides or {})}
    return {**values, "eval_tasks": 0, "output_dir": None}


def tiny_sft_dir(model: str = "tiny", seed: int = 0, sft_overrides: dict[str, Any] | None = None) -> Path:
    """Where :func:`sft_team` caches the automatic tiny SFT run of these settings (it may not exist yet)."""
    return default_cache_dir() / f"sft-{sft_cache_key(tiny_sft_values(model, seed, sft_overrides))}"


START_TEAM = "start_team"
"""The run directory's copy of the team an RL run starts from (its base model in ``base/`` beside it)."""


def bring_team(team_dir: Path, run_dir: Path) -> Path:
    """Copy the starting team ``team_dir`` into ``run_dir/start_team`` and, when its base model is a local
    directory in the model cache or in the SFT run (not the user's own model directory, nor a hub name), that
    base into ``run_dir/base`` (hard links where the filesystem allows, else a copy), so the run loads, evaluates
    and resumes after the cache is cleared or the run is moved. Returns the copy's path."""
    dest = run_dir / START_TEAM
    tmp = temp_path(dest)
    base_tmp = temp_path(run_dir / "base")
    # a failure (a full disk) leaves neither half: the temporary copies go, one line says what and where
    with writing(dest, "the starting team and its base model", cleanup=[tmp, base_tmp]):
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(team_dir, tmp)
        data = json.loads((tmp / "team.json").read_text())
        model = str(data["config"]["model"])
        if model.startswith(("./", "../")):
            model = os.path.normpath(team_dir.resolve() / model)
        local = Path(model)
        owned = (default_cache_dir().resolve(), team_dir.resolve().parent)
        if local.is_absolute() and local.is_dir() and any(local.resolve().is_relative_to(o) for o in owned):
            base = run_dir / "base"
            if base.resolve() != local.resolve():
                shutil.rmtree(base_tmp, ignore_errors=True)
                shutil.copytree(local, base_tmp, copy_function=_link_or_copy)
                replace_path(base_tmp, base)  # a link there is replaced, never followed
                wrote(base)  # what --overwrite may remove
            data["config"]["model"] = "../base"
            (tmp / "team.json").write_text(json.dumps(data, indent=2, sort_keys=True))
        replace_path(tmp, dest)
    wrote(dest)
    return dest


def _link_or_copy(source: str, dest: str) -> None:
    try:
        os.link(source, dest)
    except OSError:
        shutil.copy2(source, dest)


def _complete(run: Path) -> bool:
    return (run / "team" / "team.json").is_file()


def _registered_run(key: str) -> Path | None:
    """A finished ``sft`` run the user made with these settings, if one is recorded and still matches."""
    entry = default_cache_dir() / "sft-runs" / f"{key}.json"
    try:
        run = Path(json.loads(entry.read_text())["run"])
        config = read_results(run).get("config") or {}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not _complete(run) or not config or sft_cache_key(config) != key:
        return None  # moved, removed, overwritten by another run, or unfinished
    return run


def _copy_team(source: Path, dest: Path) -> None:
    """Copy a finished SFT run's ``team/`` (and ``base/``, the fine-tuned base it sits on) into ``dest``."""
    shutil.copytree(source / "team", dest / "team")
    if (source / "base").is_dir():
        shutil.copytree(source / "base", dest / "base")
        team_file = dest / "team" / "team.json"
        data = json.loads(team_file.read_text())
        model = data["config"]["model"]
        if Path(model).is_absolute() and Path(model).resolve() == (source / "base").resolve():
            data["config"]["model"] = "../base"  # a team saved before paths were stored relative to it
            team_file.write_text(json.dumps(data, indent=2, sort_keys=True))


def _build(run: Path, values: dict[str, Any]) -> None:
    """Train (or copy from a registered run) the team of ``values`` into ``run``, atomically, once."""
    key = run.name.removeprefix("sft-")
    run.parent.mkdir(parents=True, exist_ok=True)
    with cache_lock(run.parent / f"{run.name}.lock") as waited:
        if _complete(run):  # built by the process we waited for
            if waited:
                print(f"[rl] another process built the cached SFT team {run}; using it")
            return
        if cache_locks_work():  # holding the lock, a temporary or incomplete directory is a crashed build's
            for stale in [*run.parent.glob(f".{run.name}.tmp-*"), *([run] if run.exists() else [])]:
                shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{run.name}.tmp-", dir=run.parent))
        try:
            source = _registered_run(key)
            if source is not None:
                print(f"[rl] reusing the SFT team of {source} (same settings); copying it into {run}")
                _copy_team(source, tmp)
            else:
                print(f"[rl] no cached SFT team for these settings; running the sft tiny preset into {run}")
                SFTTrainer(SFTConfig.from_dict({**values, "output_dir": str(tmp)})).train()
            try:
                os.replace(tmp, run)
            except OSError:
                if not _complete(run):  # not another process's finished team (possible only without locks)
                    raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
