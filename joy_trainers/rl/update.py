"""The policy update every RL trainer shares: one clipped-ratio step of one role from scored samples
(:func:`policy_update`; a step runs it for every role that has samples, :func:`~joy_trainers.rl.step.update_roles`),
its settings (:class:`UpdateConfig`, :func:`update_config`), and the frozen reference policy of the KL term
(:class:`ReferencePolicy`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any

import torch

from joy_agents.prefill import prompt_batches
from joy_agents.threads import follow_free_cores
from joy_trainers.distributed import all_reduce_sum
from joy_trainers.losses import policy_loss
from joy_trainers.rl.config import RLConfig


class ReferencePolicy:
    """A frozen copy of each role's trainable weights; ``with ref.active(team, role):`` swaps them in.

    The swap exchanges the parameters' storage (``param.data``) with the copy's and back, so entering and
    leaving copies no weights (full fine-tuning of a large model would otherwise copy it three times per
    micro-batch); the parameter objects, and so the optimiser state keyed by them, stay the same.
    """

    def __init__(self, team: Any, roles: Sequence[str]) -> None:
        self.weights = {r: [p.detach().clone() for p in team.trainable_parameters(r)] for r in roles}

    @contextlib.contextmanager
    def active(self, team: Any, role: str) -> Iterator[None]:
        params = team.trainable_parameters(role)
        current = [p.data for p in params]
        for p, w in zip(params, self.weights[role], strict=True):
            p.data = w
        try:
            yield
        finally:
            for p, d in zip(params, current, strict=True):
                p.data = d


@dataclass
class UpdateConfig:
    """The loss options of :func:`policy_update`: fields of :class:`~joy_trainers.rl.config.RLConfig`, with its
    defaults and documentation (:func:`update_config` takes them from a trainer's config)."""

    loss_type: str = RLConfig.loss_type
    epsilon: float = RLConfig.epsilon
    epsilon_high: float | None = RLConfig.epsilon_high
    beta: float = RLConfig.beta
    temperature: float = RLConfig.temperature
    max_new_tokens: int = RLConfig.max_new_tokens
    micro_batch_size: int = RLConfig.micro_batch_size
    max_grad_norm: float = RLConfig.max_grad_norm


def _pad(rows: Sequence[Sequence[float]], width: int, value: float = 0.0) -> torch.Tensor:
    out = torch.full((len(rows), width), value, dtype=torch.float32)
    for i, r in enumerate(rows):
        if len(r):
            out[i, : len(r)] = torch.as_tensor(list(r), dtype=torch.float32)
    return out


def policy_update(
    team: Any,
    role: str,
    optimizer: torch.optim.Optimizer | None,
    samples: Sequence[Any],
    advantages: Sequence[float],
    cfg: UpdateConfig,
    reference: ReferencePolicy | None = None,
) -> dict[str, float]:
    """One optimisation step of ``role`` on ``samples`` (each with ``prompt_ids``, ``completion_ids`` and
    sampling-time ``logprobs``) with one advantage each.

    Every process calls it for the same roles in the same order (maybe with no samples): the loss is
    normalised by global counts and the gradients summed across processes, so every process ends with the
    same parameters. ``optimizer=None`` computes the statistics without stepping. Returns loss statistics.

    Out of memory (``torch.OutOfMemoryError``) in a micro-batch: the role's gradients are dropped and its
    update runs again with micro-batches of half as many rows (``cfg.micro_batch_size`` is halved, so later
    updates with this config start from what fits), said in one line; the result is the same.
    """
    rows = [(s, float(a)) for s, a in zip(samples, advantages, strict=True) if len(s.completion_ids)]
    counts = torch.tensor([float(len(rows)), float(sum(len(s.completion_ids) for s, _ in rows))], dtype=torch.float64)
    all_reduce_sum(counts)
    n_seq, n_tok = float(counts[0]), float(counts[1])
    params = team.trainable_parameters(role)
    stats = {"policy_loss": 0.0, "kl": 0.0, "clip_fraction": 0.0, "ratio_mean": 0.0, "samples": n_seq}
    if n_seq == 0:
        return stats
    first = cfg.micro_batch_size
    while True:  # out of memory in a micro-batch: start the role's update again with half as many rows in each
        try:
            stats = _accumulate(team, role, rows, cfg, reference, n_seq, n_tok, stats)
            break
        except torch.OutOfMemoryError:
            if cfg.micro_batch_size == 1:
                raise
            for p in params:
                p.grad = None
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            cfg.micro_batch_size //= 2  # kept by the caller's config: later updates start from what fits
    if cfg.micro_batch_size < first:
        print(
            f"[rl] out of memory in the update of {role} with micro_batch_size={first}; continued with "
            f"{cfg.micro_batch_size} (accumulating over more micro-batches: the same step)",
            flush=True,
        )
    team.model_for(role).eval()
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        all_reduce_sum(p.grad)
    for name in ("policy_loss", "kl", "clip_fraction", "ratio_mean"):
        t = torch.tensor([stats[name]], dtype=torch.float64)
        stats[name] = float(all_reduce_sum(t)[0])
    if optimizer is not None:
        stats["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return stats


def _accumulate(
    team: Any,
    role: str,
    rows: list[tuple[Any, float]],
    cfg: UpdateConfig,
    reference: ReferencePolicy | None,
    n_seq: float,
    n_tok: float,
    zero: dict[str, float],
) -> dict[str, float]:
    """The gradients of ``role``'s loss on ``rows``, accumulated over micro-batches of ``cfg.micro_batch_size``
    rows (the loss does not depend on the batching), and the loss statistics (from ``zero``)."""
    stats = dict(zero)
    device = team.device
    for p in team.trainable_parameters(role):
        p.grad = None
    width_all = cfg.max_new_tokens
    # micro-batches keep the rows of one prompt (a GRPO group) together: team.logprobs runs a prompt once for
    # all its completions (TeamConfig.share_prefix); the loss does not depend on how rows are batched
    for chunk in prompt_batches(rows, cfg.micro_batch_size):
        follow_free_cores()  # torch's threads on the cores other processes leave free (joy_agents.threads)
        prompts = [list(s.prompt_ids) for s, _ in chunk]
        completions = [list(s.completion_ids) for s, _ in chunk]
        width = max(len(c) for c in completions)
        ref = None
        if cfg.beta and reference is not None:
            with torch.no_grad(), reference.active(team, role):
                ref = _pad([x.tolist() for x in team.logprobs(role, prompts, completions, cfg.temperature)], width)
        with team.use_role(role):
            team.model_for(role).train()
            logps_list = team.logprobs(role, prompts, completions, cfg.temperature)
        logps = torch.nn.utils.rnn.pad_sequence(logps_list, batch_first=True)  # (B, width), grad kept
        old = _pad([s.logprobs for s, _ in chunk], width).to(device)
        mask = (torch.arange(width)[None, :] < torch.tensor([len(c) for c in completions])[:, None]).to(device)
        adv = torch.tensor([a for _, a in chunk], dtype=torch.float32, device=device)
        loss, st = policy_loss(
            logps,
            old,
            adv,
            mask,
            ref_logps=ref.to(device) if ref is not None else None,
            beta=cfg.beta if ref is not None else 0.0,
            epsilon=cfg.epsilon,
            epsilon_high=cfg.epsilon_high,
            loss_type=cfg.loss_type,
            max_new_tokens=width_all,
            num_items=n_tok,
        )
        tokens = float(mask.sum())
        # weight of this micro-batch in the global loss (see the module docstring of losses for the types)
        if cfg.loss_type == "grpo" or cfg.loss_type == "dr_grpo":
            weight = len(chunk) / n_seq
        elif cfg.loss_type == "bnpo":
            weight = tokens / max(n_tok, 1.0)
        else:  # dapo is already normalised by the global token count
            weight = 1.0
        (loss * weight).backward()
        share = tokens / max(n_tok, 1.0)
        for name in ("kl", "clip_fraction", "ratio_mean"):
            stats[name] += st[name] * share
        stats["policy_loss"] += st["policy_loss"] * weight
    return stats


def make_optimizers(team: Any, lr: float, weight_decay: float = 0.0) -> dict[str, torch.optim.Optimizer]:
    """One AdamW per role over its trainable parameters."""
    return {r: torch.optim.AdamW(team.trainable_parameters(r), lr=lr, weight_decay=weight_decay) for r in team.roles}


def update_config(cfg: RLConfig, **overrides: Any) -> UpdateConfig:
    """The :class:`UpdateConfig` of a trainer config: its fields of the same names, but ``overrides`` (e.g.
    ``beta=0.0``)."""
    return UpdateConfig(**{f.name: getattr(cfg, f.name) for f in fields(UpdateConfig)} | overrides)
