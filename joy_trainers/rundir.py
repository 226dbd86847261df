"""The run directory every trainer writes, and the files common to all of them.

A run directory (``--output-dir``, default ``runs/<trainer>-<timestamp>``) holds ``results.json`` (the
contract: trainer, env, split, seed, model, steps, generated tokens, wall time, ``metrics`` and
``baseline_metrics``), ``results.md`` (the same as a table) and the trained team (``team/``); each trainer
adds its own files (see ``docs/trainers/``).

A run directory belongs to one run. :meth:`RunDir.claim`, called before any long work, takes the directory's
lock (an exclusive ``flock`` on ``.lock``, held until the run ends: a second run on the same directory is
refused, and a run killed in any way releases it with its process), refuses a directory that already holds
something unless the run continues it (``--resume``) or replaces it (``--overwrite``), removes what a killed run
left half-written (temporary checkpoints and files) and checks that the directory can be written.

A run records the files it wrote in the directory's manifest (:data:`MANIFEST`, at every checkpoint and when it
ends). ``--overwrite`` removes exactly the files recorded there (and the folders they leave empty), never a file
a user added, and refuses in one line a directory without a manifest (not a run directory).

Paths stored inside a run directory are relative to it, and what the run needs (its starting team, a fine-tuned
base) is inside it, so it can be moved or copied.
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

MANIFEST = ".joy-run.json"
"""The manifest of a run directory: the files its runs wrote (paths relative to it), which ``--overwrite``
removes. A directory without one is not a run directory."""

MANIFEST_MAX_BYTES = 64 * 2**20
"""The largest manifest read back."""


class RunDir:
    """Where a run writes: ``output_dir`` or ``runs/<trainer>-<timestamp>`` under the current directory."""

    def __init__(self, output_dir: str | os.PathLike | None, trainer: str) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.path = Path(output_dir or os.path.join("runs", f"{trainer}-{stamp}"))
        self._lock: Any = None
        self._found: set[str] | None = None  # what the directory held when claimed (None: it did not exist)
        self._created: list[Path] = []  # the directories the claim created, deepest first
        self._before: set[str] = set()  # the project's files the directory held when claimed

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

    def project_files(self) -> set[str]:
        """The files (and links) under :meth:`project_entries`, relative to the directory."""
        found: set[str] = set()
        for entry in self.project_entries():
            walk = [entry] if entry.is_symlink() or not entry.is_dir() else [entry, *entry.rglob("*")]
            found.update(str(p.relative_to(self.path)) for p in walk if p.is_symlink() or p.is_file())
        return found

    def record(self) -> None:
        """Add the files this run wrote since its claim (the project's files the directory did not hold then) to
        the manifest (:data:`MANIFEST`, atomically). Called by the process holding the lock at every checkpoint
        and when the run ends; nothing on other processes."""
        if self._lock is None:
            return
        record_written(self.path, sorted(self.project_files() - self._before))

    def claim_and_report(self, tag: str, resume: bool = False, overwrite: bool = False) -> None:
        """:meth:`claim`, then one line (``[tag] --overwrite: removed ...``) naming what ``overwrite`` removed."""
        removed = self.claim(resume=resume, overwrite=overwrite)
        if removed:
            shown = ", ".join(removed[:8]) + (f" and {len(removed) - 8} more" if len(removed) > 8 else "")
            print(
                f"[{tag}] --overwrite: removed {len(removed)} file(s) the runs recorded writing ({shown}) from "
                f"{self.path}"
            )

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
        self._created = [p for p in (path, *path.parents) if not p.exists()]
        try:
            path.mkdir(parents=True, exist_ok=True)
            self.lock()
        except OSError as exc:
            if found is None or LOCK_FILE not in found:
                with suppress(OSError):
                    (path / LOCK_FILE).unlink()
            self._remove_created()
            raise UsageError(
                f"--output-dir {path} cannot be written ({_reason(exc, path)}); pass a directory you can write to"
            ) from None
        try:
            present = sorted(p.name for p in path.iterdir() if p.name not in (LOCK_FILE, MANIFEST))
            recorded = read_manifest(path)
            if present and not resume:
                if not overwrite:
                    shown = ", ".join(present[:5]) + (", ..." if len(present) > 5 else "")
                    raise UsageError(
                        f"--output-dir {path} is not empty ({shown}); pass --resume to continue the run in it, "
                        "--overwrite to replace it, or another --output-dir"
                    )
                if recorded is None:
                    shown = ", ".join(present[:5]) + (", ..." if len(present) > 5 else "")
                    raise UsageError(
                        f"--overwrite: {path} is not a run directory of joy-train (no {MANIFEST} records what a run "
                        f"wrote there) and holds {shown}; nothing was removed: pass another --output-dir, or empty it "
                        "yourself"
                    )
                removed = self._remove_recorded(recorded)
                recorded = []
            self.remove_orphans()
            try:
                probe = path / f".write-test-{os.getpid()}"
                probe.write_text("")
                probe.unlink()
                self._before = self.project_files()
                write_text_atomic(path / MANIFEST, json.dumps({"files": recorded or []}), "the run's manifest")
            except OSError as exc:
                raise UsageError(
                    f"--output-dir {path} cannot be written ({_reason(exc, path)}); pass a directory you can write to"
                ) from None
        except BaseException:
            self._found = found
            self.undo_claim()
            raise
        self._found = found
        return removed

    def _remove_recorded(self, recorded: list[str]) -> list[str]:
        """Remove the files of the manifest (only those inside the directory), then the project's folders they
        leave empty; returns what was removed."""
        root = os.path.abspath(self.path)
        removed = []
        for rel in recorded:
            file = Path(os.path.normpath(os.path.join(root, rel)))
            if (
                os.path.commonpath([root, str(file)]) != root
                or file == Path(root)
                or file.name in (LOCK_FILE, MANIFEST)
            ):
                continue  # a tampered manifest never names anything outside the directory
            if file.is_symlink() or file.is_file():
                with suppress(OSError):
                    file.unlink()
                    removed.append(rel)
        for entry in self.project_entries():  # the folders left empty, deepest first
            if entry.is_dir() and not entry.is_symlink():
                for folder in sorted((p for p in entry.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                    with suppress(OSError):
                        folder.rmdir()
                with suppress(OSError):
                    entry.rmdir()
        return removed

    def _remove_created(self) -> None:
        """Remove the directories the claim created (each only when empty), deepest first."""
        for folder in self._created:
            with suppress(OSError):
                folder.rmdir()

    def undo_claim(self) -> None:
        """Give the directory back as the claim found it, for a run refused before it did any work: the lock file
        and ``config.json`` it wrote are removed, and the directory itself if the claim created it and it is now
        empty. A directory where the run wrote anything else keeps everything. Then :meth:`release`."""
        try:
            if self._lock is not None and self.path.is_dir():
                found = self._found or set()
                new = {p.name for p in self.path.iterdir()} - found
                if new <= {LOCK_FILE, MANIFEST, "config.json"}:
                    for name in new:
                        with suppress(OSError):
                            (self.path / name).unlink()
                    if self._found is None:
                        self._remove_created()  # only when empty
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
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()}\n")
            handle.flush()
        except OSError:  # a full disk: the caller removes the lock file and what it created
            handle.close()
            raise
        self._lock = handle

    def release(self) -> None:
        """Record what the run wrote (:meth:`record`) and give the lock back (the run has ended)."""
        if self._lock is not None:
            with suppress(UsageError):  # a full disk: the files of the last record stay recorded
                self.record()
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


JSON_DEPTH_MAX = 32
"""The deepest nesting of arrays and objects a file read back from a run directory may have (the project's own
files nest at most 6 deep)."""


def read_json(path: Path, max_bytes: int) -> Any:
    """The JSON in the file ``path``, read back from a run directory: a file over ``max_bytes``, not UTF-8 JSON,
    or nested deeper than :data:`JSON_DEPTH_MAX` is a one-line ``ValueError`` saying which (an ``OSError`` when it
    cannot be read)."""
    size = path.stat().st_size
    if size > max_bytes:
        raise ValueError(
            f"{path} is {size} bytes, above the {max_bytes} a run's file may hold (not written by joy-train)"
        )
    try:
        data = json.loads(path.read_bytes())
    except RecursionError:
        raise ValueError(f"{path} is nested too deep (not written by joy-train)") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(
            f"{path} is not valid JSON ({' '.join(str(exc).split())[:120]}): truncated or damaged"
        ) from None
    if _depth(data) > JSON_DEPTH_MAX:
        raise ValueError(f"{path} nests more than {JSON_DEPTH_MAX} levels deep (not written by joy-train)")
    return data


def _depth(data: Any) -> int:
    """How deeply ``data`` nests lists and dicts (0 for a number or string)."""
    deepest, level = 0, [(data, 1)]
    while level:
        value, d = level.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if children is not None:
            deepest = max(deepest, d)
            level.extend((c, d + 1) for c in children if isinstance(c, (dict, list)))
    return deepest


def read_manifest(run_dir: Path) -> list[str] | None:
    """The files the manifest of ``run_dir`` records (None: it has no readable manifest)."""
    file = run_dir / MANIFEST
    try:
        if file.stat().st_size > MANIFEST_MAX_BYTES:
            return None
        files = json.loads(file.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    return [f for f in files if isinstance(f, str)] if isinstance(files, list) else None


def record_written(run_dir: Path, paths: Iterable[str | Path]) -> None:
    """Add ``paths`` (files written in ``run_dir``: absolute, or relative to it) to its manifest, when it has one."""
    recorded = read_manifest(run_dir)
    if recorded is None:
        return
    root = os.path.abspath(run_dir)
    added = {os.path.relpath(os.path.abspath(os.path.join(root, p)), root) for p in paths}
    files = sorted(set(recorded) | added)
    if files != recorded:
        write_text_atomic(run_dir / MANIFEST, json.dumps({"files": files}), "the run's manifest")


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
    except Exception as exc:
        if not isinstance(exc, OSError) and not disk_full(exc):
            raise
        for entry in cleanup:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                with suppress(OSError):
                    entry.unlink()
        raise WriteError(
            f"cannot write {what} at {path} ({_reason(exc, path)}); nothing half-written was left: free space (or fix "
            "the filesystem) and run again, with --resume to continue a run from its last checkpoint"
        ) from None


_DISK_FULL = ("no space left on device", "os error 28", "errno 28", "unexpected pos", "file write failed")
"""How writers that do not raise ``OSError`` say the disk is full: safetensors (``os error 28``), torch.save's
zip writer (``[enforce fail at inline_container.cc] . unexpected pos``, ``PytorchStreamWriter failed writing
file``)."""


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says that a write found no space left on its device (``ENOSPC`` as an ``OSError``, or in
    the words of a library's writer that raises another exception, :data:`_DISK_FULL`)."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    text = (_first_copy_error(exc) if isinstance(exc, OSError) else str(exc)).lower()  # a tree's copy: its first
    return any(words in text for words in _DISK_FULL)


def free_space(path: Path) -> str:
    """The free space of the filesystem of ``path`` (its nearest existing folder), in words ("3.1 MB free")."""
    where = Path(os.path.abspath(path))
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        return "free space not known"
    return f"{free / 1e6:.1f} MB free"


def _reason(exc: BaseException, path: Path) -> str:
    """The OS's reason for a failed write at ``path``, with the free space left when the disk is full."""
    if disk_full(exc):
        return f"No space left on device, {free_space(path)} there"
    if isinstance(exc, OSError):
        return exc.strerror or _first_copy_error(exc)
    return " ".join(str(exc).split())[:200]


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
            _keep_unrecorded(path, tmp)
            shutil.rmtree(path)
        os.replace(tmp, path)


def _keep_unrecorded(old: Path, new: Path) -> None:
    """Move into ``new`` the files of ``old`` (a folder of a run directory about to be replaced by ``new``) that no
    run recorded writing (a user's) and that ``new`` does not hold; nothing in a directory without a manifest."""
    recorded = read_manifest(old.parent)
    if recorded is None:
        return
    known = set(recorded)
    for file in [p for p in old.rglob("*") if p.is_file() or p.is_symlink()]:
        inside = file.relative_to(old)
        if str(file.relative_to(old.parent)) not in known and not (new / inside).exists():
            (new / inside).parent.mkdir(parents=True, exist_ok=True)
            os.replace(file, new / inside)
