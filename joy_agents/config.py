"""Settings of the team policy and what it returns: :class:`TeamConfig` (which models, the LoRA setup, the prompt
style), :class:`SamplingConfig` (temperature, nucleus, token cap, stop texts; defined with the generation settings
in :mod:`joy_agents.sampling.settings`), one :class:`Sample`, and
:func:`prompt_view`, the messages a role's prompt is rendered from in each prompt style.

The user-facing documentation is that of :mod:`joy_agents.policy`, which re-exports these names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from joy_agents.dtypes import DTYPES
from joy_agents.sampling.settings import SamplingConfig

__all__ = [
    "PROMPT_STYLES",
    "Sample",
    "SamplingConfig",
    "TeamConfig",
    "as_id_list",
    "as_id_lists",
    "prompt_view",
    "with_system_note",
]

PROMPT_STYLES = ("full", "compact")
"""How a role's turn is rendered (``TeamConfig.prompt_style``, :func:`prompt_view`)."""


def prompt_view(
    style: str, role: str, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The messages and tools a role's prompt is rendered from, in prompt ``style``.

    - ``full``: as the env gives them: the role's system prompt first, its tool schemas for the chat template.
    - ``compact``: the system prompt is replaced by the role's name and no tools are rendered, so a prompt is
      the request and the conversation so far. For role-specialised small models (one adapter per role, or the
      embedded tiny model) that learn their role's instructions and tools in SFT: the unchanging text is most of
      every prompt otherwise, and it puts the entities to copy hundreds of tokens back. A ``<scenario>...</scenario>``
      block of the system prompt is the role's task, not its instructions (a dialogue's customer: its persona and
      what it knows), so it stays after the name.
    """
    if style not in PROMPT_STYLES:
        raise ValueError(f"prompt style must be one of {PROMPT_STYLES}, got {style!r}")
    out = [dict(m) for m in messages]
    if style == "full":
        return out, list(tools) if tools else None
    if out and out[0].get("role") == "system":
        system = str(out[0].get("content") or "")
        start, end = system.find("<scenario>"), system.rfind("</scenario>")
        out[0]["content"] = f"{role}\n{system[start : end + len('</scenario>')]}" if 0 <= start < end else role
    else:
        out.insert(0, {"role": "system", "content": role})
    return out, None


def with_system_note(messages: Sequence[dict[str, Any]], note: str) -> list[dict[str, Any]]:
    """``messages`` with ``note`` appended to the system message (or a system message holding it)."""
    out = [dict(m) for m in messages]
    if not note:
        return out
    if out and out[0].get("role") == "system":
        out[0]["content"] = str(out[0].get("content") or "") + note
    else:
        out.insert(0, {"role": "system", "content": note.strip()})
    return out


@dataclass
class Sample:
    """One sampled completion; ``prompt_ids + completion_ids`` are exactly the ids the model saw and produced."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str


LORA_R_MAX = 2**16
"""The largest LoRA rank of a team (the ``sft`` trainer's ``lora_r`` bound)."""
LORA_ALPHA_MAX = 10**6
"""The largest LoRA alpha of a team (the ``sft`` trainer's ``lora_alpha`` bound)."""


@dataclass
class TeamConfig:
    """Which models the team uses: a shared base (``model``), per-role separate models, and the LoRA setup."""

    model: str
    roles: tuple[str, ...] = ("master", "qa", "ecommerce", "general", "math")
    separate_models: dict[str, str] = field(default_factory=dict)
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_target_modules: tuple[str, ...] = (
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    )
    use_lora: bool = True
    dtype: str = "auto"
    """The models' dtype: ``float32``, ``bfloat16``, ``float16`` or ``auto``, which picks bfloat16 where the device
    multiplies it natively (a CPU with AVX512-BF16 or AMX, a GPU with bf16) for a LoRA team, float32 elsewhere and
    for ``use_lora=False`` (:func:`joy_agents.dtypes.resolve_dtype`; ``TeamPolicy.dtype`` is the choice). A saved
    team keeps ``auto``, and chooses again on the machine that loads it."""
    device: str = "cpu"
    prompt_style: str = "full"
    """``full`` (system prompt and tools, the chat template's own rendering) or ``compact`` (:func:`prompt_view`)."""
    share_prefix: bool = True
    """Run a prompt that several rows share (G samples of one prompt, G episodes at the same turn) and the common
    start of a batch's prompts once, in sampling and in teacher-forced log-probs (:func:`prefill_shared`)."""

    def __post_init__(self) -> None:
        if self.prompt_style not in PROMPT_STYLES:
            raise ValueError(f"TeamConfig.prompt_style must be one of {PROMPT_STYLES}, got {self.prompt_style!r}")
        if not isinstance(self.share_prefix, bool):
            raise TypeError(f"TeamConfig.share_prefix must be true or false, got {self.share_prefix!r}")
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"TeamConfig.model must be a model name or local path, got {self.model!r}")
        if isinstance(self.roles, str):
            raise TypeError(f"TeamConfig.roles must be a tuple of role names, got the string {self.roles!r}")
        self.roles = tuple(self.roles)
        if not self.roles:
            raise ValueError("TeamConfig.roles is empty; give at least one role name")
        for r in self.roles:
            if not isinstance(r, str) or not r or "." in r or r.strip() != r:
                raise ValueError(
                    f"TeamConfig.roles: role names must be non-empty strings without '.' or surrounding spaces, "
                    f"got {r!r}"
                )
        if len(set(self.roles)) != len(self.roles):
            raise ValueError(f"TeamConfig.roles has duplicates: {self.roles!r}")
        self.separate_models = dict(self.separate_models)
        unknown = sorted(set(self.separate_models) - set(self.roles))
        if unknown:
            raise ValueError(
                f"TeamConfig.separate_models names roles {unknown} that are not in roles {list(self.roles)}"
            )
        for role, path in self.separate_models.items():
            if not isinstance(path, str) or not path:
                raise ValueError(f"TeamConfig.separate_models[{role!r}] must be a model name or path, got {path!r}")
        # bounded, not only typed: a team.json read back may hold an integer of 400 digits, which converts to no float
        if isinstance(self.lora_r, bool) or not isinstance(self.lora_r, int) or not 1 <= self.lora_r <= LORA_R_MAX:
            raise ValueError(f"TeamConfig.lora_r must be an int in [1, {LORA_R_MAX}], got {self.lora_r!r:.60}")
        alpha = self.lora_alpha
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha <= LORA_ALPHA_MAX:
            raise ValueError(f"TeamConfig.lora_alpha must be in (0, {LORA_ALPHA_MAX}], got {alpha!r:.60}")
        if not isinstance(self.lora_dropout, (int, float)) or not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError(f"TeamConfig.lora_dropout must be in [0, 1), got {self.lora_dropout!r:.60}")
        if isinstance(self.lora_target_modules, str):
            raise TypeError(
                f"TeamConfig.lora_target_modules must be a tuple of module names, got the string "
                f"{self.lora_target_modules!r}"
            )
        self.lora_target_modules = tuple(self.lora_target_modules)
        if not self.lora_target_modules:
            raise ValueError("TeamConfig.lora_target_modules is empty; name the linear layers to adapt")
        if self.dtype not in DTYPES:
            raise ValueError(f"TeamConfig.dtype must be one of {DTYPES}, got {self.dtype!r:.80}")
        try:
            torch.device(self.device)
        except (RuntimeError, TypeError) as e:
            raise ValueError(f"TeamConfig.device {self.device!r} is not a torch device ({e})") from None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (tuples become lists)."""
        d = dataclasses.asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def as_id_list(name: str, ids: Any) -> list[int]:
    """``ids`` (a list, tuple or tensor of int token ids) as a list; a TypeError naming ``name`` otherwise."""
    if isinstance(ids, torch.Tensor):
        ids = ids.tolist()
    if not isinstance(ids, (list, tuple)) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise TypeError(f"{name} must be a list of int token ids, got {ids!r:.80}")
    return list(ids)


def as_id_lists(name: str, seqs: Any, allow_empty_items: bool) -> list[list[int]]:
    """``seqs`` (a list of token id lists) as lists; a TypeError naming ``name`` otherwise, and a ValueError for an
    empty item unless ``allow_empty_items``."""
    if isinstance(seqs, torch.Tensor) or not isinstance(seqs, (list, tuple)):
        raise TypeError(f"{name} must be a list of token id lists, got {type(seqs).__name__}")
    out: list[list[int]] = []
    for i, s in enumerate(seqs):
        ids = as_id_list(f"{name}[{i}]", s)
        if not ids and not allow_empty_items:
            raise ValueError(f"{name}[{i}] is empty; every prompt needs at least one token")
        out.append(ids)
    return out
