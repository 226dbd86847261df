"""What the benchmark scripts share: the settings of a ``joy-train`` run, the machine line, the JSON output.

The scripts run as ``python benchmarks/<name>.py``, so this folder is on ``sys.path`` and they import this
module as ``_common``.
"""

from __future__ import annotations

import argparse
import json
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def run_settings(run: str | Path) -> tuple[str, dict[str, Any], int]:
    """``(env_id, env_kwargs, data_seed)`` of the ``joy-train`` run directory ``run``, from its
    ``results.json`` (the defaults when it has none: ``joy/mixed-v0``, no kwargs, the default data seed)."""
    from joy_trainers.cli import data_seed_of

    results = Path(run) / "results.json"
    config = json.loads(results.read_text()).get("config", {}) if results.is_file() else {}
    return config.get("env_id", "joy/mixed-v0"), config.get("env_kwargs") or {}, data_seed_of(config)


def check_team_run(parser: argparse.ArgumentParser, run: str | Path) -> None:
    """Stop with a usage error unless ``run`` is a ``joy-train`` run directory holding a saved team."""
    if not (Path(run) / "team" / "team.json").is_file():
        parser.error(f"{run!r} holds no team/team.json; pass a run directory of `joy-train`")


def torch_machine() -> str:
    """The machine, torch's thread count and version, as the result files record them."""
    import torch

    return f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}"


def write_json(result: Mapping[str, Any], out: str | Path | None, announce: bool = False) -> None:
    """Write ``result`` to ``out`` as JSON indented by 2, making its folder when missing; nothing when ``out``
    is empty. ``announce`` prints ``wrote OUT``."""
    if not out:
        return
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    if announce:
        print(f"wrote {out}")


def peak_rss_kb(pid: int) -> int:
    """Peak resident memory of process ``pid`` in KiB (``VmHWM`` of Linux's ``/proc``; 0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(line.split()[1]) for line in f if line.startswith("VmHWM:")), 0)
    except OSError:
        return 0
