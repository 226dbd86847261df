"""Every role's LoRA adapter of a ``PeftModel`` applied to one mixed batch, in few kernels per layer.

The continuous engine (:mod:`joy_agents.sampling.continuous`) decodes the turns of every role in one batch, each row
through its own role's adapter. PEFT's own way (``adapter_names=``) runs a gather, two products and a scatter per role
present and per layer; on a GPU a small model's decode step is bound by kernel launches, so the count matters.

:class:`StackedLoRA` stacks, for each LoRA linear layer, the roles' ``A`` matrices into one matrix and their scaled
``B`` matrices into another, and keeps for each row only its own role's block of the low-rank activations (a 0/1
mask): ``base(x) + B_all (mask * A_all x)`` is exactly each row's ``base(x) + scaling * B_role A_role x``.
Layers that read the same input (``q``/``k``/``v`` of an attention block, ``gate``/``up`` of an MLP) share one
``A`` product: the first of them to run computes the low-rank activations of the whole group, and the others
take their columns of it, for as long as they receive the very same tensor (checked by identity and version, so
sharing never changes a result). The first forward shows which layers those are (called one after another on the
same tensor); until then the layers of one block with the same input size are tried together. The ``B`` product
is added into the base layer's output in place (one ``addmm``). While a forward runs one role only (a prefill, or
a decode step whose rows all have one role), the mask is skipped and only that role's blocks are multiplied.

Per layer of a Llama-like block with ``a`` adapted linears in ``g`` groups, a mixed step costs ``2 g + a``
kernels for the adapters (``g + a`` with one role), against ``4 a`` for a mask and two products per linear. Where
the adapters' dtype differs from the base (PEFT keeps float32 adapters on a bfloat16 base), the low-rank path runs
in the adapters' dtype and is added to the base output as PEFT adds it.

A snapshot of the weights: build it anew after the adapters change (the continuous engine does when a weight
changed in place). :attr:`StackedLoRA.supported` is False for LoRA variants (DoRA, ...), LoRA biases, merged
adapters or adapters on other layers than linears (embeddings, convolutions), which the ``adapter_names`` path
handles.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["StackedLoRA"]


class _Group:
    """The layers of one block that read the same input, and their stacked ``A`` matrices.

    Columns of the low-rank activations are member-major: member ``j`` owns columns ``[j R, (j + 1) R)`` where
    ``R`` is the sum of the roles' ranks, and within them each role its block (the layout of the mask)."""

    def __init__(self, a_parts: list[list[torch.Tensor]], ranks: list[int]) -> None:
        self.size = len(a_parts)
        self.rank = sum(ranks)
        self.a = torch.cat([torch.cat(parts, 0) for parts in a_parts], 0)  # (size * R, in)
        starts = [sum(ranks[:i]) for i in range(len(ranks))]
        # one role's blocks of every member, contiguous: (size * rank_r, in)
        self.a_role = [torch.cat([parts[r] for parts in a_parts], 0) for r in range(len(ranks))]
        self.spans = list(zip(starts, ranks, strict=True))
        self.mask: torch.Tensor | None = None  # (B, 1, size * R), or None: one role (self.role)
        self.role = 0
        self._x: torch.Tensor | None = None
        self._version = -1
        self._low: torch.Tensor | None = None
        self._uses = 0

    def reset(self) -> None:
        self._x, self._low = None, None

    def low(self, x: torch.Tensor) -> torch.Tensor:
        """The group's low-rank activations of ``x`` as a (tokens, columns) matrix, computed once per input (an
        inference-mode tensor has no version to check, so it is not shared). The input is held only until every
        member has taken its columns, so a forward keeps no more activations alive than without the stack."""
        inference = x.is_inference()
        if x is self._x and not inference and x._version == self._version and self._low is not None:
            low = self._low
            self._uses += 1
            if self._uses >= self.size:
                self.reset()
            return low
        flat = x.reshape(-1, x.shape[-1])
        a = self.a if self.mask is not None else self.a_role[self.role]
        if flat.dtype != a.dtype:
            flat = flat.to(a.dtype)
        low = torch.mm(flat, a.t())
        if self.mask is not None:
            if x.dim() != 3 or x.shape[0] != self.mask.shape[0]:
                raise RuntimeError(
                    f"StackedLoRA gives each row its role's adapter, so a layer's input must be (rows, tokens, "
                    f"features) with the {self.mask.shape[0]} rows of set_rows; got {tuple(x.shape)}. Run mixed "
                    "batches of this model with PEFT's adapter_names= instead"
                )
            low.view(x.shape[0], -1, low.shape[-1]).mul_(self.mask)
        if not inference and self.size > 1:
            self._x, self._version, self._low, self._uses = x, x._version, low, 1
        return low


class StackedLoRA:
    """Every role's LoRA adapter of a ``PeftModel`` applied to a mixed batch (see the module documentation).

    Use :meth:`set_rows` to give each row's role, then run the model inside ``with stack:``; the layers' own
    forwards come back on exit. For sampling only: the snapshot's adapters are detached and get no gradients."""

    def __init__(self, peft_model: torch.nn.Module, roles: tuple[str, ...]) -> None:
        from peft.tuners.lora.layer import Linear as LoraLinear
        from peft.tuners.lora.layer import LoraLayer

        self.roles = roles
        self.supported = True
        self._index = {role: i for i, role in enumerate(roles)}
        found: list[tuple[str, Any, list[torch.Tensor], list[torch.Tensor]]] = []
        blocks: list[int] | None = None
        for name, module in peft_model.named_modules():
            if isinstance(module, LoraLayer) and not isinstance(module, LoraLinear):
                if any(r in module.lora_A or r in getattr(module, "lora_embedding_A", {}) for r in roles):
                    self.supported = False  # an embedding or convolution adapter: only PEFT applies it per row
                    return
            if not isinstance(module, LoraLinear):
                continue
            if module.merged or module.disable_adapters or any(r in module.lora_variant for r in roles):
                self.supported = False
                return
            a_parts, b_parts, ranks = [], [], []
            for role in roles:
                if role not in module.lora_A:
                    self.supported = False
                    return
                a, b = module.lora_A[role].weight, module.lora_B[role]
                if b.bias is not None:
                    self.supported = False
                    return
                a_parts.append(a.detach())
                b_parts.append(b.weight.detach() * module.scaling[role])
                ranks.append(a.shape[0])
            if blocks is None:
                blocks = ranks
            elif blocks != ranks:
                self.supported = False
                return
            found.append((name.rpartition(".")[0], module, a_parts, b_parts))
        if not found or blocks is None:
            self.supported = False
            return
        self._found, self._blocks = found, blocks
        self._bt = [torch.cat(b_parts, 1).t().contiguous() for *_, b_parts in found]  # (R, out) per layer
        # until a forward shows which layers read the same tensor: those of one parent block with the same input
        # size and dtype may (sharing is checked on every call, so a wrong guess costs work, never a result)
        self._keys = [(parent, a[0].shape[1], a[0].dtype, a[0].device) for parent, _, a, _ in found]
        keyed: dict[tuple[Any, ...], list[int]] = {}
        for i, key in enumerate(self._keys):
            keyed.setdefault(key, []).append(i)
        self._build(list(keyed.values()))
        # the first forward's calls in order: (layer, whether its input is the previous call's very tensor)
        self._calls: list[tuple[int, bool]] | None = []
        self._last_input: torch.Tensor | None = None
        device, dtype = found[0][2][0].device, found[0][2][0].dtype
        starts = [sum(blocks[:i]) for i in range(len(blocks))]
        self._onehot = torch.zeros((len(roles), sum(blocks)), device=device, dtype=dtype)
        for i, (start, rank) in enumerate(zip(starts, blocks, strict=True)):
            self._onehot[i, start : start + rank] = 1.0
        self.mask: torch.Tensor | None = None
        self._roles: list[int] = [0]

    def _build(self, partition: list[list[int]]) -> None:
        """Groups of the layers in ``partition`` (lists of indices into the LoRA layers found)."""
        self.groups: list[_Group] = []
        self.layers: list[tuple[torch.nn.Module, _Group, int, torch.Tensor]] = []  # module, group, member, B^T
        order: dict[int, tuple[torch.nn.Module, _Group, int, torch.Tensor]] = {}
        for members in partition:
            group = _Group([self._found[i][2] for i in members], self._blocks)
            self.groups.append(group)
            for j, i in enumerate(members):
                order[i] = (self._found[i][1], group, j, self._bt[i])
        self.layers = [order[i] for i in sorted(order)]
        self._forwards: list[Any] | None = None

    def _regroup(self, calls: list[tuple[int, bool]]) -> None:
        """Group the layers that the first forward called one after another on the very same tensor (the calls
        up to the first layer called again: a second forward in the same ``with`` starts there)."""
        seen: set[int] = set()
        partition: list[list[int]] = []
        previous: int | None = None
        for i, same_input in calls:
            if i in seen:
                break
            seen.add(i)
            if previous is not None and same_input and self._keys[i] == self._keys[previous]:
                partition[-1].append(i)
            else:
                partition.append([i])
            previous = i
        partition += [[i] for i in range(len(self._found)) if i not in seen]  # not called: alone
        self._build(partition)

    def set_rows(self, roles: list[str]) -> None:
        """The role of each row of the next forward passes (one role: ``[role]``, whatever the rows)."""
        if not self.supported:
            raise RuntimeError(
                "StackedLoRA does not cover this model's adapters (see StackedLoRA.supported): run mixed batches "
                "with PEFT's adapter_names= instead"
            )
        index = [self._index[r] for r in roles]
        self._roles = index
        single = len(set(index)) == 1
        self.mask = None
        if not single:
            self.mask = self._onehot[torch.tensor(index, device=self._onehot.device)][:, None, :]  # (B, 1, R)
        tiled: dict[int, torch.Tensor] = {}
        for group in self.groups:
            group.reset()
            group.role = index[0]
            if single:
                group.mask = None
                continue
            if group.size not in tiled:
                tiled[group.size] = self.mask.repeat(1, 1, group.size)
            group.mask = tiled[group.size]

    def __enter__(self) -> StackedLoRA:
        if self._forwards is None:  # built once per grouping: a decode step only rebinds them
            self._forwards = [
                self._forward(i, module.base_layer, g, j, bt) for i, (module, g, j, bt) in enumerate(self.layers)
            ]
        for (module, *_), forward in zip(self.layers, self._forwards, strict=True):
            module.forward = forward  # an instance attribute shadows the method
        return self

    def __exit__(self, *exc: Any) -> None:
        for module, *_ in self.layers:
            module.__dict__.pop("forward", None)
        for group in self.groups:
            group.reset()  # drop the last input
        if self._calls:  # the first forward ran: group the layers as it called them (or try again next time)
            calls, self._calls, self._last_input = self._calls, [], None
            if exc[0] is None:
                self._calls = None
                self._regroup(calls)
                self.set_rows([self.roles[r] for r in self._roles])

    def _forward(self, index: int, base: torch.nn.Module, group: _Group, member: int, bt: torch.Tensor) -> Any:
        def forward(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            if self._calls is not None:  # only the last input is held, not every layer's
                self._calls.append((index, x is self._last_input))
                self._last_input = x
            result = base(x, *args, **kwargs)
            low = group.low(x)
            if group.mask is None:  # one role: its block of this member's columns
                start, rank = group.spans[group.role]
                low = low[:, member * rank : (member + 1) * rank]
                b = bt[start : start + rank]
            else:
                low = low[:, member * group.rank : (member + 1) * group.rank]
                b = bt
            if not result.is_contiguous() or (torch.is_grad_enabled() and result.requires_grad):
                return (result + torch.mm(low, b).view(result.shape)).to(result.dtype)
            if result.dtype == b.dtype:
                result.view(-1, result.shape[-1]).addmm_(low, b)
            else:  # summed in the adapters' dtype, rounded to the base's, as PEFT adds it
                result.add_(torch.mm(low, b).view(result.shape))
            return result

        return forward
