"""The run directory every trainer writes, and the files common to all of them.

A run directory (``--output-dir``, default ``runs/<trainer>-<timestamp>``) holds ``results.json`` (the
contract: trainer, env, split, seed, model, steps, generated tokens, wall time, ``metrics`` and
``baseline_metrics``), ``results.md`` (the same as a table) and the trained team (``team/``); each trainer
adds its own files (see ``docs/trainers/``).

A run directory belongs to one run. :meth:`RunDir.claim`, called before any long work, takes the directory's
lock (an exclusive ``flock`` on ``.lock``, held until the run ends: a second run on the same directory is
refused, and a run killed in any way releases it with its process), refuses a directory that already holds
something unless the run continues it (``--resume``) or replaces it (``--overwrite``, which removes only the
files the project writes, :data:`PROJECT_FILES`), removes what a killed run left half-written (temporary
checkpoints and files) and checks that the directory can be written. Paths stored inside a run directory
are relative to it, and what the run needs (its starting team, a fine-tuned base) is inside it, so it can
be moved or copied.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import re
import shutil
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from joy_trainers.errors import UsageError, WriteError

try:
    import fcntl
except ImportError:  # not POSIX: runs are not locked
    fcntl = None  # type: ignore[assignment]

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
    "start_team",
    "config.json",
    "work",
)
"""What the trainers write into a run directory (besides the ``eval-*.json`` files of ``joy-eval``, temporary
files starting with ``.`` and an Accelerate tracker's folder named after the run)."""

LOCK_FILE = ".lock"
"""The lock file of a run directory (it holds the process id of the run holding it)."""


class RunDir:
    """Where a run writes: ``output_dir`` or ``runs/<trainer>-<timestamp>`` under the current directory."""

    def __init__(self, output_dir: str | os.PathLike | None, trainer: str) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.path = Path(output_dir or os.path.join("runs", f"{trainer}-{stamp}"))
        self._lock: Any = None
        self._found: set[str] | None = None  # what the directory held when claimed (None: it did not exist)

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

    def claim_and_report(self, tag: str, resume: bool = False, overwrite: bool = False) -> None:
        """:meth:`claim`, then one line (``[tag] --overwrite: removed ...``) naming what ``overwrite`` removed."""
        removed = self.claim(resume=resume, overwrite=overwrite)
        if removed:
            print(f"[{tag}] --overwrite: removed {', '.join(removed)} from {self.path}")

    def claim(self, resume: bool = False, overwrite: bool = False) -> list[str]:
        """Make the directory this run's before any long work: take its lock (:meth:`lock`), refuse it if it
        already holds something unless ``resume`` (continue the run in it) or ``overwrite`` (remove what the
        project wrote there), create it, remove orphaned temporary files (:meth:`remove_orphans`) and check
        that it can be written. Returns the names removed by ``overwrite``. The caller releases the lock
        (:meth:`release`) when the run ends."""
        path = self.path
        if resume and overwrite:
            raise UsageError("--resume continues the run in the directory and --overwrite replaces it; pass one")
        if path.exists() and not path.is_dir():
            raise UsageError(f"--output-dir {path} is a file, not a directory; pass a directory path")
        removed: list[str] = []
        found = {p.name for p in path.iterdir()} if path.is_dir() else None
        try:
            path.mkdir(parents=True, exist_ok=True)
            self.lock()
        except OSError as exc:
            raise UsageError(
                f"--output-dir {path} cannot be written ({exc.strerror or exc}); pass a directory you can write to"
            ) from None
        try:
            present = sorted(p.name for p in path.iterdir() if p.name != LOCK_FILE)
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
            self.remove_orphans()
            try:
                probe = path / f".write-test-{os.getpid()}"
                probe.write_text("")
                probe.unlink()
            except OSError as exc:
                raise UsageError(
                    f"--output-dir {path} cannot be written ({exc.strerror or exc}); pass a directory you can write to"
                ) from None
        except BaseException:
            self._found = found
            self.undo_claim()
            raise
        self._found = found
        return removed

    def undo_claim(self) -> None:
        """Give the directory back as the claim found it, for a run refused before it did any work: the lock file
        and ``config.json`` it wrote are removed, and the directory itself if the claim created it and it is now
        empty. A directory where the run wrote anything else keeps everything. Then :meth:`release`."""
        try:
            if self._lock is not None and self.path.is_dir():
                found = self._found or set()
                new = {p.name for p in self.path.iterdir()} - found
                if new <= {LOCK_FILE, "config.json"}:
                    for name in new:
                        with suppress(OSError):
                            (self.path / name).unlink()
                    if self._found is None:
                        with suppress(OSError):
                            self.path.rmdir()  # only when empty
        finally:
            self.release()

    def lock(self) -> None:
        """Take the directory's lock for this process, or refuse in one line when another run holds it. The
        lock lasts until :meth:`release` or the process's end, however it ends (the OS drops it)."""
        if self._lock is not None or fcntl is None:
            return
        handle = open(self.path / LOCK_FILE, "a+")  # noqa: SIM115 - held open for the run's life
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):  # not another run: no locks here
                handle.close()
                raise UsageError(
                    f"--output-dir {self.path} cannot be locked ({exc.strerror or exc}); pass a directory on a "
                    "filesystem that supports file locks"
                ) from None
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise UsageError(
                f"--output-dir {self.path} is in use by another run (process {holder}); wait for it to end, or "
                "pass another --output-dir"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._lock = handle

    def release(self) -> None:
        """Give the lock back (the run has ended)."""
        if self._lock is not None:
            with suppress(OSError):
                self._lock.close()
            self._lock = None

    def remove_orphans(self) -> list[str]:
        """Remove what a killed run left half-written: temporary checkpoint directories and temporary files.
        Called holding the lock, so no other process is writing them."""
        orphans = [*self.checkpoints.glob(".tmp-step-*"), *self.checkpoints.glob(".latest.tmp")]
        orphans += list(self.path.glob(".*.tmp-*"))  # files and folders (a half-copied starting team)
        for entry in orphans:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                with suppress(OSError):
                    entry.unlink()
        return [p.name for p in orphans]


def write_text_atomic(path: Path, text: str, what: str = "") -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``: a reader sees the old
    file or the new one, never half of one. A failure (a full disk, a read-only filesystem) removes the
    temporary file and is a one-line :class:`~joy_trainers.errors.WriteError` naming ``path`` and ``what``
    was being written."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with writing(path, what or path.name, cleanup=[tmp]):
        tmp.write_text(text)
        os.replace(tmp, path)


def write_json_atomic(path: Path, data: Any, what: str = "") -> None:
    """:func:`write_text_atomic` of ``data`` as JSON."""
    write_text_atomic(path, json.dumps(data, indent=2, default=str), what)


@contextmanager
def writing(path: Path, what: str, cleanup: Iterable[Path] = ()) -> Iterator[None]:
    """Run the body, which writes ``what`` at ``path``; an ``OSError`` there (``ENOSPC``: no space left, a
    quota, a read-only filesystem) removes the ``cleanup`` paths (what the body left half-written) and becomes
    one line: a :class:`~joy_trainers.errors.WriteError` naming the path, what was being written, the OS's
    reason and how to go on."""
    try:
        yield
    except OSError as exc:
        for entry in cleanup:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                with suppress(OSError):
                    entry.unlink()
        reason = exc.strerror or _first_copy_error(exc)
        raise WriteError(
            f"cannot write {what} at {path} ({reason}); nothing half-written was left: free space (or fix the "
            "filesystem) and run again, with --resume to continue a run from its last checkpoint"
        ) from None


def _first_copy_error(exc: OSError) -> str:
    """The reason of an ``OSError`` without ``strerror``: the first file's of a ``shutil.Error`` (a copy of a
    tree), else the exception's text."""
    errors = exc.args[0] if exc.args else None
    if isinstance(exc, shutil.Error) and isinstance(errors, list) and errors and len(errors[0]) == 3:
        return re.sub(r"^\[Errno \d+\] ", "", " ".join(str(errors[0][2]).split()))
    return " ".join(str(exc).split()) or type(exc).__name__


def run_results(trainer: str, cfg: Any, **fields: Any) -> dict[str, Any]:
    """The ``results.json`` block of a run of ``trainer`` with the config dataclass ``cfg``: the trainer, env,
    evaluated split and seed, then ``fields`` (``steps``, ``wall_s``, ``metrics``, ...), then the generation
    settings (``cfg.generation_settings()``, which ``joy-eval`` reads back) and the config."""
    head = {"trainer": trainer, "env_id": cfg.env_id, "split": cfg.eval_split, "seed": cfg.seed}
    generation = cfg.generation_settings().to_dict()
    return {**head, **fields, "generation": generation, "config": dataclasses.asdict(cfg)}


def write_results(run_dir: Path, results: dict[str, Any]) -> None:
    """``results.json`` (atomically) and ``results.md`` in ``run_dir``."""
    write_json_atomic(run_dir / "results.json", results, "the run's results")
    write_text_atomic(run_dir / "results.md", results_table(results), "the run's results table")


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


def save_team(team: Any, path: Path) -> None:
    """``team.save`` into a temporary directory beside ``path``, renamed over it when complete (a failure, e.g.
    a full disk, leaves no half-written team: one line naming the path)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with writing(path, "the trained team", cleanup=[tmp]):
        shutil.rmtree(tmp, ignore_errors=True)
        team.save(str(tmp))
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
