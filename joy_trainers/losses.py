"""The math every RL trainer shares, as pure functions on tensors.

- :func:`group_advantages`: GRPO's A_ij = (r_ij - mean_j) / (std + eps) per group, the std the group's, the
  batch's or none (``scale_rewards`` as TRL names it); :func:`reward_spread`, the test of a flat group;
- :func:`policy_loss`: the clipped importance-ratio loss with an optional k3 KL penalty to a reference
  policy, aggregated over tokens as TRL's ``GRPOTrainer`` does for ``loss_type`` ``grpo``, ``bnpo``,
  ``dr_grpo`` and ``dapo`` (a test checks equality with TRL's own loss code);
- :func:`gae` and :func:`value_loss`: generalised advantage estimation over agent turns and the clipped
  value loss (MAPPO).

Shapes: ``B`` sequences (agent turns), ``T`` completion tokens (right-padded, ``mask`` marks real tokens).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
SCALE_REWARDS = ("group", "batch", "none")
"""What advantages are divided by after centring on the group mean (TRL's ``scale_rewards``)."""


def scale_mode(scale: str | bool) -> str:
    """``scale`` as one of :data:`SCALE_REWARDS`; ``True`` and ``False`` (the option's values before it took
    names) read as ``"group"`` and ``"none"``."""
    if scale is True or scale is False:
        return "group" if scale else "none"
    if scale not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards must be one of {SCALE_REWARDS}, got {scale!r}")
    return str(scale)


def reward_spread(rewards: Sequence[float]) -> float:
    """``max - min`` of a group's rewards (0 for fewer than two): a group whose spread is under the run's
    ``min_reward_spread`` is flat, whatever float noise its variance holds."""
    return float(max(rewards) - min(rewards)) if len(rewards) > 1 else 0.0


def group_advantages(
    rewards: torch.Tensor,
    group_size: int,
    scale: str | bool = "group",
    eps: float = 1e-4,
    batch_std: float | None = None,
) -> torch.Tensor:
    """Advantages of ``rewards`` (shape ``(num_groups * group_size,)``, group after group).

    ``r - group mean``, divided by (as TRL's ``scale_rewards``): ``"group"``, the group's std plus ``eps``;
    ``"batch"``, the std of every reward given (or ``batch_std``, that of a larger batch) plus ``eps``;
    ``"none"``, nothing (Dr. GRPO). Every std is the unbiased one, as TRL's. A group whose rewards are all equal
    gets zero advantages, never NaN.
    """
    mode = scale_mode(scale)
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size!r}")
    if rewards.dim() != 1 or rewards.numel() % group_size:
        raise ValueError(
            f"rewards must be 1-D with a multiple of group_size={group_size} entries, got shape {tuple(rewards.shape)}"
        )
    grouped = rewards.float().view(-1, group_size)  # (N, G)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if mode == "group" and group_size > 1:
        centred = centred / (grouped.std(dim=1, keepdim=True) + eps)
    elif mode == "batch":
        std = batch_std if batch_std is not None else (float(rewards.float().std()) if rewards.numel() > 1 else 0.0)
        centred = centred / (std + eps)
    return centred.reshape(-1)


def kl_k3(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(policy || reference): ``exp(ref - logp) - (ref - logp) - 1`` (>= 0)."""
    delta = ref_logps - logps
    return torch.exp(delta) - delta - 1


def policy_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    ref_logps: torch.Tensor | None = None,
    beta: float = 0.0,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    loss_type: str = "grpo",
    max_new_tokens: int | None = None,
    num_items: float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate loss of GRPO-style trainers and its statistics.

    Args:
        logps: ``(B, T)`` log-probs of the sampled tokens under the policy being trained (with grad).
        old_logps: ``(B, T)`` log-probs under the policy that sampled them.
        advantages: ``(B,)`` one advantage per sequence, or ``(B, T)`` per token.
        mask: ``(B, T)`` 1 on completion tokens, 0 on padding.
        ref_logps: ``(B, T)`` reference log-probs; needed when ``beta > 0``.
        beta: weight of the k3 KL penalty.
        epsilon / epsilon_high: ratio clipped to ``[1 - epsilon, 1 + epsilon_high]`` (default symmetric).
        loss_type: ``grpo`` (mean over each sequence's tokens, then over sequences), ``bnpo`` (mean over all
            tokens of the batch), ``dr_grpo`` (sum over tokens / (B * max_new_tokens)), ``dapo``
            (sum over tokens / ``num_items``, the token count of the whole global batch).
        max_new_tokens: ``dr_grpo``'s constant (default ``T``).
        num_items: ``dapo``'s normaliser (default: the tokens of this batch).

    Returns ``(loss, stats)`` with ``stats`` = ``policy_loss``, ``kl`` (mean per token), ``clip_fraction``
    (tokens whose ratio was clipped in the direction that stops the gradient), ``ratio_mean``.
    An all-zero mask gives a zero loss (finite), not NaN.
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    if logps.shape != old_logps.shape or logps.shape != mask.shape:
        raise ValueError(
            f"logps {tuple(logps.shape)}, old_logps {tuple(old_logps.shape)} and mask {tuple(mask.shape)} must match"
        )
    if beta and ref_logps is None:
        raise ValueError(f"beta={beta} needs ref_logps (the reference policy's log-probs)")
    eps_low = float(epsilon)
    eps_high = float(epsilon_high) if epsilon_high is not None else eps_low
    mask = mask.to(logps.dtype)
    adv = advantages.to(logps.dtype)
    if adv.dim() == 1:
        adv = adv.unsqueeze(1)  # (B, 1)

    ratio = torch.exp(logps - old_logps)  # (B, T)
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    per_token = -torch.min(ratio * adv, clipped * adv)  # (B, T)
    kl = None
    if beta:
        kl = kl_k3(logps, ref_logps)
        per_token = per_token + beta * kl

    if per_token.numel() == 0:
        loss = (logps * 0.0).sum()  # empty batch: zero, still attached to the graph
    elif loss_type == "grpo":
        loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    elif loss_type == "bnpo":
        loss = (per_token * mask).sum() / mask.sum().clamp(min=1.0)
    elif loss_type == "dr_grpo":
        length = max_new_tokens if max_new_tokens is not None else per_token.size(1)
        loss = (per_token * mask).sum() / max(1, per_token.size(0) * length)
    else:  # dapo
        denom = mask.sum() if num_items is None else torch.as_tensor(num_items, dtype=logps.dtype)
        loss = (per_token * mask).sum() / denom.clamp(min=1.0)

    with torch.no_grad():
        tokens = mask.sum().clamp(min=1.0)
        low = (ratio < 1 - eps_low) & (adv < 0)
        high = (ratio > 1 + eps_high) & (adv > 0)
        stats = {
            "policy_loss": float(loss.detach()),
            "kl": float((kl * mask).sum() / tokens) if kl is not None else 0.0,
            "clip_fraction": float(((low | high).to(mask.dtype) * mask).sum() / tokens),
            "ratio_mean": float((ratio * mask).sum() / tokens),
        }
    return loss, stats


def gae(rewards: Sequence[float], values: Sequence[float], gamma: float = 1.0, lam: float = 0.95) -> list[float]:
    """Generalised advantage estimates of one episode's turns.

    ``rewards[t]`` is the reward after turn ``t``; ``values[t]`` is V(s_t); the episode ends after the last
    turn (bootstrap value 0). ``A_t = sum_k (gamma * lam)^k delta_{t+k}`` with
    ``delta_t = r_t + gamma * V(s_{t+1}) - V(s_t)``. Returns the advantages; returns = advantages + values.
    """
    if len(rewards) != len(values):
        raise ValueError(f"rewards has {len(rewards)} entries but values has {len(values)}")
    out = [0.0] * len(rewards)
    running = 0.0
    for t in reversed(range(len(rewards))):
        next_value = values[t + 1] if t + 1 < len(values) else 0.0
        delta = rewards[t] + gamma * next_value - values[t]
        running = delta + gamma * lam * running
        out[t] = running
    return out


def value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip: float | None = 0.2
) -> torch.Tensor:
    """PPO's clipped value loss ``0.5 * mean(max((V - R)^2, (V_old + clip(V - V_old) - R)^2))``.

    ``clip=None`` gives the plain squared error ``0.5 * mean((V - R)^2)``. All tensors have the same shape.
    """
    if values.shape != old_values.shape or values.shape != returns.shape:
        raise ValueError(
            f"values {tuple(values.shape)}, old_values {tuple(old_values.shape)} and returns "
            f"{tuple(returns.shape)} must have the same shape"
        )
    if values.numel() == 0:
        return values.sum()
    unclipped = (values - returns) ** 2
    if clip is None:
        return 0.5 * unclipped.mean()
    clipped_values = old_values + torch.clamp(values - old_values, -clip, clip)
    return 0.5 * torch.max(unclipped, (clipped_values - returns) ** 2).mean()
