"""The team's weight dtype, and what ``dtype="auto"`` picks on the machine it runs on.

bfloat16 halves the bytes every product reads and, where the processor multiplies bfloat16 natively, runs the
products at several times float32's rate. Where it does not, each bfloat16 number is converted in software and
float32 is faster. So ``auto`` follows the hardware, asked through torch rather than by a list of processor names:

* a CPU: bfloat16 when torch reports AVX512-BF16 or AMX-BF16 (``torch.cpu.get_capabilities``) and dispatches its
  kernels for AVX-512, float32 otherwise (AVX2-only x86 CPUs, other architectures, whose bfloat16 support torch does
  not report, and a machine told to use less: ``ATEN_CPU_CAPABILITY=avx2``, ``ONEDNN_MAX_CPU_ISA=AVX2``);
* a CUDA GPU: bfloat16 when ``torch.cuda.is_bf16_supported()``, float32 otherwise;
* float32 in every case for a team without LoRA adapters (``use_lora=False``): its models' own weights are trained,
  and bfloat16 would round away their small updates. With adapters the base is frozen, so it may be bfloat16 while
  the adapters train and sample in float32 (PEFT keeps them so, and the engine's stacked adapters keep their
  dtype, so that sampled log-probs stay those of the training pass).

``JOY_AUTO_DTYPE=float32`` (or ``bfloat16``, ``float16``) in the environment makes ``auto`` pick that dtype for a LoRA
team on any device instead of asking the hardware (the test suite sets ``float32``, so that it runs the same on
every machine).

:func:`resolve_dtype` returns the choice and a one-line reason; a run's header prints both
(:attr:`TeamPolicy.dtype <joy_agents.policy.TeamPolicy.dtype>`, ``dtype_reason``). The measured rates per dtype on a
CPU are printed by ``benchmarks/team_throughput.py`` (docs/results.md, "Rollouts at the CPU's limit").
"""

from __future__ import annotations

import functools
import os

import torch

__all__ = ["AUTO_DTYPE_VARIABLE", "DTYPES", "cpu_bfloat16_units", "resolve_dtype"]

DTYPES = ("auto", "float32", "bfloat16", "float16")
"""The values of ``TeamConfig.dtype``."""

AUTO_DTYPE_VARIABLE = "JOY_AUTO_DTYPE"
"""The environment variable that overrides what ``auto`` picks for a LoRA team."""


@functools.cache
def cpu_bfloat16_units() -> str | None:
    """The name of this CPU's native bfloat16 product instructions as torch reports them (``"AMX-BF16"``,
    ``"AVX512-BF16"``), or None where it reports none, or where torch or oneDNN were told to use less than
    AVX-512 (``ATEN_CPU_CAPABILITY=avx2``, ``ONEDNN_MAX_CPU_ISA=AVX2``: bfloat16 then runs in software)."""
    if not torch.backends.cpu.get_cpu_capability().startswith("AVX512"):
        return None
    if os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper().startswith(("AVX2", "AVX_", "SSE", "DEFAULT")):
        return None
    capabilities = getattr(torch.cpu, "get_capabilities", None)
    if capabilities is not None:
        found = capabilities()
        if found.get("amx_bf16"):
            return "AMX-BF16"
        if found.get("avx512_bf16"):
            return "AVX512-BF16"
        return None
    # torch before get_capabilities: the two private checks it had then
    if getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)():
        return "AMX-BF16"
    if getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)():
        return "AVX512-BF16"
    return None


def resolve_dtype(dtype: str, device: str | torch.device, use_lora: bool = True) -> tuple[str, str]:
    """``(dtype, reason)``: ``dtype`` itself when it is not ``auto`` (reason ``"set"``), else what ``auto`` picks on
    ``device`` for a team with (``use_lora``) or without adapters, and why (see the module documentation)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if dtype != "auto":
        return dtype, "set"
    if not use_lora:
        return "float32", "auto: the models' own weights are trained (use_lora=False), so they stay float32"
    forced = os.environ.get(AUTO_DTYPE_VARIABLE, "").strip()
    if forced:
        if forced not in DTYPES[1:]:
            raise ValueError(f"{AUTO_DTYPE_VARIABLE} must be one of {DTYPES[1:]} or unset, got {forced!r:.40}")
        return forced, f"auto: {AUTO_DTYPE_VARIABLE}={forced} in the environment"
    kind = torch.device(device).type
    if kind == "cpu":
        units = cpu_bfloat16_units()
        if units:
            return "bfloat16", f"auto: this CPU multiplies bfloat16 natively ({units})"
        why = "torch reports no native bfloat16 products here (AVX512-BF16 or AMX-BF16, with AVX-512 kernels)"
        return "float32", f"auto: {why}"
    if kind == "cuda":
        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return "bfloat16", "auto: this GPU supports bfloat16"
        return "float32", "auto: this GPU does not support bfloat16"
    return "float32", f"auto: float32 on a {kind} device"
