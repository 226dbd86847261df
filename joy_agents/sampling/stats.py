"""What a sampler computed in a run (:class:`EngineStats`, every engine's), and the kernels a forward runs
(:class:`KernelCounter`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["EngineStats", "KernelCounter"]


@dataclass
class EngineStats:
    """What the engine computed: forwards, rows per forward, tokens computed and kept."""

    decode_forwards: int = 0
    prefill_forwards: int = 0
    rows_decoded: int = 0
    """Sum over decode forwards of their rows (each computes its next token, and its draft if it has one)."""
    tokens_kept: int = 0
    """Tokens of the finished samples."""
    samples: int = 0
    prompt_tokens: int = 0
    """Tokens of the prompts admitted (all but their last token go through prefill or come from a kept cache)."""
    reused_tokens: int = 0
    """Prompt tokens whose keys and values came from a kept prefix instead of a prefill."""
    draft_positions: int = 0
    """Positions decoded for drafted tokens (rows x draft width per forward, padding included)."""
    draft_tokens: int = 0
    """Tokens proposed by prompt lookup."""
    draft_tokens_kept: int = 0
    """Drafted tokens the model's own samples reproduced (emitted without a forward of their own)."""
    oom_retries: int = 0
    """Steps that ran out of memory and were retried with fewer rows (:mod:`joy_agents.sampling.continuous`)."""

    @property
    def tokens_computed(self) -> int:
        return self.rows_decoded + self.draft_positions

    @property
    def rows_per_forward(self) -> float:
        return self.rows_decoded / self.decode_forwards if self.decode_forwards else 0.0

    def as_dict(self) -> dict[str, float]:
        return {
            "decode_forwards": self.decode_forwards,
            "prefill_forwards": self.prefill_forwards,
            "rows_per_forward": self.rows_per_forward,
            "tokens_computed": self.tokens_computed,
            "tokens_kept": self.tokens_kept,
            "samples": self.samples,
            "prompt_tokens": self.prompt_tokens,
            "reused_tokens": self.reused_tokens,
            "draft_tokens": self.draft_tokens,
            "draft_tokens_kept": self.draft_tokens_kept,
            "oom_retries": self.oom_retries,
        }


class KernelCounter(TorchDispatchMode):
    """Counts the aten operators that compute while it is active (``with KernelCounter() as k: ...; k.count``).

    Views and aliases (``view``, ``transpose``, ``slice``, ``detach``, ...) are left out: on a GPU each counted
    operator is about one kernel launch, which is what bounds a small model's decode step. ``by_name`` holds the
    count per operator."""

    _ALIASES = frozenset({"_unsafe_view.default", "detach.default", "lift_fresh.default"})

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.by_name: dict[str, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.__name__
        if not func.is_view and name not in self._ALIASES:
            self.count += 1
            self.by_name[name] = self.by_name.get(name, 0) + 1
        return func(*args, **(kwargs or {}))
