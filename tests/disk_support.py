"""What the full-disk tests share: a small real filesystem (a tmpfs; mounting one needs root, which CI has) and a
way to fill it."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def tmpfs(mount: Path, size_mb: int) -> Iterator[Path]:
    """A tmpfs of ``size_mb`` MB mounted at ``mount`` (created), unmounted at the end; the test skips without root or
    when the mount fails."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path, leave: int) -> None:
    """Fill ``disk`` (through its file ``filler``) up to ``leave`` bytes free."""
    free = shutil.disk_usage(disk).free
    with open(disk / "filler", "ab") as f:
        f.write(b"\0" * max(0, free - leave))
