"""The random states a run saves and sets back, so that a resumed run draws what the uninterrupted one drew: Python's,
NumPy's and torch's (CPU, and every CUDA device's where CUDA is in use), as JSON-able values (RL checkpoints'
``rng.json``, the ``sft`` trainer's ``checkpoints/sft.json``)."""

from __future__ import annotations

import base64
import math
import random
from typing import Any

import numpy as np
import torch

from joy_trainers.errors import shown


def _bytes(state: torch.Tensor) -> str:
    return base64.b64encode(state.numpy().tobytes()).decode("ascii")


def _tensor(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)


def rng_state() -> dict[str, Any]:
    """The Python, NumPy and torch RNG states (CPU, and every CUDA device's where CUDA is in use) as JSON-able
    values."""
    version, internal, gauss = random.getstate()
    kind, key, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": [version, list(internal), gauss],
        "numpy": [kind, key.tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": _bytes(torch.get_rng_state()),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = [_bytes(s) for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Set the Python, NumPy and torch RNG states from :func:`rng_state`'s values."""
    version, internal, gauss = state["python"]
    kind, key, pos, has_gauss, cached = state["numpy"]
    torch_state = _tensor(state["torch"])
    cuda = state.get("cuda")
    if cuda is not None and (not torch.cuda.is_available() or len(cuda) != torch.cuda.device_count()):
        raise ValueError("the checkpoint's CUDA RNG states are for another set of devices")
    if gauss is not None and not (isinstance(gauss, float) and math.isfinite(gauss)):  # random keeps any object
        raise ValueError(f"the Python RNG's cached normal is {shown(gauss)}, not a finite float or null")
    random.setstate((int(version), tuple(int(x) for x in internal), gauss))
    np.random.set_state((str(kind), np.asarray(key, dtype=np.uint32), int(pos), int(has_gauss), float(cached)))
    torch.set_rng_state(torch_state)
    if cuda is not None:
        torch.cuda.set_rng_state_all([_tensor(s) for s in cuda])
