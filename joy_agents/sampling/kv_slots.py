"""The running rows of one model for continuous batching: a KV cache in slots, with room to grow.

A :class:`SlotBatch` holds the keys and values of every running row in per-layer buffers of shape
``(row capacity, heads, column capacity, head dim)``, with the rows' attention mask, next input token and next
position. Rows are left-padded: all rows write their next token in the same column, and each row's tokens end
there. What makes a decode step cheap:

* a decode step writes one column in place (the model's cache ``update`` lands in the buffer), where a plain
  ``DynamicCache`` concatenates, copying the whole cache every step;
* a row that finishes frees its slot (its mask row is cleared), and a joining row takes a free slot by writing
  its prefilled keys and values into it: nothing else moves;
* the buffers grow by doubling, and the batch is compacted (live rows only, columns no live row uses cut) only
  when a quarter of the slots are free, when the live rows leave more than half of the columns unused on the
  left, or when more than half of the columns hold drafted tokens that no row kept.

A step may carry drafted tokens after each row's next token (:meth:`SlotBatch.inputs`): it writes one column per
position, and :meth:`SlotBatch.advance` masks out the columns of the drafted tokens a row did not keep. Positions
are explicit, so a row's tokens may sit in any columns in order, holes between them masked.

A free slot keeps decoding its own placeholder token until it is reused or compacted away (its outputs are
ignored; its mask lets it attend to that token alone, so no row is ever fully masked).
"""

from __future__ import annotations

import bisect
from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

MIN_TRIM_COLUMNS = 128
"""Narrowest batch whose unused leading columns are worth a compaction."""


class SlotLayer(DynamicLayer):
    """A :class:`~transformers.cache_utils.DynamicLayer` whose keys and values are views of buffers with spare
    rows and columns: ``update`` writes the new columns in place."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, rows: int, length: int) -> None:
        super().__init__()
        self.k, self.v = keys, values  # (row capacity, H, column capacity, D)
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True
        self.rows, self.length = rows, length
        self._view()

    def _view(self) -> None:
        self.keys = self.k[: self.rows, :, : self.length]
        self.values = self.v[: self.rows, :, : self.length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        n = key_states.shape[-2]
        if key_states.shape[0] != self.rows or self.length + n > self.k.shape[2]:
            free = self.k.shape[2] - self.length
            raise RuntimeError(
                f"internal error: a slot layer of {self.rows} rows and {free} free columns got "
                f"{key_states.shape[0]} rows of {n} columns"
            )
        self.k[: self.rows, :, self.length : self.length + n] = key_states
        self.v[: self.rows, :, self.length : self.length + n] = value_states
        self.length += n
        self._view()
        return self.keys, self.values

    def resize(self, rows: int, columns: int, shift: int = 0) -> None:
        """Room for ``rows`` rows and ``columns`` columns (doubling), the content moved ``shift`` columns right."""
        cap_rows, cap_cols = self.k.shape[0], self.k.shape[2]
        if rows <= cap_rows and columns <= cap_cols and shift == 0:
            return
        new_rows = max(rows, 2 * cap_rows) if rows > cap_rows else cap_rows
        new_cols = max(columns, 2 * cap_cols) if columns > cap_cols else cap_cols
        # uninitialised but for the columns the view reads: the columns past ``length`` are written before any
        # step reads them (``update``, or ``SlotBatch.add`` for a new row); the ``shift`` columns the content moved
        # away from are masked, yet attention multiplies them by 0, so they must hold finite numbers
        k = self.k.new_empty((new_rows, self.k.shape[1], new_cols, self.k.shape[3]))
        v = self.v.new_empty((new_rows, self.v.shape[1], new_cols, self.v.shape[3]))
        k[: self.rows, :, shift : shift + self.length] = self.keys
        v[: self.rows, :, shift : shift + self.length] = self.values
        if shift:
            k[: self.rows, :, :shift] = 0
            v[: self.rows, :, :shift] = 0
        self.k, self.v = k, v
        self.length += shift
        self._view()


def plain_layers(cache: Any) -> list[Any]:
    """The layers of a prefill's ``DynamicCache``; an error naming the fallback for any other cache."""
    layers = list(getattr(cache, "layers", None) or [])
    if not layers or any(type(layer) not in (DynamicLayer, SlotLayer) for layer in layers):
        raise NotImplementedError(
            f"continuous batching needs a DynamicCache of plain layers, got {type(cache).__name__} with "
            f"{sorted({type(layer).__name__ for layer in layers})}; use GenerationSettings(engine='generate')"
        )
    return layers


class SlotBatch:
    """The running rows of one model (see the module documentation). ``rows[i]`` is the caller's object in slot
    ``i``, or None for a free slot."""

    def __init__(self, config: Any, device: torch.device, pad_id: int) -> None:
        self.config = config
        self.device = device
        self.pad_id = pad_id
        self.rows: list[Any] = []
        self.starts: list[int] = []  # the first column of each slot's tokens
        self.cache: Any = None
        self.dead = 0  # drafted columns no row kept, since the last compaction
        self.mask = torch.zeros((0, 0), dtype=torch.long, device=device)  # (row capacity, column capacity)
        self.next_ids = torch.zeros(0, dtype=torch.long, device=device)  # (row capacity,)
        self.next_pos = torch.zeros(0, dtype=torch.long, device=device)

    @property
    def length(self) -> int:
        return self.cache.layers[0].length if self.cache is not None else 0

    @property
    def live(self) -> list[int]:
        return [i for i, r in enumerate(self.rows) if r is not None]

    def _layers(self) -> list[SlotLayer]:
        return self.cache.layers

    def _resize(self, rows: int, columns: int, shift: int = 0) -> None:
        for layer in self._layers():
            layer.resize(rows, columns, shift)
        cap_rows, cap_cols = self._layers()[0].k.shape[0], self._layers()[0].k.shape[2]
        if self.mask.shape != (cap_rows, cap_cols) or shift:
            mask = self.mask.new_zeros((cap_rows, cap_cols))
            rows_kept = min(self.mask.shape[0], cap_rows)
            cols_kept = min(self.mask.shape[1], cap_cols - shift)
            mask[:rows_kept, shift : shift + cols_kept] = self.mask[:rows_kept, :cols_kept]
            self.mask = mask
            ids = self.next_ids.new_full((cap_rows,), self.pad_id)
            pos = self.next_pos.new_zeros((cap_rows,))
            ids[:rows_kept], pos[:rows_kept] = self.next_ids[:rows_kept], self.next_pos[:rows_kept]
            self.next_ids, self.next_pos = ids, pos

    def add(self, rows: list[Any], cache: Any, mask: torch.Tensor, last: torch.Tensor, pos: torch.Tensor) -> None:
        """Put ``rows`` (their prefilled ``cache``, ``mask`` (n, t), last prompt token and its position) into free
        slots, or new ones; every row's tokens end at the batch's current column."""
        layers = plain_layers(cache)
        n, width = mask.shape
        if self.cache is None:
            self.cache = DynamicCache(config=self.config)
            self.cache.layers = [SlotLayer(*_empty_like(layer.keys), 0, 0) for layer in layers]
        free = [i for i, r in enumerate(self.rows) if r is None][:n]
        slots = free + list(range(len(self.rows), len(self.rows) + n - len(free)))
        total = max(len(self.rows), slots[-1] + 1)
        shift = max(0, width - self.length)
        self._resize(total, self.length + shift + 1, shift)  # a spare column for the next decode step
        self.starts = [start + shift for start in self.starts]
        for layer in self._layers():
            layer.rows = total
            layer._view()
        end = self.length
        index = torch.tensor(slots, device=self.device)
        for layer, new in zip(self._layers(), layers, strict=True):
            layer.k[index, :, : end - width] = 0  # masked columns (see SlotLayer.resize)
            layer.v[index, :, : end - width] = 0
            layer.k[index, :, end - width : end] = new.keys.to(layer.k.dtype)
            layer.v[index, :, end - width : end] = new.values.to(layer.v.dtype)
        self.mask[index, :] = 0
        self.mask[index, end - width : end] = mask.to(self.mask.dtype)
        self.next_ids[index], self.next_pos[index] = last, pos
        for slot, row in zip(slots, rows, strict=True):
            if slot < len(self.rows):
                self.rows[slot], self.starts[slot] = row, end - width
            else:
                self.rows.append(row)
                self.starts.append(end - width)

    def inputs(self, drafts: dict[int, list[int]] | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``input_ids`` (B, 1 + K), ``attention_mask`` (B, T + 1 + K) and ``position_ids`` (B, 1 + K) of the next
        decode step: each row's next token, then its draft (``drafts[slot]``, K the longest; shorter drafts are
        padded with masked columns). Columns are made ready for the step."""
        b, t = len(self.rows), self.length
        k = max((len(d) for d in (drafts or {}).values()), default=0)
        self._resize(b, t + 1 + k)
        self.mask[:b, t] = 1
        if not k:
            return self.next_ids[:b, None], self.mask[:b, : t + 1], self.next_pos[:b, None]
        ids = torch.full((b, k), self.pad_id, dtype=torch.long)
        used = torch.zeros((b, k), dtype=torch.long)
        for slot, draft in (drafts or {}).items():
            ids[slot, : len(draft)] = torch.tensor(draft, dtype=torch.long)
            used[slot, : len(draft)] = 1
        self.mask[:b, t + 1 : t + 1 + k] = used.to(self.device)
        input_ids = torch.cat([self.next_ids[:b, None], ids.to(self.device)], dim=1)
        positions = self.next_pos[:b, None] + torch.arange(1 + k, device=self.device)
        return input_ids, self.mask[:b, : t + 1 + k], positions

    def advance(self, tokens: torch.Tensor, accepted: list[int] | None = None) -> None:
        """After a decode step: ``tokens`` (B,) are the rows' next inputs, at the next positions. After a step with
        drafts, ``tokens`` is (B, 1 + K), the samples at every position, and ``accepted[slot]`` how many drafted
        tokens the row kept: its next input is ``tokens[slot, accepted[slot]]``, and the columns of the drafted
        tokens it did not keep are masked out."""
        b = len(self.rows)
        if tokens.dim() == 1:
            self.next_ids[:b] = tokens
            self.next_pos[:b] += 1
            return
        k = tokens.shape[1] - 1
        kept = torch.tensor(accepted, dtype=torch.long, device=self.device)  # (B,)
        self.next_ids[:b] = tokens.gather(1, kept[:, None]).squeeze(1)
        self.next_pos[:b] += kept + 1
        t = self.length - k  # the first drafted column
        self.mask[:b, t : t + k] *= (torch.arange(k, device=self.device)[None, :] < kept[:, None]).to(self.mask.dtype)
        self.dead += k - max(accepted, default=0)

    def row_kv(self, slot: int, limit: int | None = None) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The keys and values of slot ``slot``'s own tokens (padding left out; its first ``limit`` only, e.g. when
        a stop inside a kept draft ended the row before the draft's last columns), per layer: (H, L, D) copies."""
        columns = self.mask[slot, : self.length].nonzero().squeeze(1)[:limit]
        layers = self._layers()
        return [layer.keys[slot].index_select(1, columns) for layer in layers], [
            layer.values[slot].index_select(1, columns) for layer in layers
        ]

    def remove(self, slots: list[int]) -> None:
        """Free ``slots`` (none: only the compaction check); compact when a quarter of the slots are free, when the
        live rows leave more than half of the columns unused on the left (slots refilled as fast as they free up
        would otherwise let the width grow with every step of the run), or when more than half of the columns
        hold drafted tokens that no row kept."""
        for i in slots:
            self.rows[i] = None
        if slots:
            index = torch.tensor(slots, device=self.device)
            self.mask[index] = 0
            self.next_ids[index] = self.pad_id
            self.next_pos[index] = 0
        live = self.live
        if not live:
            self.rows, self.starts, self.cache, self.dead = [], [], None, 0
            return
        first = min(self.starts[i] for i in live)
        wide = self.length >= MIN_TRIM_COLUMNS and (first > self.length // 2 or 2 * self.dead > self.length)
        if len(self.rows) - len(live) > max(1, len(self.rows) // 4) or wide:
            self.compact()

    def compact(self) -> None:
        """Keep live rows only, and only the columns they use."""
        live = self.live
        index = torch.tensor(live, device=self.device)
        length = self.length
        columns = self.mask[index, :length].any(0).nonzero().squeeze(1)  # columns some live row attends to
        kept = columns.tolist()
        for layer in self._layers():
            keys = layer.keys.index_select(0, index).index_select(2, columns)
            values = layer.values.index_select(0, index).index_select(2, columns)
            layer.k, layer.v = _with_room(keys), _with_room(values)
            layer.rows, layer.length = len(live), keys.shape[2]
            layer._view()
        cap_rows, cap_cols = self._layers()[0].k.shape[0], self._layers()[0].k.shape[2]
        mask = self.mask.new_zeros((cap_rows, cap_cols))
        mask[: len(live), : len(kept)] = self.mask[index][:, columns]
        ids = self.next_ids.new_full((cap_rows,), self.pad_id)
        pos = self.next_pos.new_zeros((cap_rows,))
        ids[: len(live)], pos[: len(live)] = self.next_ids[index], self.next_pos[index]
        self.mask, self.next_ids, self.next_pos = mask, ids, pos
        self.rows = [self.rows[i] for i in live]
        self.starts = [bisect.bisect_left(kept, self.starts[i]) for i in live]
        self.dead = 0


def _empty_like(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    shape = (0, keys.shape[1], 0, keys.shape[3])
    return keys.new_zeros(shape), keys.new_zeros(shape)


def _with_room(t: torch.Tensor) -> torch.Tensor:
    """``t`` (B, H, L, D) copied into a buffer with twice its columns (at least 64; those past L are written before
    they are read)."""
    out = t.new_empty((t.shape[0], t.shape[1], max(64, 2 * t.shape[2]), t.shape[3]))
    out[:, :, : t.shape[2]] = t
    return out
