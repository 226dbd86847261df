"""The run directory every trainer writes, and the files common to all of them.

A run directory (``--output-dir``, default ``runs/<trainer>-<timestamp>``) holds ``results.json`` (the
contract: trainer, env, split, seed, model, steps, generated tokens, wall time, ``metrics`` and
``baseline_metrics``), ``results.md`` (the same as a table) and the trained team (``team/``); each trainer
adds its own files (see ``docs/trainers/``).

A run directory belongs to one run. :meth:`RunDir.claim`, called before any long work, refuses a directory
that already holds something unless the run continues it (``--resume``) or replaces it (``--overwrite``,
which removes only the files the project writes, :data:`PROJECT_FILES`), and checks that the directory can
be written. Paths stored inside a run directory are relative to it, so it can be moved.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from joy_trainers.errors import UsageError

PROJECT_FILES = (
    "results.json",
    "results.md",
    "training.png",
    "reward_curve.png",
    "logs.json",
    "metrics.jsonl",
    "checkpoints",
    "team",
    "memory",
    "base",
    "work",
)
"""What the trainers write into a run directory (besides ``eval-<split>.json`` of ``joy-eval``, temporary
files starting with ``.`` and an Accelerate tracker's folder named after the run)."""


class RunDir:
    """Where a run writes: ``output_dir`` or ``runs/<trainer>-<timestamp>`` under the current directory."""

    def __init__(self, output_dir: str | os.PathLike | None, trainer: str) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.path = Path(output_dir or os.path.join("runs", f"{trainer}-{stamp}"))

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    def project_entries(self) -> list[Path]:
        """The entries of the directory that the project wrote (see :data:`PROJECT_FILES`)."""
        if not self.path.is_dir():
            return []
        out = []
        for entry in self.path.iterdir():
            name = entry.name
            if (
                name in PROJECT_FILES
                or (name.startswith("eval-") and name.endswith(".json"))
                or (name.startswith(".") and ".tmp" in name)
                or (name == self.path.name and entry.is_dir() and any(entry.rglob("events.out.tfevents*")))
            ):
                out.append(entry)
        return sorted(out)

    def claim(self, resume: bool = False, overwrite: bool = False) -> list[str]:
        """Make the directory this run's before any long work: refuse one that already holds something unless
        ``resume`` (continue the run in it) or ``overwrite`` (remove what the project wrote there), create it,
        and check that it can be written. Returns the names removed by ``overwrite``."""
        path = self.path
        if resume and overwrite:
            raise UsageError("--resume continues the run in the directory and --overwrite replaces it; pass one")
        if path.exists() and not path.is_dir():
            raise UsageError(f"--output-dir {path} is a file, not a directory; pass a directory path")
        removed: list[str] = []
        present = sorted(p.name for p in path.iterdir()) if path.is_dir() else []
        if present and not resume:
            if not overwrite:
                shown = ", ".join(present[:5]) + (", ..." if len(present) > 5 else "")
                raise UsageError(
                    f"--output-dir {path} is not empty ({shown}); pass --resume to continue the run in it, "
                    "--overwrite to replace it, or another --output-dir"
                )
            for entry in self.project_entries():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
                removed.append(entry.name)
        try:
            path.mkdir(parents=True, exist_ok=True)
            probe = path / f".write-test-{os.getpid()}"
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            raise UsageError(
                f"--output-dir {path} cannot be written ({exc.strerror or exc}); pass a directory you can write to"
            ) from None
        return removed


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
