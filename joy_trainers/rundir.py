"""The run directory every trainer writes, and the files common to all of them.

A run directory (``--output-dir``, default ``runs/<trainer>-<timestamp>``) holds ``results.json`` (the
contract: trainer, env, split, seed, model, steps, generated tokens, wall time, ``metrics`` and
``baseline_metrics``), ``results.md`` (the same as a table) and the trained team (``team/``); each trainer
adds its own files (see ``docs/trainers/``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


class RunDir:
    """Where a run writes: ``output_dir`` or ``runs/<trainer>-<timestamp>`` under the current directory."""

    def __init__(self, output_dir: str | os.PathLike | None, trainer: str) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.path = Path(output_dir or os.path.join("runs", f"{trainer}-{stamp}"))

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to a temporary file beside ``path``, then rename it over ``path``: a reader
    sees the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path)


def write_results(run_dir: Path, results: dict[str, Any]) -> None:
    """``results.json`` (atomically) and ``results.md`` in ``run_dir``."""
    write_json_atomic(run_dir / "results.json", results)
    (run_dir / "results.md").write_text(results_table(results))


def results_table(results: dict[str, Any]) -> str:
    """A markdown table of the run's metrics against its baseline, per domain."""
    lines = [
        f"# {results['trainer']} on {results['env_id']} ({results['split']} split, seed {results['seed']})",
        "",
        f"model `{results['model']}`, wall {results['wall_s']:.0f} s",
        "",
        "| metric | baseline | after |",
        "|---|---|---|",
    ]
    after = results.get("metrics") or {}
    before = results.get("baseline_metrics") or {}

    def fmt(v: Any) -> str:
        return f"{v:.3f}" if isinstance(v, float) else ("-" if v is None else str(v))

    for key in ("success_rate", "mean_reward", "mean_accuracy", "format_valid_rate"):
        lines.append(f"| {key} | {fmt(before.get(key))} | {fmt(after.get(key))} |")
    lines += [
        "",
        "| domain | n | success (baseline) | success (after) | accuracy (after) | format-valid turns (after) |",
        "|---|---|---|---|---|---|",
    ]
    for domain, m in (after.get("per_domain") or {}).items():
        b = (before.get("per_domain") or {}).get(domain, {})
        lines.append(
            f"| {domain} | {m['n']} | {fmt(b.get('success_rate'))} | {fmt(m['success_rate'])} |"
            f" {fmt(m['mean_accuracy'])} | {fmt(m.get('format_valid_rate'))} |"
        )
    return "\n".join(lines) + "\n"
