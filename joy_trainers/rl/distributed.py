"""Several processes (``accelerate launch``): every process rolls out its share of each step's tasks and
they exchange what selection, updates and metrics need through these four functions. With one process
they do nothing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def world() -> tuple[int, int]:
    """``(rank, world size)`` of the torch.distributed group (``(0, 1)`` without one)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum ``t`` over processes in place (no-op with one process); returns it."""
    if world()[1] > 1:
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.SUM)
    return t


def all_gather_objects(obj: Any) -> list[Any]:
    """One ``obj`` per process, in rank order."""
    if world()[1] == 1:
        return [obj]
    out: list[Any] = [None] * world()[1]
    torch.distributed.all_gather_object(out, obj)
    return out


def shard(items: Sequence[Any]) -> list[Any]:
    """This process's share of ``items`` (round robin)."""
    rank, size = world()
    return list(items[rank::size])


def barrier() -> None:
    """Wait for every process (no-op with one process)."""
    if world()[1] > 1:
        torch.distributed.barrier()
