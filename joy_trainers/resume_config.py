"""What ``--resume`` may change: the run's options are stored in ``config.json`` when it starts, and a resume
with options that change what the run means (``lr``, ``group_size``, ``tasks_per_step``, ``seed``, the model,
the env...) is refused with the list of differences; the options in the config's ``RESUME_SAFE`` (more
iterations, a larger token budget, evaluation, checkpointing and logging settings) may change, and
``config.json`` then records the new values."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path
from typing import Any

from joy_trainers.errors import UsageError
from joy_trainers.rundir import read_json, write_json_atomic

CONFIG_FILE = "config.json"
"""The run's options (as JSON), in the run directory."""


def config_values(cfg: Any) -> dict[str, Any]:
    """The options of ``cfg`` as they read back from JSON."""
    return json.loads(json.dumps(dict(vars(cfg)), default=str))


IGNORED = frozenset({"resume", "overwrite", "output_dir"})
"""Options that say how this invocation runs, not what the run is."""


def resume_changes(stored: dict[str, Any], requested: dict[str, Any], safe: tuple[str, ...]) -> tuple[list, list]:
    """``(refused, allowed)``: ``"name: old -> new"`` for every option both sides hold that differs, split by
    ``safe`` (an option one side lacks, e.g. added by a later release, is not compared)."""
    refused, allowed = [], []
    for name in sorted((set(stored) & set(requested)) - IGNORED):
        old, new = stored[name], requested[name]
        if old != new:
            (allowed if name in safe else refused).append(f"{name}: {json.dumps(old)} -> {json.dumps(new)}")
    return refused, allowed


def check_resume_config(run_dir: Path, cfg: Any, has_checkpoint: bool) -> list[str]:
    """Refuse a resume whose options change the meaning of the steps already run (one line listing them);
    returns the safe changes. A run without ``config.json`` (made before it existed) or without a checkpoint
    yet (nothing ran) accepts any options."""
    path = run_dir / CONFIG_FILE
    if not path.is_file() or not has_checkpoint:
        return []
    stored = read_config(path, type(cfg))
    safe = tuple(getattr(type(cfg), "RESUME_SAFE", ()))
    refused, allowed = resume_changes(stored, config_values(cfg), safe)
    if refused:
        raise UsageError(
            f"--resume: the run in {run_dir} ran with other options ({'; '.join(refused)}); resume with the "
            f"options in {path} (only {', '.join(safe)} may change), or start a new run with --overwrite or "
            "another --output-dir"
        )
    return allowed


CONFIG_MAX_BYTES = 2**20
"""The largest ``config.json`` read back (a run's options are a few kilobytes)."""


def read_config(path: Path, cls: type) -> dict[str, Any]:
    """The options stored in ``path`` (a run's ``config.json``), every one checked as ``cls.from_dict`` checks a
    config (names, types, ranges) and read as the config holds it, or a one-line UsageError saying what is wrong
    with the file."""
    fix = "restore it, or start the run again with --overwrite"
    try:
        stored = read_json(path, CONFIG_MAX_BYTES)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--resume: {' '.join(str(exc).split())}; {fix}") from None
    if not isinstance(stored, dict):
        raise UsageError(f"--resume: {path} is damaged (not an object of options); {fix}")
    names = {f.name for f in dataclasses.fields(cls)} | set(getattr(cls, "RENAMED", {}))
    unknown = sorted(set(stored) - names)
    if unknown:
        shown = ", ".join(repr(n)[:40] for n in unknown[:5])
        raise UsageError(f"--resume: {path} holds unknown option(s) {shown}, which joy-train never writes; {fix}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an old option name is read as its new one
            built = config_values(cls.from_dict({k: v for k, v in stored.items() if k not in IGNORED}))
    except (TypeError, ValueError) as exc:
        raise UsageError(
            f"--resume: {path} holds a value joy-train never writes ({' '.join(str(exc).split())[:200]}); {fix}"
        ) from None
    # each value as the config holds it (an old spelling, e.g. scale_rewards true, reads as its name, "group")
    return {k: v if k in IGNORED else built.get(k, v) for k, v in stored.items()}


def write_config(run_dir: Path, cfg: Any) -> None:
    """Record the run's options in ``config.json`` (atomically)."""
    write_json_atomic(run_dir / CONFIG_FILE, config_values(cfg))
