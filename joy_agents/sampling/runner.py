"""The continuous engine's runner: one model over its batch of KV slots, each row through its role's adapter.

A :class:`LaneRunner` holds one model (a *lane*: the roles that share a base model, or one role's separate model),
its :class:`~joy_agents.sampling.kv_slots.SlotBatch` and the stacked adapters of its roles. It does the model's
work and nothing else: it prefills joining rows (:meth:`~LaneRunner.prefill`, :meth:`~LaneRunner.extend` from kept
prefixes) and runs one decode forward over the running rows and their drafted tokens, returning the logits
(:meth:`~LaneRunner.forward`). Which requests join, leave and draft is the scheduler's
(:class:`~joy_agents.sampling.continuous.ContinuousSampler`); tokens and stops are the pure functions of
:mod:`joy_agents.sampling.tokens`. A row is any object with ``role`` and ``context`` (the ids its prefill runs).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch

from joy_agents.adapters import hf_model
from joy_agents.prefill import cache_argument, plain_layout, prefill_shared, prompt_layout
from joy_agents.sampling.kv_slots import SlotBatch
from joy_agents.sampling.prefix_cache import KeptPrefix, PrefixCache
from joy_agents.sampling.stacked_lora import StackedLoRA
from joy_agents.sampling.stats import EngineStats

__all__ = ["LaneRunner"]


class LaneRunner:
    """Runs ``model`` (one of ``team``'s) over its slot batch; counts its forwards in ``stats``."""

    def __init__(self, team: Any, model: torch.nn.Module, tokenizer: Any, stats: EngineStats) -> None:
        self.team = team
        self.model = model
        self.tokenizer = tokenizer
        self.shared = model is team.shared_model
        """Whether the model is a PeftModel holding several roles' adapters."""
        self.device = team.device
        self.pad_id = int(tokenizer.pad_token_id)
        self.stats = stats
        self.batch = self.new_batch()
        self._parameters = list(model.parameters())
        self._stack: StackedLoRA | None = None

    def new_batch(self) -> SlotBatch:
        """An empty batch of slots for this model."""
        return SlotBatch(hf_model(self.model).config, self.device, self.pad_id)

    def weights_version(self) -> int:
        """Grows whenever a weight of the model changes in place (an optimizer step, ``load_state_dict``)."""
        return sum(p._version for p in self._parameters)

    def drop_stacked(self) -> None:
        """Forget the stacked adapters (computed from weights that changed, or freed after running out of memory)."""
        self._stack = None

    def stacked(self) -> StackedLoRA | None:
        """The roles' :class:`StackedLoRA` (built on first use), or None where it does not apply."""
        if not self.shared:
            return None
        if self._stack is None:
            roles = tuple(r for r in self.team.roles if self.team.model_for(r) is self.model)
            self._stack = StackedLoRA(self.model, roles)
        return self._stack if self._stack.supported else None

    def adapter(self, role: str) -> Any:
        """A context in which the model runs ``role``'s adapter for every row."""
        stacked = self.stacked()
        if stacked is None:
            self.team.activate(role)
            return contextlib.nullcontext()
        stacked.set_rows([role])  # one role: its mask broadcasts over any number of rows
        return stacked

    # ------------------------------------------------------------------ rows joining
    def prefill(self, role: str, rows: Sequence[Any]) -> None:
        """Prefill the contexts of ``rows`` (all ``role``'s), shared parts once, and add the rows to the batch."""
        device = self.device
        prompts = [r.context for r in rows]
        layout = prompt_layout(prompts, self.pad_id, device) if self.team.config.share_prefix else None
        layout = layout or plain_layout(prompts, self.pad_id, device)
        with self.adapter(role):
            cache, _ = prefill_shared(self.model, layout)
        self.stats.prefill_forwards += 1 + (layout.common > 0)
        width = layout.ids.shape[1]
        mask = layout.mask[layout.index, : width - 1]  # (n, W-1)
        last = layout.ids[layout.index, width - 1]  # (n,)
        pos = layout.positions[layout.index, width - 1]  # (n,)
        self.batch.add(list(rows), cache, mask, last, pos)

    def extend(self, role: str, items: Sequence[tuple[Any, KeptPrefix, int]], prefixes: PrefixCache) -> None:
        """Add rows whose contexts start with kept prefixes (``(row, kept prefix, its tokens used)``): each row's
        kept keys and values (right-aligned), then one forward over the rest of every context but its last token,
        padding between them masked out."""
        device = self.device
        self.stats.reused_tokens += sum(n for _, _, n in items)
        contexts = [row.context for row, _, _ in items]
        rests = [c[n:-1] for c, (_, _, n) in zip(contexts, items, strict=True)]
        width = max(len(r) for r in rests)
        cache, kept = prefixes.cache_of([(e, n) for _, e, n in items], hf_model(self.model).config)
        mask = torch.zeros((len(items), kept + width), dtype=torch.long)
        ids = torch.full((len(items), width), self.pad_id, dtype=torch.long)
        positions = torch.zeros((len(items), width), dtype=torch.long)
        for i, ((_, _, n), rest) in enumerate(zip(items, rests, strict=True)):
            mask[i, kept - n : kept] = 1
            if rest:
                ids[i, width - len(rest) :] = torch.tensor(rest)
                mask[i, kept + width - len(rest) :] = 1
                positions[i, width - len(rest) :] = torch.arange(n, n + len(rest))
        mask, ids, positions = mask.to(device), ids.to(device), positions.to(device)
        if width:
            with self.adapter(role):
                self.model(
                    input_ids=ids,
                    attention_mask=mask,
                    position_ids=positions,
                    use_cache=True,
                    logits_to_keep=1,
                    **{cache_argument(type(hf_model(self.model))): cache},
                )
            self.stats.prefill_forwards += 1
        rows = [row for row, _, _ in items]
        last = torch.tensor([c[-1] for c in contexts], device=device)
        pos = torch.tensor([len(c) - 1 for c in contexts], device=device)
        self.batch.add(rows, cache, mask, last, pos)

    # ------------------------------------------------------------------ one decode forward
    def forward(self, drafts: dict[int, list[int]]) -> torch.Tensor:
        """One decode forward over every slot of the batch, each live row through its role's adapter, with the
        drafted tokens of the slots in ``drafts``; the logits of every slot's positions (slots, width, vocab).
        The batch's cache holds the new columns; :meth:`SlotBatch.advance` takes the sampled tokens."""
        batch = self.batch
        first = batch.rows[batch.live[0]].role
        roles = [r.role if r is not None else first for r in batch.rows]  # a free slot runs any role
        extra: dict[str, Any] = {cache_argument(type(hf_model(self.model))): batch.cache}
        stacked = self.stacked()
        if stacked is not None:
            stacked.set_rows(roles if len(set(roles)) > 1 else roles[:1])  # each row through its role's adapter
        elif self.shared and len(set(roles)) > 1:
            extra["adapter_names"] = roles  # PEFT's mixed batches (LoRA variants)
        else:
            self.team.activate(first)
        input_ids, mask, positions = batch.inputs(drafts)
        width = input_ids.shape[1]
        with stacked or contextlib.nullcontext():
            out = self.model(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=positions,
                use_cache=True,
                logits_to_keep=width,
                **extra,
            )
        self.stats.decode_forwards += 1
        self.stats.rows_decoded += len(roles)
        self.stats.draft_positions += len(roles) * (width - 1)
        return out.logits[:, -width:]
