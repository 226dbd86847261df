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
    lp = team.logprobs("math", [s.prompt_ids], [s.completion_ids], 1.0)  # teacher-forced, at the sampling's T
    team.save("runs/team"); team2 = TeamPolicy.load("runs/team", device="cuda")

Sampling (``TeamPolicy.generate``):

* all prompts x ``num_samples`` rows go through ONE ``model.generate`` call (left padding, attention mask,
  KV cache); ``result[i][j]`` is sample ``j`` of prompt ``i``;
* shared prefill (``TeamConfig.share_prefix``, on by default): a prompt that several rows share (the G samples
  of a node, or G episodes of a task at the same turn) runs once, and so does the start that all of a call's
  prompts share (a role's system prompt and tools, when at least ``MIN_SHARED_PREFIX`` tokens); their KV cache
  is copied to the rows before decoding (:func:`~joy_agents.prefill.prefill_shared`). ``logprobs`` does the
  same for rows with one prompt (a GRPO group's G completions), gradients included. Both equal the unshared
  computation within float rounding (1e-4 in float32, tested);
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
  :func:`~joy_agents.sampling.tokens.stop_end_candidates`), so few rows are ever decoded. The completion keeps the
  token that ended it (the stop text, or the EOS id); when a stop string ends inside a merged token, that whole
  token is kept (no re-tokenisation, so the text may run a few characters past the stop);
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
rebuilds the same team (for example ``device="cuda"``, ``dtype="float32"``). ``dtype="auto"`` (the default) is
resolved when a team is built: :attr:`TeamPolicy.dtype` is the choice, ``dtype_reason`` why (:mod:`joy_agents.dtypes`).

Modules: this one holds :class:`TeamPolicy` and re-exports the names in ``__all__``; the settings and the
``Sample`` record are in :mod:`joy_agents.config`, the LoRA adapters and memory counts in
:mod:`joy_agents.adapters`, shared prefill and ``prompt_batches`` in :mod:`joy_agents.prefill`; ``generate`` is
:func:`joy_agents.sampling.generate.generate`, and the decode step (sampling, log-prob recording, stop rules) is
:mod:`joy_agents.sampling.tokens`, shared with the other engines (:mod:`joy_agents.sampling`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
import pickle
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from joy_agents.adapters import (
    attach_role_adapters,
    hf_model,
    lora_config,
    parameter_bytes,
    quiet_peft,
    role_lora_parameters,
    vocab_size,
)
from joy_agents.attention import use_cpu_attention
from joy_agents.chat import FittedPrompt, end_of_turn, render_prompt
from joy_agents.chat import fit_prompt as fit_chat_prompt
from joy_agents.config import (
    PROMPT_STYLES,
    Sample,
    SamplingConfig,
    TeamConfig,
    as_id_lists,
    prompt_view,
    with_system_note,
)
from joy_agents.dtypes import resolve_dtype
from joy_agents.head import use_contiguous_head
from joy_agents.models import resolve_model_path
from joy_agents.prefill import PromptLayout, plain_layout, prefill_shared, prompt_layout
from joy_agents.sampling.generate import generate
from joy_agents.weight_files import check_weights_dir

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

_TEAM_FILE = "team.json"
_TEAM_FORMAT = "joy_agents.team/1"


class TeamPolicy:
    """The team's LLM policies: one adapter (or model) per role, batched sampling and teacher-forced log-probs."""

    def __init__(self, config: TeamConfig, adapters_dir: str | None = None) -> None:
        if not isinstance(config, TeamConfig):
            raise TypeError(f"TeamPolicy needs a TeamConfig, got {type(config).__name__}")
        from transformers import AutoModelForCausalLM

        self.config = config
        self.adapters_dir = adapters_dir
        self.dtype, self.dtype_reason = resolve_dtype(config.dtype, config.device, config.use_lora)
        """The models' dtype (``config.dtype``, or what ``auto`` chose here) and why, in one line."""
        self._torch_dtype = getattr(torch, self.dtype)
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
            use_cpu_attention(m)  # grouped key/value heads read in place on a CPU (joy_agents.attention)
            use_contiguous_head(m)  # logits of kept positions without copying the output weight (joy_agents.head)
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
                params = role_lora_parameters(self._models[role], role)
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
            peft_model = attach_role_adapters(model, roles, lora_config(self.config))
        else:
            from peft import PeftModel

            with quiet_peft():
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

    def check_role(self, role: str) -> None:
        """A KeyError naming the team's roles unless ``role`` is one of them."""
        if role not in self._models:
            raise KeyError(f"unknown role {role!r}; this team has roles {list(self.config.roles)}")

    def tokenizer_for(self, role: str) -> Any:
        """The tokenizer of ``role`` (the shared one unless the role's separate model ships its own)."""
        self.check_role(role)
        return self._tokenizers[role]

    def model_for(self, role: str) -> torch.nn.Module:
        """The module that runs ``role``. Shared-base roles return the SAME PeftModel: activate the role first
        (``use_role``) before calling it directly."""
        self.check_role(role)
        return self._models[role]

    def activate(self, role: str) -> torch.nn.Module:
        """Make ``role``'s adapter the active one of its model (every role's adapter stays trainable); returns the
        module that runs ``role``. :meth:`use_role` restores the previous one afterwards."""
        self.check_role(role)
        model = self._models[role]
        if model is self._shared and self._shared.active_adapter != role:
            self._shared.set_adapter(role)
            self._enable_all_lora_grads()  # peft freezes inactive adapters; keep every role trainable
        return model

    @property
    def shared_model(self) -> Any:
        """The ``PeftModel`` holding the adapters of the roles that share the base model (None without LoRA or
        when every role has a separate model)."""
        return self._shared

    @contextlib.contextmanager
    def use_role(self, role: str) -> Iterator[torch.nn.Module]:
        """Context manager: the role's adapter is active inside; yields its module; restores the previous one."""
        self.check_role(role)
        previous = self._shared.active_adapter if self._shared is not None else None
        try:
            yield self.activate(role)
        finally:
            if previous is not None:
                self.activate(previous)

    def trainable_parameters(self, role: str) -> list[torch.nn.Parameter]:
        """Only ``role``'s trainable parameters: its LoRA weights, or its whole model without LoRA."""
        self.check_role(role)
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
    def eos_ids(self, role: str) -> list[int]:
        """The ids that end ``role``'s turns: its tokenizer's EOS, the chat template's end of turn and the
        model's ``generation_config`` EOS ids."""
        ids: set[int] = set()
        tok = self._tokenizers[role]
        if tok.eos_token_id is not None:
            ids.add(int(tok.eos_token_id))
        end = end_of_turn(tok)  # the template's end of a turn, whatever the tokenizer calls EOS
        if end and tok.convert_tokens_to_ids(end) is not None:
            ids.add(int(tok.convert_tokens_to_ids(end)))
        gen_eos = getattr(hf_model(self._models[role]).generation_config, "eos_token_id", None)
        if gen_eos is not None:
            ids.update(int(t) for t in ([gen_eos] if isinstance(gen_eos, int) else gen_eos))
        return sorted(ids)

    def _left_pad(self, seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        layout = plain_layout(seqs, pad_id, self.device)
        return layout.ids, layout.mask, layout.positions

    def check_ids(self, role: str, seqs: list[list[int]], extra: int = 0) -> None:
        """A ValueError unless every id of ``seqs`` is in ``role``'s vocabulary and the longest sequence plus
        ``extra`` tokens fits the model's positions."""
        cfg = hf_model(self._models[role]).config
        vocab = vocab_size(self._models[role])
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
        """Sample ``num_samples`` completions of every prompt with ``role``'s policy in ONE ``model.generate``
        call; ``result[i][j]`` is sample ``j`` of prompt ``i`` (:func:`joy_agents.sampling.generate.generate`)."""
        return generate(self, role, prompts, config, num_samples)

    # ------------------------------------------------------------------ teacher forcing
    def logprobs(
        self,
        role: str,
        prompt_ids: list[list[int]],
        completion_ids: list[list[int]],
        temperature: float,
        share_prefix: bool | None = None,
    ) -> list[torch.Tensor]:
        """Teacher-forced log-probs ``log_softmax(logits / temperature)`` of each completion token (batched).

        Returns one 1-D float32 tensor per row (length of its completion), with grad when grad is enabled.
        ``temperature`` is the one the completions were sampled at, always given (no default to drift from the
        sampler's); ``temperature == 0`` means 1 (as in ``Sample.logprobs`` of greedy samples).

        ``share_prefix`` (default ``TeamConfig.share_prefix``): rows with the same prompt (a GRPO group's G
        completions) and the start all prompts share run those tokens once (:func:`prefill_shared`), then each
        row runs its completion on a copy of the KV cache: the same log-probs (within float rounding) and
        gradients, in less compute. :func:`prompt_batches` puts rows of the same prompt in the same batch.
        """
        self.check_role(role)
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature >= 0:
            raise ValueError(f"temperature must be a number >= 0, got {temperature!r}")
        prompts = as_id_lists("prompt_ids", prompt_ids, allow_empty_items=False)
        completions = as_id_lists("completion_ids", completion_ids, allow_empty_items=True)
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
        self.check_ids(role, seqs)
        model = self.activate(role)
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
                self.save_adapter(model, role, d)
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
    def save_adapter(peft_model: Any, role: str, directory: str) -> None:
        """Write ``role``'s LoRA adapter of ``peft_model`` into ``directory`` (PEFT's format: safetensors weights
        and ``adapter_config.json``)."""
        from peft import get_peft_model_state_dict
        from safetensors.torch import save_file

        base = getattr(peft_model.get_base_model().config, "_name_or_path", "")
        if base:  # where the base was loaded from (the run's own base/, the model), not where it once was trained
            peft_model.peft_config[role].base_model_name_or_path = base
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
        for d in [*(os.path.join(path, r) for r in config.roles), config.model, *config.separate_models.values()]:
            check_weights_dir(d)  # a damaged or foreign weights file: one line, before anything is loaded
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
