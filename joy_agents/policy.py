"""Team policy: one LLM policy per role with batched sampling and exact per-token log-probs.

The JoyAgents team has five roles (``master``, ``qa``, ``ecommerce``, ``general``, ``math``). By default they
share ONE base model, loaded once with ``AutoModelForCausalLM.from_pretrained``, wrapped in ONE PEFT
``PeftModel`` that holds one LoRA adapter per role; switching role switches the active adapter, so the base
weights exist once in memory. Roles listed in ``TeamConfig.separate_models`` get their own model (for example a
larger master), with their own LoRA adapter; with ``use_lora=False`` every role gets a full trainable copy.

Any model name or local directory that ``from_pretrained`` accepts works, and so do a ``.gguf`` file and
``smollm2-135m-instruct`` (converted once, :mod:`joy_agents.models`). Prompts are built with the role's tokenizer
chat template (Qwen2.5 / Hermes conventions: ``tools`` are passed to the template); a template that ignores
``tools`` gets them listed in the system message, with a warning, and prompts cut to a limit leave out their
oldest turns, never the system message, the tools or the request (:mod:`joy_agents.chat`).

Example::

    from joy_agents.policy import SamplingConfig, TeamConfig, TeamPolicy

    team = TeamPolicy(TeamConfig(model="/path/to/model"))
    ids = team.encode_prompt("math", [{"role": "system", "content": "..."}, {"role": "user", "content": "2+2?"}],
                             tools=None)
    samples = team.generate("math", [ids], SamplingConfig(temperature=1.0, max_new_tokens=64), num_samples=4)
    s = samples[0][0]              # sample 0 of prompt 0
    s.completion_ids, s.logprobs, s.text, s.finish_reason
    lp = team.logprobs("math", [s.prompt_ids], [s.completion_ids])   # teacher-forced, with grad when enabled
    team.save("runs/team"); team2 = TeamPolicy.load("runs/team", device="cuda")

Sampling (``TeamPolicy.generate``):

* all prompts x ``num_samples`` rows go through ONE ``model.generate`` call (left padding, attention mask,
  KV cache); ``result[i][j]`` is sample ``j`` of prompt ``i``;
* shared prefill (``TeamConfig.share_prefix``, on by default): a prompt that several rows share (the G samples
  of a node, or G episodes of a task at the same turn) runs once, and so does the start that all of a call's
  prompts share (a role's system prompt and tools, when at least ``MIN_SHARED_PREFIX`` tokens); their KV cache
  is copied to the rows before decoding (:func:`prefill_shared`). ``logprobs`` does the same for rows with one
  prompt (a GRPO group's G completions), gradients included. Both equal the unshared computation within float
  rounding (1e-4 in float32, tested);
* ``temperature == 0`` is greedy; otherwise tokens are drawn from ``softmax(logits / temperature)`` truncated to
  the ``top_p`` nucleus;
* ``Sample.logprobs[t]`` is ``log_softmax(logits / temperature)`` at the sampled token (temperature 1 when
  greedy), computed from the raw model logits, NOT renormalised over the top-p nucleus. It is the quantity
  ``TeamPolicy.logprobs`` returns for the same tokens and temperature (equal within 1e-4 in float32), so PPO /
  GRPO ratios start at exactly 1. The log-probs are gathered step by step by a logits processor, so memory
  stays at one ``batch x vocab`` buffer instead of ``output_logits``' ``steps x batch x vocab``;
* a row ends after the first EOS token (the chat template's end of turn, tokenizer EOS and the model's
  ``generation_config`` EOS ids) or the first token that completes one of ``SamplingConfig.stop``
  (``finish_reason="stop"``), or after
  ``max_new_tokens`` (``"length"``). Stop strings that are a single token are extra EOS ids; a stop string
  spelled with several tokens (``</answer>`` in most vocabularies) is matched in the decoded tail of a running
  row, and only of a row whose last token can complete one (it holds the stop's last character,
  :func:`stop_end_candidates`), so few rows are ever decoded. The completion keeps the token that ended it (the
  stop text, or the EOS id); when a stop string ends inside a merged token, that whole token is kept (no
  re-tokenisation, so the text may run a few characters past the stop);
* ``Sample.prompt_ids + Sample.completion_ids`` are exactly the ids fed to and produced by the model; trainers
  use them directly and never re-tokenise text. ``Sample.text`` is the completion decoded with special tokens
  kept, except EOS and pad ids.

Generation ignores the model's own ``generation_config`` sampling defaults (top_k, repetition penalty, ...):
only ``SamplingConfig`` decides, so the log-probs are those of the distribution actually sampled from.

Adapters and gradients: every role's LoRA parameters keep ``requires_grad=True``; only the active role's adapter
takes part in a forward pass, so a backward pass on role A's log-probs gives gradients to A's LoRA parameters
only, and a joint loss over several roles (forwards run one role after the other) reaches every role.
``trainable_parameters(role)`` lists one role's parameters for its optimiser. The base weights are frozen
when LoRA is used.

Memory: ``parameter_bytes(...)`` counts the unique storage of all parameters and buffers; five LoRA roles on a
shared base hold the base once (``team.parameter_bytes() / parameter_bytes(plain_model)`` is
``1 + adapters / base``; about 1.09 for a Qwen2.5-0.5B-sized model with r=16 on all seven projections).

Saving: ``save(path)`` writes ``team.json`` (the ``TeamConfig``) and ``path/<role>/`` per role: the LoRA adapter
(PEFT format) or, with ``use_lora=False``, the full model and tokenizer. ``TeamPolicy.load(path, **overrides)``
rebuilds the same team (for example ``device="cuda"``, ``dtype="bfloat16"``).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import json
import math
import os
import pickle
import warnings
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from joy_agents.chat import FittedPrompt, end_of_turn, render_prompt
from joy_agents.chat import fit_prompt as fit_chat_prompt
from joy_agents.models import resolve_model_path

__all__ = [
    "PROMPT_STYLES",
    "Sample",
    "SamplingConfig",
    "TeamConfig",
    "TeamPolicy",
    "attach_role_adapters",
    "parameter_bytes",
    "prompt_view",
]

_DTYPES = ("float32", "bfloat16", "float16")
PROMPT_STYLES = ("full", "compact")
"""How a role's turn is rendered (``TeamConfig.prompt_style``, :func:`prompt_view`)."""
_TEAM_FILE = "team.json"
_TEAM_FORMAT = "joy_agents.team/1"


@dataclass
class SamplingConfig:
    """How to sample completions: temperature (0 = greedy), nucleus ``top_p``, a cap on new tokens, stop texts."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 128
    stop: tuple[str, ...] = ("</answer>", "</tool_call>")

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


def prompt_view(
    style: str, role: str, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The messages and tools a role's prompt is rendered from, in prompt ``style``.

    - ``full``: as the env gives them: the role's system prompt first, its tool schemas for the chat template.
    - ``compact``: the system prompt is replaced by the role's name and no tools are rendered, so a prompt is
      the request and the conversation so far. For role-specialised small models (one adapter per role, or the
      embedded tiny model) that learn their role's instructions and tools in SFT: the unchanging text is most of
      every prompt otherwise, and it puts the entities to copy hundreds of tokens back.
    """
    if style not in PROMPT_STYLES:
        raise ValueError(f"prompt style must be one of {PROMPT_STYLES}, got {style!r}")
    out = [dict(m) for m in messages]
    if style == "full":
        return out, list(tools) if tools else None
    if out and out[0].get("role") == "system":
        out[0]["content"] = role
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
    dtype: str = "float32"
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
        if isinstance(self.lora_r, bool) or not isinstance(self.lora_r, int) or self.lora_r < 1:
            raise ValueError(f"TeamConfig.lora_r must be an int >= 1, got {self.lora_r!r}")
        if not isinstance(self.lora_alpha, (int, float)) or self.lora_alpha <= 0:
            raise ValueError(f"TeamConfig.lora_alpha must be > 0, got {self.lora_alpha!r}")
        if not isinstance(self.lora_dropout, (int, float)) or not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError(f"TeamConfig.lora_dropout must be in [0, 1), got {self.lora_dropout!r}")
        if isinstance(self.lora_target_modules, str):
            raise TypeError(
                f"TeamConfig.lora_target_modules must be a tuple of module names, got the string "
                f"{self.lora_target_modules!r}"
            )
        self.lora_target_modules = tuple(self.lora_target_modules)
        if not self.lora_target_modules:
            raise ValueError("TeamConfig.lora_target_modules is empty; name the linear layers to adapt")
        if self.dtype not in _DTYPES:
            raise ValueError(f"TeamConfig.dtype must be one of {_DTYPES}, got {self.dtype!r}")
        try:
            torch.device(self.device)
        except (RuntimeError, TypeError) as e:
            raise ValueError(f"TeamConfig.device {self.device!r} is not a torch device ({e})") from None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (tuples become lists)."""
        d = dataclasses.asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def parameter_bytes(*modules: torch.nn.Module) -> int:
    """Bytes of all parameters and buffers of ``modules``, each storage counted once (shared/tied weights once).

    Tensors on the ``meta`` device have no storage; they are counted once per tensor object.
    """
    seen: set[Any] = set()
    total = 0
    for module in modules:
        for t in list(module.parameters()) + list(module.buffers()):
            if t.device.type == "meta":
                key: Any = ("meta", id(t))
                nbytes = t.numel() * t.element_size()
            else:
                storage = t.untyped_storage()
                key = (t.device.type, t.device.index, storage.data_ptr())
                nbytes = storage.nbytes()
            if key not in seen:
                seen.add(key)
                total += nbytes
    return total


QWEN2_5_0_5B_SHAPE = {
    "vocab_size": 151936,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "tie_word_embeddings": True,
}
"""The shape of Qwen2.5-0.5B, for memory estimates without a download."""


def meta_team_memory_ratio(
    shape: dict[str, Any] | None = None, config: TeamConfig | None = None, dtype: str = "bfloat16"
) -> float:
    """Parameter bytes of a team (one base + one adapter per role) over one plain model, for a Qwen2
    model of ``shape`` built on the ``meta`` device (no weights are allocated or downloaded)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = config or TeamConfig(model="meta")
    with torch.device("meta"):
        model = Qwen2ForCausalLM(Qwen2Config(**(shape or QWEN2_5_0_5B_SHAPE))).to(getattr(torch, dtype))
        base = parameter_bytes(model)
        team = attach_role_adapters(model, config.roles, _lora_config(config))
        return parameter_bytes(team) / base


def _lora_config(config: TeamConfig) -> Any:
    from peft import LoraConfig

    return LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=list(config.lora_target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )


@contextlib.contextmanager
def _quiet_peft() -> Iterator[None]:
    """Hide a transformers deprecation warning that peft triggers (``is_gradient_checkpointing``)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def attach_role_adapters(model: torch.nn.Module, roles: Sequence[str], lora_config: Any) -> Any:
    """Wrap ``model`` in one ``PeftModel`` holding one fresh LoRA adapter per role (first role active).

    The base weights are not copied: every adapter sits on the same frozen base.
    """
    from peft import get_peft_model

    if not roles:
        raise ValueError("attach_role_adapters needs at least one role")
    with _quiet_peft():
        peft_model = get_peft_model(model, copy.deepcopy(lora_config), adapter_name=roles[0])
        for role in roles[1:]:
            peft_model.add_adapter(role, copy.deepcopy(lora_config))
    peft_model.set_adapter(roles[0])
    return peft_model


def _role_lora_parameters(model: torch.nn.Module, role: str) -> list[torch.nn.Parameter]:
    """The parameters of adapter ``role`` in every PEFT tuner layer of ``model``."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    params: list[torch.nn.Parameter] = []
    seen: set[int] = set()
    for module in model.modules():
        if not isinstance(module, BaseTunerLayer):
            continue
        for name in module.adapter_layer_names:
            container = getattr(module, name, None)
            if container is None or role not in container:
                continue
            item = container[role]
            found = [item] if isinstance(item, torch.nn.Parameter) else list(item.parameters())
            for p in found:
                if id(p) not in seen:
                    seen.add(id(p))
                    params.append(p)
    return params


def _hf_model(module: torch.nn.Module) -> Any:
    """The underlying transformers model of a PeftModel (or the model itself)."""
    from peft import PeftModel

    return module.get_base_model() if isinstance(module, PeftModel) else module


def _as_id_lists(name: str, seqs: Any, allow_empty_items: bool) -> list[list[int]]:
    if isinstance(seqs, torch.Tensor) or not isinstance(seqs, (list, tuple)):
        raise TypeError(f"{name} must be a list of token id lists, got {type(seqs).__name__}")
    out: list[list[int]] = []
    for i, s in enumerate(seqs):
        if isinstance(s, torch.Tensor):
            s = s.tolist()
        if not isinstance(s, (list, tuple)) or not all(isinstance(t, int) and not isinstance(t, bool) for t in s):
            raise TypeError(f"{name}[{i}] must be a list of int token ids, got {s!r:.80}")
        if not s and not allow_empty_items:
            raise ValueError(f"{name}[{i}] is empty; every prompt needs at least one token")
        out.append(list(s))
    return out


def unique_rows(rows: Sequence[Sequence[int]]) -> tuple[list[list[int]], list[int]]:
    """The distinct rows of ``rows`` in order of first appearance, and for each row the index of its copy."""
    first: dict[tuple[int, ...], int] = {}
    unique: list[list[int]] = []
    index: list[int] = []
    for r in rows:
        key = tuple(r)
        if key not in first:
            first[key] = len(unique)
            unique.append(list(r))
        index.append(first[key])
    return unique, index


def common_prefix_length(rows: Sequence[Sequence[int]]) -> int:
    """How many first tokens every row of ``rows`` shares."""
    if not rows:
        return 0
    first = rows[0]
    n = min(len(r) for r in rows)
    for r in rows[1:]:
        k = 0
        while k < n and r[k] == first[k]:
            k += 1
        n = k
    return n


MIN_SHARED_PREFIX = 16
"""Shortest common prefix of different prompts worth running once for all of them (:func:`prompt_layout`)."""


@dataclass
class PromptLayout:
    """Distinct prompts laid out to run their shared parts once (:func:`prompt_layout`).

    Row ``u`` of ``ids`` is ``[common tokens][padding][rest of prompt u]``: the first ``common`` columns are the
    same in every row, every prompt ends in the last column, and ``positions`` count real tokens only, so the
    padding in the middle changes nothing (it is masked out). ``index[r]`` is the distinct prompt of row ``r``
    of the batch the layout serves.
    """

    ids: torch.Tensor  # (U, W)
    mask: torch.Tensor  # (U, W)
    positions: torch.Tensor  # (U, W)
    common: int
    index: torch.Tensor  # (R,)


def prompt_layout(
    rows: Sequence[Sequence[int]], pad_id: int, device: torch.device | str = "cpu", min_common: int = MIN_SHARED_PREFIX
) -> PromptLayout | None:
    """The :class:`PromptLayout` of a batch of prompts ``rows`` when sharing saves work (some prompts repeat, or
    all share at least ``min_common`` first tokens), else None. A common prefix shorter than ``min_common`` is
    not split off; the common part always leaves every prompt at least its last token."""
    unique, index = unique_rows(rows)
    width = max(len(u) for u in unique)
    if width < 2:
        return None
    common = min(common_prefix_length(unique), min(len(u) for u in unique) - 1)
    if len(unique) > 1 and common < min_common:
        common = 0
    if len(unique) == len(rows) and common == 0:
        return None
    rest = max(len(u) for u in unique) - common
    width = common + rest
    ids = torch.full((len(unique), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(unique), width), dtype=torch.long)
    for i, u in enumerate(unique):
        ids[i, :common] = torch.tensor(u[:common], dtype=torch.long)
        mask[i, :common] = 1
        tail = u[common:]
        ids[i, width - len(tail) :] = torch.tensor(tail, dtype=torch.long)
        mask[i, width - len(tail) :] = 1
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    return PromptLayout(
        ids.to(device), mask.to(device), positions.to(device), common, torch.tensor(index, device=device)
    )


def plain_layout(rows: Sequence[Sequence[int]], pad_id: int, device: torch.device | str = "cpu") -> PromptLayout:
    """The :class:`PromptLayout` of ``rows`` with nothing shared: each row left-padded on its own."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(list(r), dtype=torch.long)
        mask[i, width - len(r) :] = 1
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    index = torch.arange(len(rows), device=device)
    return PromptLayout(ids.to(device), mask.to(device), positions.to(device), 0, index)


@functools.cache
def _cache_argument(model_class: type) -> str:
    """The name of ``model_class.forward``'s KV-cache argument: ``cache`` in newer transformers, before that
    ``past_key_values``."""
    import inspect

    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def _cache_of(output: Any) -> Any:
    cache = getattr(output, "cache", None)
    return output.past_key_values if cache is None else cache


def prefill_shared(model: torch.nn.Module, layout: PromptLayout) -> tuple[Any, str]:
    """Run every column of ``layout`` but the last through ``model`` with each shared part computed once: the
    common prefix for one row, then each distinct prompt's rest, then the KV cache copied out to the batch's
    rows (``layout.index``). Returns ``(cache, name of the model's cache argument)``. Gradients flow through the
    cache when enabled, so a loss on the rows reaches the shared tokens' computation once per row."""
    hf = _hf_model(model)
    arg = _cache_argument(type(hf))
    width, common, n_unique = layout.ids.shape[1], layout.common, layout.ids.shape[0]
    cache = None
    if common > 0:
        out = model(
            input_ids=layout.ids[:1, :common],
            attention_mask=layout.mask[:1, :common],
            position_ids=layout.positions[:1, :common],
            use_cache=True,
            logits_to_keep=1,
        )
        cache = _cache_of(out)
        if n_unique > 1:
            cache.batch_repeat_interleave(n_unique)
    if width - 1 > common:
        extra = {arg: cache} if cache is not None else {}
        out = model(
            input_ids=layout.ids[:, common : width - 1],
            attention_mask=layout.mask[:, : width - 1],
            position_ids=layout.positions[:, common : width - 1],
            use_cache=True,
            logits_to_keep=1,
            **extra,
        )
        cache = _cache_of(out)
    if cache is None:
        raise RuntimeError("internal error: prefill_shared got a layout without a prefix (width < 2)")
    cache.reorder_cache(layout.index)
    return cache, arg


def prompt_batches(items: Sequence[Any], size: int, prompt: Any = None) -> list[list[Any]]:
    """``items`` cut into micro-batches of at most ``size``, those with the same prompt next to each other and in
    one micro-batch where they fit, so :meth:`TeamPolicy.logprobs` runs each prompt once per micro-batch.

    ``prompt(item)`` gives an item's prompt ids (default ``item.prompt_ids``; for ``(sample, value)`` pairs the
    sample's). Items keep their order within a prompt; prompts are taken in order of first appearance and packed
    greedily; a prompt with more than ``size`` items fills whole micro-batches."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be an int >= 1, got {size!r}")

    def default(item: Any) -> Sequence[int]:
        return item[0].prompt_ids if isinstance(item, tuple) else item.prompt_ids

    key_of = prompt or default
    groups: dict[tuple[int, ...], list[Any]] = {}
    for item in items:
        groups.setdefault(tuple(key_of(item)), []).append(item)
    batches: list[list[Any]] = []
    current: list[Any] = []
    for group in groups.values():
        if len(current) + len(group) > size and current:
            batches.append(current)
            current = []
        while len(group) > size:
            batches.append(group[:size])
            group = group[size:]
        current.extend(group)
    if current:
        batches.append(current)
    return batches


def nucleus_logits(scaled: torch.Tensor, top_p: float) -> torch.Tensor:
    """``scaled`` (rows, vocab) with every token outside the ``top_p`` nucleus set to ``-inf`` (the most likely
    token always stays)."""
    sorted_logits, order = torch.sort(scaled, dim=-1, descending=False)
    cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    drop_sorted = cum <= (1.0 - top_p)
    drop_sorted[:, -1] = False  # the most likely token always stays
    drop = drop_sorted.scatter(1, order, drop_sorted)
    return scaled.masked_fill(drop, float("-inf"))


@dataclass(frozen=True)
class StopRules:
    """How a role's rows end (:func:`stop_rules`)."""

    end_ids: frozenset[int]
    """Ids that end a row: EOS / end-of-turn ids and the stop strings spelled by a single token."""
    text_stops: tuple[str, ...]
    """Stop strings found only in the decoded tail of a row."""
    hidden: frozenset[int]
    """Ids left out of a sample's text: end-of-turn and padding (special tokens), never content such as
    ``</answer>``, even when the model's ``generation_config`` lists it as an EOS id."""


def stop_rules(tokenizer: Any, eos_ids: Sequence[int], stop: Sequence[str]) -> StopRules:
    """The :class:`StopRules` of ``tokenizer`` with EOS ids ``eos_ids`` and stop strings ``stop``. An added token
    (e.g. ``</answer>`` of the tiny tokenizer) is always encoded alone, so its id alone detects it; only other stop
    strings need the decoded tail."""
    single = set()
    for text in stop:
        enc = tokenizer.encode(text, add_special_tokens=False)
        if len(enc) == 1:
            single.add(int(enc[0]))
    added = tokenizer.get_added_vocab()
    specials = {int(t) for t in tokenizer.all_special_ids}
    return StopRules(
        end_ids=frozenset(set(eos_ids) | single),
        text_stops=tuple(text for text in stop if text not in added),
        hidden=frozenset((set(eos_ids) & specials) | {int(tokenizer.pad_token_id)}),
    )


class _LogprobRecorder:
    """Logits processor: records log_softmax(raw_logits / T) of each sampled token, applies temperature/top-p.

    Called once per generation step with the RAW logits (it is the only processor). The token sampled at
    step t is only known at step t+1 (last column of ``input_ids``), so the scaled logits of the previous step
    are kept (one batch x vocab buffer) and ``finish`` gathers the last step from the returned sequences.
    """

    def __init__(self, temperature: float, top_p: float) -> None:
        self.sampling = temperature > 0
        self.temperature = temperature if self.sampling else 1.0
        self.top_p = top_p
        self._prev: torch.Tensor | None = None
        self._prev_lse: torch.Tensor | None = None
        self.steps: list[torch.Tensor] = []

    def _gather_prev(self, tokens: torch.Tensor) -> None:
        assert self._prev is not None and self._prev_lse is not None
        picked = self._prev.gather(1, tokens.view(-1, 1).to(self._prev.device)).squeeze(1)
        self.steps.append(picked - self._prev_lse)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self._prev is not None:
            self._gather_prev(input_ids[:, -1])
        scaled = scores.float()
        if self.temperature != 1.0:
            scaled = scaled / self.temperature
        self._prev = scaled
        self._prev_lse = torch.logsumexp(scaled, dim=-1)
        if not self.sampling:
            return scores
        if self.top_p < 1.0:
            return nucleus_logits(scaled, self.top_p)
        return scaled

    def finish(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """(rows, steps) log-probs of ``new_tokens`` (the generated columns)."""
        n = new_tokens.shape[1]
        if n == 0:
            return torch.zeros(new_tokens.shape[0], 0)
        if len(self.steps) == n - 1:
            self._gather_prev(new_tokens[:, -1])
        if len(self.steps) != n:
            raise RuntimeError(
                f"internal error: recorded {len(self.steps)} log-prob steps for {n} generated tokens; another "
                "logits processor or a generation mode with several tokens per step (assisted decoding) was used"
            )
        self._prev = self._prev_lse = None
        return torch.stack(self.steps, dim=1)


_END_CANDIDATES: weakref.WeakKeyDictionary[Any, dict[tuple[tuple[str, ...], int], torch.Tensor]] = (
    weakref.WeakKeyDictionary()
)


def stop_end_candidates(tokenizer: Any, stop_strings: Sequence[str], vocab_size: int | None = None) -> torch.Tensor:
    """A boolean mask over token ids: ``True`` for the tokens that can complete one of ``stop_strings``.

    A stop string first appears in a row's text when the token just generated holds its last character (the
    token's own text contains a suffix of the stop, or the whole stop), so only rows whose last token contains
    the last character of a stop string need their tail decoded. Tokens that decode alone to an incomplete
    UTF-8 sequence (``\ufffd``) count when a stop ends in a non-ASCII character, and ids beyond the
    tokenizer (a padded embedding) always count. Computed once per tokenizer and stop strings (one
    ``batch_decode`` of the vocabulary).
    """
    n = max(len(tokenizer), int(vocab_size or 0))
    key = (tuple(stop_strings), n)
    try:
        per_tok = _END_CANDIDATES.setdefault(tokenizer, {})
    except TypeError:  # not weak-referenceable: no cache
        per_tok = {}
    if key in per_tok:
        return per_tok[key]
    ends = {st[-1] for st in stop_strings if st}
    wide = any(not c.isascii() for c in ends)
    texts = tokenizer.batch_decode(
        [[i] for i in range(len(tokenizer))], skip_special_tokens=False, clean_up_tokenization_spaces=False
    )
    mask = torch.ones(n, dtype=torch.bool)
    for i, text in enumerate(texts):
        mask[i] = any(c in text for c in ends) or (wide and "\ufffd" in text)
    per_tok[key] = mask
    return mask


class _StopCriterion:
    """Per-row stop detection: EOS / single-token stops by id, every stop string in the decoded tail.

    Records ``stop_len[row]``: number of generated tokens when the row stopped (-1 while running).
    Only running rows whose last token can complete a stop string (:func:`stop_end_candidates`) are decoded,
    and only their last few tokens; with no stop string, no row is ever decoded.
    """

    def __init__(
        self,
        tokenizer: Any,
        stop_ids: list[int],
        stop_strings: tuple[str, ...],
        prompt_len: int,
        rows: int,
        device: torch.device,
        vocab_size: int | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.stop_ids = torch.tensor(sorted(set(stop_ids)), dtype=torch.long, device=device)
        self.stop_strings = stop_strings
        self.prompt_len = prompt_len
        # a stop string of b bytes is covered by at most b tokens; one more for a token that starts before it
        self.tail = max((len(s.encode("utf-8")) for s in stop_strings), default=0) + 1
        self.done = torch.zeros(rows, dtype=torch.bool, device=device)
        self.stop_len = torch.full((rows,), -1, dtype=torch.long, device=device)
        self.candidates = stop_end_candidates(tokenizer, stop_strings, vocab_size).to(device) if stop_strings else None
        self.decoded_rows = 0
        """Row tails decoded so far (a measure of the text matching's cost)."""

    def __call__(self, input_ids: torch.Tensor, scores: Any = None, **kwargs: Any) -> torch.Tensor:
        length = input_ids.shape[1]
        n_new = length - self.prompt_len
        last = input_ids[:, -1]
        if self.stop_ids.numel():
            hit = torch.isin(last, self.stop_ids) & ~self.done
        else:
            hit = torch.zeros_like(self.done)
        if self.candidates is not None:
            ends = self.candidates[last.clamp(0, self.candidates.numel() - 1)] | (last >= self.candidates.numel())
            running = (~self.done & ~hit & ends).nonzero().flatten()
            if running.numel():
                start = max(self.prompt_len, length - self.tail)
                tails = self.tokenizer.batch_decode(
                    input_ids[running, start:].tolist(),
                    skip_special_tokens=False,
                    clean_up_tokenization_spaces=False,
                )
                self.decoded_rows += len(tails)
                found = [i for i, text in enumerate(tails) if any(s in text for s in self.stop_strings)]
                if found:
                    hit[running[found]] = True
        self.stop_len[hit] = n_new
        self.done |= hit
        return self.done.clone()


class TeamPolicy:
    """The team's LLM policies: one adapter (or model) per role, batched sampling and teacher-forced log-probs."""

    def __init__(self, config: TeamConfig, adapters_dir: str | None = None) -> None:
        if not isinstance(config, TeamConfig):
            raise TypeError(f"TeamPolicy needs a TeamConfig, got {type(config).__name__}")
        from transformers import AutoModelForCausalLM

        self.config = config
        self.adapters_dir = adapters_dir
        self._torch_dtype = getattr(torch, config.dtype)
        self.device = torch.device(config.device)
        if adapters_dir is not None and not os.path.isdir(adapters_dir):
            raise FileNotFoundError(f"adapters_dir {adapters_dir!r} is not a directory (expected <dir>/<role>/)")

        self.tokenizer = self._load_tokenizer(config.model)
        self._tokenizers: dict[str, Any] = {}
        self._models: dict[str, torch.nn.Module] = {}
        self._shared: Any = None  # PeftModel holding the shared roles' adapters (use_lora only)
        self._shared_roles = tuple(r for r in config.roles if r not in config.separate_models)

        def load(path: str) -> torch.nn.Module:
            m = AutoModelForCausalLM.from_pretrained(resolve_model_path(path), dtype=self._torch_dtype)
            return m.to(self.device).eval()

        def saved(role: str) -> str | None:
            if adapters_dir is None:
                return None
            d = os.path.join(adapters_dir, role)
            if not os.path.isdir(d):
                raise FileNotFoundError(
                    f"no saved weights for role {role!r}: {d!r} does not exist (found "
                    f"{sorted(os.listdir(adapters_dir))}); save the team with TeamPolicy.save or drop adapters_dir"
                )
            return d

        for role in config.roles:
            self._tokenizers[role] = self.tokenizer
        for role, path in config.separate_models.items():
            self._tokenizers[role] = self._separate_tokenizer(path)

        if config.use_lora:
            if self._shared_roles:
                base = load(config.model)
                self._shared = self._wrap(base, self._shared_roles, saved)
                for role in self._shared_roles:
                    self._models[role] = self._shared
            for role, path in config.separate_models.items():
                self._models[role] = self._wrap(load(path), (role,), saved)
        else:
            first: torch.nn.Module | None = None
            for role in config.roles:
                d = saved(role)
                if d is not None:
                    m = load(d)
                elif role in config.separate_models:
                    m = load(config.separate_models[role])
                elif first is None:
                    m = first = load(config.model)
                else:
                    m = copy.deepcopy(first)
                m.requires_grad_(True)
                self._models[role] = m

        self._lora_params: dict[str, list[torch.nn.Parameter]] = {}
        if config.use_lora:
            for role in config.roles:
                params = _role_lora_parameters(self._models[role], role)
                if not params:
                    raise ValueError(
                        f"role {role!r} got no LoRA parameters: none of lora_target_modules "
                        f"{list(config.lora_target_modules)} matched the model's layers; set "
                        "TeamConfig.lora_target_modules to the names of its linear layers"
                    )
                self._lora_params[role] = params
            self._enable_all_lora_grads()

    # ------------------------------------------------------------------ loading helpers
    @staticmethod
    def _load_tokenizer(path: str) -> Any:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(resolve_model_path(path))
        if tok.pad_token_id is None:
            end = end_of_turn(tok) or tok.eos_token
            if not end:
                raise ValueError(f"tokenizer of {path!r} has neither a pad nor an eos token; set one and save it")
            tok.pad_token = end  # padding is masked out; any token the model knows will do
        return tok

    def _separate_tokenizer(self, path: str) -> Any:
        path = resolve_model_path(path)
        has_files = any(
            os.path.exists(os.path.join(path, f)) for f in ("tokenizer.json", "tokenizer_config.json", "vocab.json")
        )
        if os.path.isdir(path) and not has_files:
            return self.tokenizer
        return self._load_tokenizer(path)

    def _wrap(self, model: torch.nn.Module, roles: Sequence[str], saved: Any) -> Any:
        """LoRA adapters for ``roles`` on ``model``: saved ones from adapters_dir, else fresh."""
        dirs = [saved(r) for r in roles]
        if dirs[0] is None:
            peft_model = attach_role_adapters(model, roles, _lora_config(self.config))
        else:
            from peft import PeftModel

            with _quiet_peft():
                peft_model = PeftModel.from_pretrained(model, dirs[0], adapter_name=roles[0], is_trainable=True)
                for role, d in zip(roles[1:], dirs[1:], strict=True):
                    peft_model.load_adapter(d, adapter_name=role, is_trainable=True)
            peft_model.set_adapter(roles[0])
        return peft_model.to(self.device).eval()

    def _enable_all_lora_grads(self) -> None:
        for params in self._lora_params.values():
            for p in params:
                p.requires_grad_(True)

    # ------------------------------------------------------------------ roles
    @property
    def roles(self) -> tuple[str, ...]:
        return self.config.roles

    def _check_role(self, role: str) -> None:
        if role not in self._models:
            raise KeyError(f"unknown role {role!r}; this team has roles {list(self.config.roles)}")

    def tokenizer_for(self, role: str) -> Any:
        """The tokenizer of ``role`` (the shared one unless the role's separate model ships its own)."""
        self._check_role(role)
        return self._tokenizers[role]

    def model_for(self, role: str) -> torch.nn.Module:
        """The module that runs ``role``. Shared-base roles return the SAME PeftModel: activate the role first
        (``use_role``) before calling it directly."""
        self._check_role(role)
        return self._models[role]

    def _activate(self, role: str) -> torch.nn.Module:
        self._check_role(role)
        model = self._models[role]
        if model is self._shared and self._shared.active_adapter != role:
            self._shared.set_adapter(role)
            self._enable_all_lora_grads()  # peft freezes inactive adapters; keep every role trainable
        return model

    @contextlib.contextmanager
    def use_role(self, role: str) -> Iterator[torch.nn.Module]:
        """Context manager: the role's adapter is active inside; yields its module; restores the previous one."""
        self._check_role(role)
        previous = self._shared.active_adapter if self._shared is not None else None
        try:
            yield self._activate(role)
        finally:
            if previous is not None:
                self._activate(previous)

    def trainable_parameters(self, role: str) -> list[torch.nn.Parameter]:
        """Only ``role``'s trainable parameters: its LoRA weights, or its whole model without LoRA."""
        self._check_role(role)
        if self.config.use_lora:
            return list(self._lora_params[role])
        return list(self._models[role].parameters())

    def parameter_bytes(self) -> int:
        """Bytes held by all the team's parameters and buffers, shared storage counted once."""
        return parameter_bytes(*{id(m): m for m in self._models.values()}.values())

    # ------------------------------------------------------------------ prompts
    def encode_prompt(self, role: str, messages: list[dict], tools: list[dict] | None, note: str = "") -> list[int]:
        """Token ids of the chat ``messages`` (+ ``tools`` schemas) with the assistant generation prompt, in the
        team's ``prompt_style`` (:func:`prompt_view`); ``note`` (e.g. retrieved memories) is appended to the
        system message. A chat template that ignores ``tools`` gets them listed in the system message
        (:func:`joy_agents.chat.render_prompt`)."""
        messages, tools = prompt_view(self.config.prompt_style, role, messages, tools)
        return render_prompt(self.tokenizer_for(role), with_system_note(messages, note), tools)

    def fit_prompt(
        self, role: str, messages: list[dict], tools: list[dict] | None, max_tokens: int, note: str = ""
    ) -> FittedPrompt:
        """:meth:`encode_prompt` cut to ``max_tokens`` by leaving out the oldest turns, never the system message,
        the tools or the request (:func:`joy_agents.chat.fit_prompt`); returns a ``FittedPrompt``."""
        messages, tools = prompt_view(self.config.prompt_style, role, messages, tools)
        return fit_chat_prompt(self.tokenizer_for(role), with_system_note(messages, note), tools, max_tokens)

    # ------------------------------------------------------------------ ids
    def _eos_ids(self, role: str) -> list[int]:
        ids: set[int] = set()
        tok = self._tokenizers[role]
        if tok.eos_token_id is not None:
            ids.add(int(tok.eos_token_id))
        end = end_of_turn(tok)  # the template's end of a turn, whatever the tokenizer calls EOS
        if end and tok.convert_tokens_to_ids(end) is not None:
            ids.add(int(tok.convert_tokens_to_ids(end)))
        gen_eos = getattr(_hf_model(self._models[role]).generation_config, "eos_token_id", None)
        if gen_eos is not None:
            ids.update(int(t) for t in ([gen_eos] if isinstance(gen_eos, int) else gen_eos))
        return sorted(ids)

    def _left_pad(self, seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        layout = plain_layout(seqs, pad_id, self.device)
        return layout.ids, layout.mask, layout.positions

    def _check_ids(self, role: str, seqs: list[list[int]], extra: int = 0) -> None:
        cfg = _hf_model(self._models[role]).config
        vocab = int(self._models[role].get_input_embeddings().num_embeddings)
        top = max((max(s) for s in seqs if s), default=0)
        low = min((min(s) for s in seqs if s), default=0)
        if top >= vocab or low < 0:
            raise ValueError(f"token id out of range [0, {vocab}) for role {role!r}: saw {low}..{top}")
        limit = getattr(cfg, "max_position_embeddings", None)
        longest = max(len(s) for s in seqs) + extra
        if limit is not None and longest > limit:
            raise ValueError(
                f"sequence of {longest} tokens (longest prompt + max_new_tokens) exceeds the model's "
                f"max_position_embeddings={limit} for role {role!r}; shorten the prompt or lower max_new_tokens"
            )

    # ------------------------------------------------------------------ sampling
    def generate(
        self, role: str, prompts: list[list[int]], config: SamplingConfig, num_samples: int = 1
    ) -> list[list[Sample]]:
        """Sample ``num_samples`` completions of every prompt with ``role``'s policy in ONE generate call."""
        from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

        self._check_role(role)
        if not isinstance(config, SamplingConfig):
            raise TypeError(f"config must be a SamplingConfig, got {type(config).__name__}")
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError(f"num_samples must be an int >= 1, got {num_samples!r}")
        prompts = _as_id_lists("prompts", prompts, allow_empty_items=False)
        if not prompts:
            return []
        self._check_ids(role, prompts, extra=config.max_new_tokens)

        model = self._activate(role)
        hf = _hf_model(model)
        tok = self._tokenizers[role]
        eos_ids = self._eos_ids(role)
        pad_id = int(tok.pad_token_id)
        rules = stop_rules(tok, eos_ids, config.stop)
        end_ids, text_stops = sorted(rules.end_ids), rules.text_stops

        rows = [p for p in prompts for _ in range(num_samples)]
        # a prompt repeated (G samples, or G episodes at the same turn) and the common start of all prompts
        # (a role's system prompt and tools) are prefilled once and their KV cache copied to the rows
        layout = prompt_layout(rows, pad_id, self.device) if self.config.share_prefix else None
        if layout is None:
            input_ids, attention_mask, _ = self._left_pad(rows, pad_id)
        else:
            input_ids, attention_mask = layout.ids[layout.index], layout.mask[layout.index]
        prompt_len = input_ids.shape[1]
        recorder = _LogprobRecorder(config.temperature, config.top_p)
        vocab = int(self._models[role].get_input_embeddings().num_embeddings)
        criterion = _StopCriterion(tok, end_ids, text_stops, prompt_len, len(rows), input_ids.device, vocab)
        sampling = config.temperature > 0
        gen_kwargs: dict[str, Any] = dict(
            max_new_tokens=config.max_new_tokens,
            do_sample=sampling,
            num_beams=1,
            use_cache=True,
            eos_token_id=end_ids or None,
            pad_token_id=pad_id,
            return_dict_in_generate=False,
        )
        if sampling:  # temperature / top-p are applied by the recorder; disable the library's warpers
            gen_kwargs.update(temperature=1.0, top_k=0, top_p=1.0)
        gen_config = GenerationConfig(**gen_kwargs)

        saved_config, was_training = hf.generation_config, model.training
        # the model's own generation_config may carry sampling defaults (top_k, repetition_penalty, ...) that
        # generate() would merge into ours; swap in an empty one so only SamplingConfig decides
        hf.generation_config = GenerationConfig(eos_token_id=end_ids or None, pad_token_id=pad_id)
        try:
            model.eval()
            with torch.no_grad():
                extra: dict[str, Any] = {}
                if layout is not None:
                    cache, arg = prefill_shared(model, layout)
                    extra[arg] = cache
                sequences = model.generate(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    generation_config=gen_config,
                    logits_processor=LogitsProcessorList([recorder]),
                    stopping_criteria=StoppingCriteriaList([criterion]),
                    **extra,
                )
        finally:
            hf.generation_config = saved_config
            model.train(was_training)

        new_tokens = sequences[:, prompt_len:]
        logprobs = recorder.finish(new_tokens).cpu()
        steps = new_tokens.shape[1]
        stop_len = criterion.stop_len.cpu()
        lengths = torch.where(stop_len >= 0, stop_len, torch.full_like(stop_len, steps)).tolist()
        stopped = (stop_len >= 0).tolist()
        tokens = new_tokens.cpu().tolist()
        lp_rows = logprobs.tolist()
        completions = [tokens[r][: lengths[r]] for r in range(len(rows))]
        texts = tok.batch_decode(
            [[t for t in c if t not in rules.hidden] for c in completions],
            skip_special_tokens=False,
            clean_up_tokenization_spaces=False,
        )
        out: list[list[Sample]] = []
        for i, prompt in enumerate(prompts):
            group = []
            for j in range(num_samples):
                r = i * num_samples + j
                group.append(
                    Sample(
                        prompt_ids=list(prompt),
                        completion_ids=completions[r],
                        logprobs=lp_rows[r][: lengths[r]],
                        text=texts[r],
                        finish_reason="stop" if stopped[r] else "length",
                    )
                )
            out.append(group)
        return out

    # ------------------------------------------------------------------ teacher forcing
    def logprobs(
        self,
        role: str,
        prompt_ids: list[list[int]],
        completion_ids: list[list[int]],
        temperature: float = 1.0,
        share_prefix: bool | None = None,
    ) -> list[torch.Tensor]:
        """Teacher-forced log-probs ``log_softmax(logits / temperature)`` of each completion token (batched).

        Returns one 1-D float32 tensor per row (length of its completion), with grad when grad is enabled.
        ``temperature == 0`` means 1 (as in ``Sample.logprobs`` of greedy samples).

        ``share_prefix`` (default ``TeamConfig.share_prefix``): rows with the same prompt (a GRPO group's G
        completions) and the start all prompts share run those tokens once (:func:`prefill_shared`), then each
        row runs its completion on a copy of the KV cache: the same log-probs (within float rounding) and
        gradients, in less compute. :func:`prompt_batches` puts rows of the same prompt in the same batch.
        """
        self._check_role(role)
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature >= 0:
            raise ValueError(f"temperature must be a number >= 0, got {temperature!r}")
        prompts = _as_id_lists("prompt_ids", prompt_ids, allow_empty_items=False)
        completions = _as_id_lists("completion_ids", completion_ids, allow_empty_items=True)
        if len(prompts) != len(completions):
            raise ValueError(
                f"prompt_ids has {len(prompts)} rows but completion_ids has {len(completions)}; give one "
                "completion per prompt"
            )
        if not prompts:
            return []
        temp = float(temperature) if temperature > 0 else 1.0
        longest = max(len(c) for c in completions)
        if longest == 0:
            return [torch.zeros(0, device=self.device) for _ in prompts]
        seqs = [p + c for p, c in zip(prompts, completions, strict=True)]
        self._check_ids(role, seqs)
        model = self._activate(role)
        pad_id = int(self._tokenizers[role].pad_token_id)
        share = self.config.share_prefix if share_prefix is None else share_prefix
        layout = prompt_layout(prompts, pad_id, self.device) if share else None
        if layout is not None:
            return self._shared_logprobs(model, layout, completions, temp, pad_id)
        ids, mask, pos = self._left_pad(seqs, pad_id)
        width = ids.shape[1]
        # rows are right-aligned: the logits predicting the last `longest` tokens sit at columns
        # width-longest-1 .. width-2, the same for every row; only those are projected to the vocabulary
        keep = torch.arange(width - longest - 1, width - 1, device=ids.device)
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=keep, use_cache=False)
        logits = out.logits.float()
        if temp != 1.0:
            logits = logits / temp
        targets = ids[:, width - longest :]
        picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
        return [picked[i, longest - len(c) :] for i, c in enumerate(completions)]

    def _shared_logprobs(
        self, model: torch.nn.Module, layout: PromptLayout, completions: list[list[int]], temp: float, pad_id: int
    ) -> list[torch.Tensor]:
        """:meth:`logprobs` over a shared prefill: each row runs its prompt's last token and its completion on
        the rows' copy of the KV cache of the rest of its prompt."""
        cache, arg = prefill_shared(model, layout)
        width = layout.ids.shape[1]
        rows, longest = len(completions), max(len(c) for c in completions)
        ids = torch.full((rows, 1 + longest), pad_id, dtype=torch.long)
        row_mask = torch.zeros((rows, 1 + longest), dtype=torch.long)
        for r, c in enumerate(completions):
            ids[r, 1 : 1 + len(c)] = torch.tensor(c, dtype=torch.long)
            row_mask[r, : 1 + len(c)] = 1
        ids, row_mask = ids.to(self.device), row_mask.to(self.device)
        ids[:, 0] = layout.ids[layout.index, width - 1]  # every prompt ends in the last column
        mask = torch.cat([layout.mask[layout.index, : width - 1], row_mask], dim=1)
        start = layout.positions[layout.index, width - 1]  # (R,)
        pos = start[:, None] + torch.arange(1 + longest, device=self.device)[None, :]
        keep = torch.arange(0, longest, device=self.device)  # column t predicts completion token t
        out = model(
            input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=keep, use_cache=True, **{arg: cache}
        )
        logits = out.logits.float()  # (R, longest, V)
        if temp != 1.0:
            logits = logits / temp
        targets = ids[:, 1:]
        picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
        return [picked[r, : len(c)] for r, c in enumerate(completions)]

    # ------------------------------------------------------------------ persistence
    def save(self, path: str) -> None:
        """Write ``team.json`` and one directory per role (LoRA adapter, or full model + tokenizer)."""
        os.makedirs(path, exist_ok=True)
        for role in self.config.roles:
            d = os.path.join(path, role)
            os.makedirs(d, exist_ok=True)
            model = self._models[role]
            if self.config.use_lora:
                self._save_adapter(model, role, d)
            else:
                model.save_pretrained(d)
                self._tokenizers[role].save_pretrained(d)
        cfg = self.config.to_dict()
        team_dir = os.path.abspath(path)
        cfg["model"] = _stored_model_path(cfg["model"], team_dir)
        cfg["separate_models"] = {r: _stored_model_path(p, team_dir) for r, p in cfg["separate_models"].items()}
        with open(os.path.join(path, _TEAM_FILE), "w", encoding="utf-8") as f:
            json.dump({"format": _TEAM_FORMAT, "config": cfg}, f, indent=2, sort_keys=True)

    @staticmethod
    def _save_adapter(peft_model: Any, role: str, directory: str) -> None:
        from peft import get_peft_model_state_dict
        from safetensors.torch import save_file

        state = get_peft_model_state_dict(peft_model, adapter_name=role)
        state = {k: v.detach().contiguous().cpu() for k, v in state.items()}
        save_file(state, os.path.join(directory, "adapter_model.safetensors"), metadata={"format": "pt"})
        peft_model.peft_config[role].save_pretrained(directory)

    @classmethod
    def load(cls, path: str, **overrides: Any) -> TeamPolicy:
        """Rebuild a team written by ``save``; ``overrides`` replace TeamConfig fields (e.g. ``device="cuda"``)."""
        file = os.path.join(path, _TEAM_FILE)
        if not os.path.isfile(file):
            raise FileNotFoundError(f"{file!r} not found; {path!r} is not a directory written by TeamPolicy.save")
        with open(file, encoding="utf-8") as f:
            data = json.load(f)
        if data.get("format") != _TEAM_FORMAT:
            raise ValueError(f"{file!r} has format {data.get('format')!r}, expected {_TEAM_FORMAT!r}")
        fields = {f.name for f in dataclasses.fields(TeamConfig)}
        unknown = sorted(set(overrides) - fields)
        if unknown:
            raise TypeError(f"unknown TeamConfig fields {unknown}; valid fields: {sorted(fields)}")
        saved = dict(data["config"])
        saved["model"] = _loaded_model_path(saved["model"], path, file)
        saved["separate_models"] = {
            r: _loaded_model_path(p, path, file) for r, p in saved.get("separate_models", {}).items()
        }
        config = TeamConfig(**{**saved, **overrides})
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Detected pickle protocol")  # torch, on a foreign file
                return cls(config, adapters_dir=path)
        except pickle.UnpicklingError:  # a .bin weights file holding other objects than tensors: nothing ran
            dirs = [*(os.path.join(path, r) for r in config.roles), config.model]
            found = [os.path.join(d, f) for d in dirs for f in _BIN_FILES if os.path.isfile(os.path.join(d, f))]
            raise ValueError(
                f"{path}: refused {', '.join(found) or 'a weights file'}: it holds objects other than tensors (not "
                "written by joy-train, or tampered with); nothing in it was run"
            ) from None


_BIN_FILES = ("adapter_model.bin", "pytorch_model.bin")
"""Weights files loaded by ``torch.load(weights_only=True)``, which refuses other objects than tensors."""


def _stored_model_path(model: str, team_dir: str) -> str:
    """How ``team.json`` names a model: a local directory inside the team's run directory (e.g. the ``sft``
    trainer's ``base/``) relative to the team (``../base``), so the run can be moved; another local
    directory or ``.gguf`` file as an absolute path; a hub name (or ``smollm2-135m-instruct``) as it is."""
    if not os.path.exists(model):
        return model
    model = os.path.abspath(model)
    run_dir = os.path.dirname(team_dir)
    if os.path.commonpath([model, run_dir]) == run_dir:
        rel = os.path.relpath(model, team_dir)
        return rel if rel.startswith(".") else f"./{rel}"
    return model


def _loaded_model_path(model: str, team_dir: str, file: str) -> str:
    """The model a saved team names: a path relative to the team resolved against it; a local path that is
    not there is an error naming it (a hub name is left to ``from_pretrained``)."""
    if model.startswith(("./", "../")):
        model = os.path.normpath(os.path.join(os.path.abspath(team_dir), model))
    if (os.path.isabs(model) or model.startswith("~")) and not os.path.exists(os.path.expanduser(model)):
        raise FileNotFoundError(
            f"{file} names the model {model}, which does not exist (was it or the run moved?); put it back or "
            f'edit "model" in {file}'
        )
    return model
