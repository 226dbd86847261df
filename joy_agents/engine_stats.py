"""What a generation engine computed in a run (:class:`EngineStats`), shared by the continuous and vLLM engines."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EngineStats"]


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
        }
