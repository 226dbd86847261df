"""The sampler interface every engine implements, and node-wise sampling over it.

A :class:`Sampler` takes requests (a role, its prompt ids, a key) at any time with :meth:`~Sampler.submit`; each
:meth:`~Sampler.step` does one unit of work and returns the ``(key, sample)`` pairs that finished in it;
:attr:`~Sampler.busy` says whether requests are still running or waiting; :meth:`~Sampler.close` frees what the
sampler holds. :func:`drain` steps a sampler until it is idle. Make one with
:func:`~joy_agents.sampling.settings.make_sampler`.

* :class:`~joy_agents.rollout.RolloutEngine` submits the pending turn of every episode and, each time a turn
  comes back, applies it to its env and submits the episode's next turn;
* :func:`sample_many` (node-wise sampling: G samples at each node of the trajectories) submits every request
  once and drains the sampler.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from joy_agents.config import Sample, SamplingConfig
from joy_agents.sampling.settings import GenerationSettings, check_count, make_sampler
from joy_agents.sampling.stats import EngineStats

__all__ = ["Sampler", "drain", "sample_many"]


@runtime_checkable
class Sampler(Protocol):
    """What every engine's sampler does (see the module documentation)."""

    stats: EngineStats
    """What the sampler computed so far (forwards, rows, tokens)."""

    def submit(self, role: str, prompt_ids: list[int], key: Any, num_samples: int = 1) -> None:
        """Queue ``num_samples`` samples of ``prompt_ids`` by ``role``; each comes back from :meth:`step` as
        ``(key, sample)``."""
        ...

    def step(self) -> list[tuple[Any, Sample]]:
        """One unit of work (a decode forward, a ``generate`` call per role, a vLLM call); the samples that
        finished in it."""
        ...

    @property
    def busy(self) -> bool:
        """Whether requests are running or waiting."""
        ...

    def close(self) -> None:
        """Free what the sampler holds; requests still running or waiting are dropped."""
        ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: Any) -> None: ...


def drain(sampler: Sampler) -> list[tuple[Any, Sample]]:
    """Step ``sampler`` until it is idle; every ``(key, sample)`` pair in the order they finished."""
    out: list[tuple[Any, Sample]] = []
    while sampler.busy:
        out += sampler.step()
    return out


def sample_many(
    team: Any,
    requests: list[tuple[str, list[int]]],
    sampling: SamplingConfig,
    num_samples: int = 1,
    settings: GenerationSettings | None = None,
) -> list[list[Sample]]:
    """``num_samples`` samples of each ``(role, prompt_ids)`` request with the engine of ``settings`` (default
    :class:`~joy_agents.sampling.settings.GenerationSettings`); ``result[i][j]`` is sample ``j`` of request
    ``i``."""
    check_count("num_samples", num_samples, 1)
    out: list[list[Any]] = [[None] * num_samples for _ in requests]
    with make_sampler(team, settings or GenerationSettings(), sampling) as sampler:
        for i, (role, prompt) in enumerate(requests):
            for j in range(num_samples):
                sampler.submit(role, prompt, (i, j))
        for (i, j), sample in drain(sampler):
            out[i][j] = sample
    return out
