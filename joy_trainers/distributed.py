"""Several processes (``accelerate launch``): the one place that knows which process this is.

Every trainer runs the same code on every process. What only one process may do (claim the run directory,
write a file, print a line) goes through :func:`is_main`, :func:`say` and :func:`on_main`; what every process
does on its own share (rollouts, evaluation) uses :func:`shard` and brings the shares together with
:func:`all_gather_objects`. :func:`start_processes` joins the process group that ``accelerate launch`` set up,
so that these answer correctly from a trainer's first line. With one process they all do the obvious thing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

from joy_trainers.errors import UsageError

T = TypeVar("T")


def start_processes() -> None:
    """Join the process group of ``accelerate launch`` (nothing in a single process, or when joined already).
    Called at the start of every trainer's ``train()``."""
    if world()[1] > 1:
        return
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return
    from accelerate import PartialState  # imported here: it costs over a second, and only training needs it

    PartialState(cpu=not torch.cuda.is_available())
    if not is_main():  # the libraries' progress bars are drawn by the main process only (and ours: is_main)
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()


def world() -> tuple[int, int]:
    """``(rank, world size)`` of the torch.distributed group (``(0, 1)`` without one)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def is_main() -> bool:
    """Whether this is the main process (rank 0): the one that writes the run directory and prints."""
    return world()[0] == 0


def say(message: str) -> None:
    """Print ``message`` once: on the main process."""
    if is_main():
        print(message, flush=True)


def on_main(fn: Callable[[], T]) -> T:
    """Run ``fn`` on the main process only and give its result to every process. When it raises, the main
    process raises that exception and every other process a :class:`UsageError` with the same message (a
    ``RuntimeError`` naming the main process for other exceptions), so that no process waits alone for one
    that stopped."""
    if world()[1] == 1:
        return fn()
    outcome: tuple[str, Any] = ("ok", None)
    failure: BaseException | None = None
    if is_main():
        try:
            outcome = ("ok", fn())
        except UsageError as exc:
            failure, outcome = exc, ("usage", str(exc))
        except BaseException as exc:  # noqa: BLE001 - re-raised below, after the others heard of it
            failure, outcome = exc, ("error", f"{type(exc).__name__}: {exc}")
    kind, value = all_gather_objects(outcome)[0]
    if failure is not None:
        raise failure
    if kind == "usage":
        raise UsageError(value)
    if kind == "error":
        raise RuntimeError(f"the main process stopped ({value})")
    return value


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
    """This process's share of ``items`` (round robin: process ``r`` of ``n`` takes items ``r, r + n, ...``)."""
    rank, size = world()
    return list(items[rank::size])


def unshard(parts: Sequence[Sequence[Any]]) -> list[Any]:
    """The items :func:`shard` split, back in their order, from every process's share (``parts`` in rank
    order, as :func:`all_gather_objects` gives them)."""
    size = len(parts)
    out: list[Any] = [None] * sum(len(p) for p in parts)
    for rank, part in enumerate(parts):
        out[rank::size] = list(part)
    return out


def barrier() -> None:
    """Wait for every process (no-op with one process)."""
    if world()[1] > 1:
        torch.distributed.barrier()
