"""The run directory every trainer writes, and the files common to all of them.

A run directory (``--output-dir``, default ``runs/<trainer>-<timestamp>``) holds ``results.json`` (the
contract: trainer, env, split, seed, model, steps, generated tokens, wall time, ``metrics`` and
``baseline_metrics``), ``results.md`` (the same as a table) and the trained team (``team/``); each trainer
adds its own files (see ``docs/trainers/``).

A run directory belongs to one run. :meth:`RunDir.claim`, called before any long work, takes the directory's
lock (an exclusive ``flock`` on ``.lock``, held until the run ends: a second run on the same directory is
refused, and a run killed in any way releases it with its process), refuses a directory that already holds
something unless the run continues it (``--resume``) or replaces it (``--overwrite``), removes what a killed run
left half-written (its temporary files) and checks that the directory can be written.

A run records each file it writes in the directory's manifest (:data:`MANIFEST`) as soon as it has written it
(:meth:`RunDir.wrote`, :func:`wrote`; the atomic writers here do it themselves): a file, or a folder the run has
just written as a whole (a team, a checkpoint), whose files are listed right after the write. Nothing is recorded
from a scan of the directory, so a file a user adds during a run is never the run's. ``--overwrite`` removes
exactly the recorded files (and the folders they leave empty), never a file a user added, and refuses in one line
a directory without a manifest (not a run directory).

Nothing is removed outside the run directory. A link inside it is removed as a link, never followed: a recorded
file under a folder that is now a link is not removed, the link is. A directory where a recorded path leads
outside through a link (``team`` a link to another run's ``team``) is refused in one line before any work, for
``--resume`` as for ``--overwrite``: remove the link yourself.

A writer's temporary file is ``.joy-tmp-<pid>-<name>`` beside what it becomes (:func:`temp_path`), a name no
file of a user's takes by chance; a claim removes those a killed run left, and no other file.

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
import stat
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
"""What the trainers write into a run directory (besides the ``eval-*.json`` files of ``joy-eval`` and an
Accelerate tracker's folder named after the run). Only the folders among them that ``--overwrite`` leaves empty
are removed by name; every file removed is one the manifest records."""

LOCK_FILE = ".lock"
"""The lock file of a run directory (it holds the process id of the run holding it)."""

MANIFEST = ".joy-run.json"
"""The manifest of a run directory: the files its runs wrote (paths relative to it), which ``--overwrite``
removes. A directory without one is not a run directory."""

MANIFEST_MAX_BYTES = 64 * 2**20
"""The largest manifest read back."""

TEMP_PREFIX = ".joy-tmp-"
"""How the name of a temporary file starts (``.joy-tmp-<pid>-<name>``, see :func:`temp_path`)."""

_TEMP = re.compile(re.escape(TEMP_PREFIX) + r"\d+-.")
"""The name of a temporary file of :func:`temp_path` (matched at its start)."""
_OLD_TEMP = re.compile(r"\.(?P<name>.+)\.tmp-\d+")
"""A temporary file of the versions before :data:`TEMP_PREFIX` (``.<name>.tmp-<pid>``): removed only when
``<name>`` is a file the project writes at the top of a run directory."""
_OLD_CHECKPOINT_TEMP = re.compile(r"\.tmp-step-\d+-\d+|\.latest\.tmp")
"""A temporary checkpoint or ``latest`` pointer of the versions before :data:`TEMP_PREFIX`."""

_HELD: dict[str, RunDir] = {}
"""The run directories this process holds (claimed, lock held), by real path: where :func:`wrote` records."""


def temp_path(path: Path) -> Path:
    """Where a writer puts what becomes ``path`` until it is complete (then renamed over ``path``):
    ``.joy-tmp-<pid>-<name>`` beside it, a name no user's file takes by chance, which
    :meth:`RunDir.remove_orphans` removes once the process that wrote it is gone."""
    return path.with_name(f"{TEMP_PREFIX}{os.getpid()}-{path.name}")


class RunDir:
    """Where a run writes: ``output_dir`` or ``runs/<trainer>-<timestamp>`` under the current directory."""

    def __init__(self, output_dir: str | os.PathLike | None, trainer: str) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.path = Path(output_dir or os.path.join("runs", f"{trainer}-{stamp}"))
        self._lock: Any = None
        self._found: set[str] | None = None  # what the directory held when claimed (None: it did not exist)
        self._created: list[Path] = []  # the directories the claim created, deepest first
        self._known: set[str] | None = None  # what the manifest records (None: the run does not hold the directory)
        self._real = ""  # the directory's real path, while the run holds it
        self._pid = 0  # the process holding it (a forked child records nothing)

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    def wrote(self, *paths: str | os.PathLike) -> None:
        """Record in the manifest (:data:`MANIFEST`, atomically, at once) what this run has just written: each of
        ``paths`` (absolute, or relative to the current directory, as it was written) a file or a link, or a
        folder the run has just written as a whole (a team, a checkpoint), whose files and links are listed now
        (links are recorded as links, never followed). A path that lies outside the directory (through a link) is
        not recorded, nor anything on a process that does not hold the directory (:meth:`claim`). Recorded
        files that no longer exist leave the manifest."""
        if self._known is None or self._pid != os.getpid():
            return
        found: set[str] = set()
        for path in paths:
            found |= _files_written(self._real, path)
        if found <= self._known:
            return
        listed = read_manifest(self.path) or []
        files = {rel for rel in {*listed, *self._known} if _present(self._real, rel)} | found
        _write_manifest(self.path, files)
        self._known = files

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
        runs recorded writing there), refuse it when a recorded path leads outside it through a link, create it,
        remove orphaned temporary files (:meth:`remove_orphans`) and check that it can be written. Returns the
        names removed by ``overwrite``. The caller releases the lock (:meth:`release`) when the run ends."""
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
            self._refuse_links_out(recorded or [], "--resume" if resume else "--overwrite")
            if present and not resume:
                removed = self._remove_recorded(recorded or [])
            self.remove_orphans()
            try:
                probe = path / f".write-test-{os.getpid()}"
                probe.write_text("")
                probe.unlink()
                self._real = os.path.realpath(path)
                kept = {rel for rel in recorded or [] if _present(self._real, rel)}
                _write_manifest(path, kept)
            except OSError as exc:
                raise UsageError(
                    f"--output-dir {path} cannot be written ({_reason(exc, path)}); pass a directory you can write to"
                ) from None
        except BaseException:
            self._found = found
            self.undo_claim()
            raise
        self._found = found
        self._known, self._pid = kept, os.getpid()
        _HELD[self._real] = self
        return removed

    def _refuse_links_out(self, recorded: list[str], option: str) -> None:
        """One line, before anything is changed, when a recorded path leads outside the directory through a link
        (a folder on its way that is a link to somewhere outside): what the run would remove or write there would
        be another's."""
        root = os.path.abspath(self.path)
        real_root = os.path.realpath(root)
        seen: set[str] = set()
        for rel in recorded:
            target = _inside(root, rel)
            parts = Path(os.path.relpath(target, root)).parts if target else ()
            for depth in range(1, len(parts)):
                folder = os.path.join(root, *parts[:depth])
                if folder in seen:
                    continue
                seen.add(folder)
                if os.path.islink(folder) and not _within(os.path.realpath(folder), real_root):
                    raise UsageError(
                        f"{option}: {folder} is a link to {os.path.realpath(folder)}, outside the run directory "
                        f"{self.path}, and the runs recorded writing {rel} through it; nothing was changed: remove "
                        f"the link yourself (rm {folder}) and run again"
                    )

    def _remove_recorded(self, recorded: list[str]) -> list[str]:
        """Remove the files of the manifest (only those inside the directory; a folder on the way that is a link
        is removed as a link, never followed), then the folders they leave empty; returns what was removed."""
        root = os.path.abspath(self.path)
        real_root = os.path.realpath(root)
        removed: list[str] = []
        emptied: set[str] = set()
        for rel in recorded:
            target = _inside(root, rel)
            if target is None:
                continue  # a tampered manifest never names anything outside the directory
            link = _first_link(root, target)
            entry = link or target
            if not _within(os.path.realpath(os.path.dirname(entry)), real_root):
                continue
            try:
                if stat.S_ISDIR(os.lstat(entry).st_mode):
                    continue  # a folder where the run wrote a file: what is in it is not known to be the run's
                os.unlink(entry)
            except OSError:
                continue
            removed.append(os.path.relpath(entry, root))
            emptied.add(os.path.dirname(entry))
        folders = {f for e in emptied for f in _parents(root, e)} | self._project_folders()
        for folder in sorted(folders, key=lambda f: -len(Path(f).parts)):  # deepest first
            with suppress(OSError):
                os.rmdir(folder)
        return removed

    def _project_folders(self) -> set[str]:
        """The project's folders of the directory (see :data:`PROJECT_FILES`, and an Accelerate tracker's) and the
        folders under them, as absolute paths; links not followed."""
        root = Path(os.path.abspath(self.path))
        out: set[str] = set()
        for name in (*PROJECT_FILES, root.name):
            top = root / name
            if top.is_dir() and not top.is_symlink():
                out.update(folder for folder, _, _ in os.walk(top))  # a link to a folder is not walked into
        return out

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
        """Give the lock back (the run has ended); what the run wrote is recorded already (:meth:`wrote`)."""
        if _HELD.get(self._real) is self:
            del _HELD[self._real]
        self._known = None
        if self._lock is not None:
            with suppress(OSError):
                self._lock.close()
            self._lock = None

    def remove_orphans(self) -> list[str]:
        """Remove what a killed run left half-written: the temporary files and folders (:func:`temp_path`) at the
        top of the directory and in the project's folders (:data:`PROJECT_FILES`, links not followed), and those
        of earlier versions by their exact names; no other file. Called holding the lock, so no other process is
        writing them. Returns their paths relative to the directory."""
        orphans: list[Path] = []
        for entry in self.path.iterdir() if self.path.is_dir() else []:
            old = _OLD_TEMP.fullmatch(entry.name)
            if _TEMP.match(entry.name) or (old and _project_name(old["name"])):
                orphans.append(entry)
            elif entry.name in PROJECT_FILES and entry.is_dir() and not entry.is_symlink():
                for folder, subfolders, files in os.walk(entry):
                    at_checkpoints = Path(folder) == self.checkpoints
                    found = [
                        name
                        for name in [*subfolders, *files]
                        if _TEMP.match(name) or (at_checkpoints and _OLD_CHECKPOINT_TEMP.fullmatch(name))
                    ]
                    orphans += [Path(folder) / name for name in found]
                    subfolders[:] = [s for s in subfolders if s not in found]  # removed whole, not walked into
        for entry in orphans:
            _remove(entry)
        return [str(p.relative_to(self.path)) for p in orphans]


def wrote(*paths: str | os.PathLike) -> None:
    """Record ``paths``, just written, in the manifest of the run directory this process holds that contains
    each (:meth:`RunDir.wrote`: a file, or a folder written as a whole); a path in none (written elsewhere, or by
    a process that does not hold the run directory) is not recorded."""
    for path in paths:
        holder = _holder(path)
        if holder is not None:
            holder.wrote(path)


def _holder(path: str | os.PathLike) -> RunDir | None:
    """The run directory this process holds that contains ``path`` (the innermost), if any."""
    where = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    holders = [run for real, run in _HELD.items() if _within(where, real)]
    return max(holders, key=lambda run: len(run._real)) if holders else None


def _within(path: str, root: str) -> bool:
    """Whether the absolute ``path`` is ``root`` or lies under it (as text: resolve both first)."""
    return os.path.commonpath([root, path]) == root


def _inside(root: str, rel: str) -> str | None:
    """The absolute path of the recorded ``rel`` under ``root`` (as text), or None when it names ``root`` itself,
    its lock or manifest, or a path outside it."""
    target = os.path.normpath(os.path.join(root, rel))
    if not _within(target, root) or target == root or os.path.relpath(target, root) in (LOCK_FILE, MANIFEST):
        return None
    return target


def _present(root: str, rel: str) -> bool:
    """Whether the recorded ``rel`` names something that exists under ``root`` (a link counts, whatever it names)."""
    target = _inside(root, rel)
    return target is not None and os.path.lexists(target)


def _first_link(root: str, target: str) -> str | None:
    """The first folder on the way from ``root`` to ``target`` (below ``root``, above ``target``) that is a link."""
    folder = root
    for part in Path(os.path.relpath(target, root)).parts[:-1]:
        folder = os.path.join(folder, part)
        if os.path.islink(folder):
            return folder
    return None


def _parents(root: str, folder: str) -> list[str]:
    """``folder`` and the folders above it, up to (without) ``root``."""
    out = []
    while folder != root and _within(folder, root):
        out.append(folder)
        folder = os.path.dirname(folder)
    return out


def _project_name(name: str) -> bool:
    """Whether ``name`` is one the project writes at the top of a run directory."""
    return name in PROJECT_FILES or name == MANIFEST or (name.startswith("eval-") and name.endswith(".json"))


def _files_written(real_root: str, path: str | os.PathLike) -> set[str]:
    """What recording the written ``path`` adds (relative to ``real_root``, a real path): the file or link, or the
    files and links under a folder (links not followed); nothing when it lies outside ``real_root``."""
    full = os.path.abspath(path)
    parent = os.path.realpath(os.path.dirname(full))
    if not _within(parent, real_root):
        return set()
    full = os.path.join(parent, os.path.basename(full))
    if not os.path.lexists(full) or full == real_root:
        return set()
    found = [full]
    if os.path.isdir(full) and not os.path.islink(full):
        found = []
        for folder, subfolders, files in os.walk(full):
            found += [os.path.join(folder, s) for s in subfolders if os.path.islink(os.path.join(folder, s))]
            found += [os.path.join(folder, f) for f in files]
    return {os.path.relpath(f, real_root) for f in found} - {LOCK_FILE, MANIFEST}


def _write_manifest(run_dir: Path, files: Iterable[str]) -> None:
    """The manifest of ``run_dir`` recording ``files``, written atomically."""
    _write_atomic(run_dir / MANIFEST, json.dumps({"files": sorted(files)}), "the run's manifest")


def _remove(path: Path) -> None:
    """Remove ``path`` when it exists: a link or a file is unlinked (a link never followed), a folder removed
    with what it holds."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with suppress(OSError):
            path.unlink()


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
    """Add ``paths`` (written in ``run_dir``: absolute, or relative to the current directory; a file, or a folder
    written as a whole) to its manifest, when it has one, from a process that need not hold it (``joy-eval``);
    through the run that holds it (:meth:`RunDir.wrote`) when this process does."""
    holder = _HELD.get(os.path.realpath(run_dir))
    if holder is not None:
        holder.wrote(*paths)
        return
    recorded = read_manifest(run_dir)
    if recorded is None:
        return
    root = os.path.realpath(run_dir)
    added = set().union(*(_files_written(root, p) for p in paths))
    if not added <= set(recorded):
        _write_manifest(run_dir, set(recorded) | added)


def write_text_atomic(path: Path, text: str, what: str = "") -> None:
    """Write ``text`` to a temporary file beside ``path`` (:func:`temp_path`), then rename it over ``path`` (a
    link there is replaced, never followed): a reader sees the old file or the new one, never half of one; then
    record it as the run's (:func:`wrote`). A failure (a full disk, a read-only filesystem) removes the
    temporary file and is a one-line :class:`~joy_trainers.errors.WriteError` naming ``path`` and ``what``
    was being written."""
    _write_atomic(path, text, what)
    wrote(path)


def _write_atomic(path: Path, text: str, what: str = "") -> None:
    """:func:`write_text_atomic` without recording the file."""
    tmp = temp_path(path)
    with writing(path, what or path.name, cleanup=[tmp]):
        _remove(tmp)
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
            _remove(entry)
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
    """``team.save`` into a temporary directory beside ``path`` (:func:`temp_path`), renamed over it when complete
    (:func:`replace_path`: a link there is replaced, never followed; a user's files in the old team are kept),
    then recorded as the run's (:func:`wrote`). A failure, e.g. a full disk, leaves no half-written team: one line
    naming the path."""
    tmp = temp_path(path)
    with writing(path, "the trained team", cleanup=[tmp]):
        _remove(tmp)
        team.save(str(tmp))
        replace_path(tmp, path)
    wrote(path)


def replace_path(tmp: Path, path: Path) -> None:
    """Rename ``tmp`` (complete) over ``path``, removing what is there first: a link as a link (what it names is
    never touched), or a folder, whose files that no run recorded writing (a user's) move into the new folder
    unless it holds the same name. A failure is an ``OSError`` (inside :func:`writing`, one line)."""
    if path.is_dir() and not path.is_symlink():
        if tmp.is_dir() and not tmp.is_symlink():
            _keep_unrecorded(path, tmp)
        shutil.rmtree(path)
    elif os.path.lexists(path) and tmp.is_dir():
        path.unlink()  # a link or a file: a folder cannot be renamed over it
    os.replace(tmp, path)


def _keep_unrecorded(old: Path, new: Path) -> None:
    """Move into ``new`` the files and links of ``old`` (a folder of a run directory about to be replaced by
    ``new``) that no run recorded writing (a user's) and that ``new`` does not hold; nothing outside a run
    directory (the one this process holds, else ``old``'s parent when it has a manifest)."""
    holder = _holder(old)
    if holder is not None:
        root, known = holder._real, set(holder._known or ())
    else:
        recorded = read_manifest(old.parent)
        if recorded is None:
            return
        root, known = os.path.realpath(old.parent), set(recorded)
    real_old = os.path.realpath(old)
    for folder, subfolders, files in os.walk(real_old):
        links = [s for s in subfolders if os.path.islink(os.path.join(folder, s))]
        for name in [*links, *files]:
            file = os.path.join(folder, name)
            inside = os.path.relpath(file, real_old)
            if os.path.relpath(file, root) not in known and not os.path.lexists(new / inside):
                (new / inside).parent.mkdir(parents=True, exist_ok=True)
                os.replace(file, new / inside)
