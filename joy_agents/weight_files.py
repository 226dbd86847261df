"""Checks of saved weights files before any of them is loaded: a safetensors file whose header or tensor table
does not fit the file (garbage bytes, a truncated copy) and a torch file that is damaged or holds other objects
than tensors (a crafted pickle) are each refused with a one-line ``ValueError`` naming the file, and nothing in
them runs. :meth:`~joy_agents.policy.TeamPolicy.load` checks a team's adapters, its base model and its separate
models this way first.

    >>> check_weights_dir("runs/sft/base")        # raises ValueError("runs/sft/base/model.safetensors is ...")
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import warnings
import zipfile
from collections.abc import Iterable

SAFETENSORS_DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U64": 8,
    "U32": 4,
    "U16": 2,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "C64": 8,
}
"""Bytes per element of the safetensors dtypes (a dtype not listed is not size-checked)."""

TORCH_FILES = ("adapter_model.bin", "pytorch_model.bin")
"""Torch (pickle-based) weights files a model or adapter directory may hold."""


def safetensors_problem(path: str) -> str | None:
    """Why the safetensors file ``path`` cannot be what it claims (None when its header and tensor table fit
    the file): read from the header alone, so a multi-gigabyte file is checked in microseconds."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return f"is {size} bytes, too short for a safetensors header (truncated)"
            (n,) = struct.unpack("<Q", head)
            if n > size - 8:
                return f"names a {n}-byte header in a {size}-byte file (not safetensors, or truncated)"
            header = json.loads(f.read(n))
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    except (ValueError, UnicodeDecodeError):
        return "has a header that is not valid JSON (not safetensors, or damaged)"
    if not isinstance(header, dict):
        return "has a header that is not a tensor table (not safetensors, or damaged)"
    data = size - 8 - n
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            start, end = (int(x) for x in entry["data_offsets"])
            shape = [int(d) for d in entry["shape"]]
            dtype = str(entry["dtype"])
        except (KeyError, TypeError, ValueError):
            return f"has a damaged entry for tensor {name!r}"
        if not 0 <= start <= end <= data:
            return f"holds tensor {name!r} past its end ({end} > {data} data bytes: truncated)"
        count = 1
        for d in shape:
            count *= d
        width = SAFETENSORS_DTYPE_BYTES.get(dtype)
        if width is not None and count * width != end - start:
            return f"gives tensor {name!r} {end - start} bytes for shape {shape} of {dtype} (damaged)"
    return None


def torch_file_problem(path: str) -> str | None:
    """Why the torch file ``path`` cannot be loaded as tensors (None when it can): it is read with
    ``torch.load(weights_only=True)``, memory-mapped where the format allows, so a file holding any other
    object (a crafted pickle) is refused and nothing in it runs."""
    import torch

    zipped = zipfile.is_zipfile(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's notes on pickle protocols of foreign files
            torch.load(path, weights_only=True, map_location="cpu", mmap=zipped)
    except pickle.UnpicklingError as exc:
        if "Weights only load failed" in str(exc) or "Unsupported global" in str(exc):
            return (
                "refused: it holds objects other than tensors (not written by joy-train, or tampered with); nothing ran"
            )
        return "is damaged (not a torch file)"
    except (RuntimeError, EOFError, OSError, ValueError, struct.error):
        return "is truncated or damaged (not a torch file)"
    return None


def weights_files(directory: str) -> list[str]:
    """The weights files of a model or adapter ``directory``: its ``*.safetensors`` and its torch files."""
    if not os.path.isdir(directory):
        return []
    names = sorted(os.listdir(directory))
    return [os.path.join(directory, n) for n in names if n.endswith(".safetensors") or n in TORCH_FILES]


def check_weights_dir(directory: str) -> None:
    """Every weights file of ``directory`` (see :func:`weights_files`) must be what it claims: the first that is
    not is a one-line ``ValueError`` naming it and why."""
    check_weights_files(weights_files(directory))


def check_weights_files(paths: Iterable[str]) -> None:
    """Each of ``paths`` must be a sound safetensors or torch file (one-line ``ValueError`` otherwise)."""
    for path in paths:
        problem = safetensors_problem(path) if path.endswith(".safetensors") else torch_file_problem(path)
        if problem:
            raise ValueError(
                f"{path} {problem}; replace it with the file as it was written (or pass another run directory)"
            ) from None
