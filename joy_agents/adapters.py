"""One LoRA adapter per role on a shared base, and the memory it takes.

:func:`attach_role_adapters` wraps a model in one ``PeftModel`` holding a fresh adapter per role (the base weights
exist once); :func:`parameter_bytes` counts the unique storage of parameters and buffers, and
:func:`meta_team_memory_ratio` the team-over-plain-model ratio of a Qwen2 shape built on the ``meta`` device
(no weights allocated or downloaded).
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from joy_agents.config import TeamConfig

__all__ = [
    "QWEN2_5_0_5B_SHAPE",
    "attach_role_adapters",
    "hf_model",
    "lora_config",
    "meta_team_memory_ratio",
    "parameter_bytes",
    "quiet_peft",
    "role_lora_parameters",
    "vocab_size",
]


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
        team = attach_role_adapters(model, config.roles, lora_config(config))
        return parameter_bytes(team) / base


def lora_config(config: TeamConfig) -> Any:
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
def quiet_peft() -> Iterator[None]:
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
    with quiet_peft():
        peft_model = get_peft_model(model, copy.deepcopy(lora_config), adapter_name=roles[0])
        for role in roles[1:]:
            peft_model.add_adapter(role, copy.deepcopy(lora_config))
    peft_model.set_adapter(roles[0])
    return peft_model


def role_lora_parameters(model: torch.nn.Module, role: str) -> list[torch.nn.Parameter]:
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


def hf_model(module: torch.nn.Module) -> Any:
    """The underlying transformers model of a PeftModel (or the model itself)."""
    from peft import PeftModel

    return module.get_base_model() if isinstance(module, PeftModel) else module


def vocab_size(model: torch.nn.Module) -> int:
    """Rows of ``model``'s input embedding (through a LoRA adapter on the embedding, which wraps it)."""
    embedding = model.get_input_embeddings()
    return int(getattr(embedding, "base_layer", embedding).num_embeddings)
