"""GRPO groups: G scored samples of one situation, their advantages, and marginal-benefit selection by
reward variance (the paper's top-K); whole-trajectory groups for the joint baselines; memory outcomes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from joy_agents.memory import Outcome
from joy_trainers.distributed import all_gather_objects, world
from joy_trainers.losses import group_advantages


@dataclass
class Group:
    """G scored samples of one situation, all produced by ``role``: a GRPO group.

    ``samples`` hold ``prompt_ids``, ``completion_ids`` and ``logprobs`` (a :class:`~joy_agents.policy.Sample`
    or a rollout ``Node``); ``rewards[j]`` is the team reward of the trajectory that sample ``j`` led to.
    Joint (whole-trajectory) groups set ``role = "*"`` and list each trajectory's nodes in ``members``.
    """

    role: str
    rewards: list[float]
    samples: list[Any] = field(default_factory=list)
    members: list[list[Any]] = field(default_factory=list)
    key: str = ""
    outcomes: list[Any] = field(default_factory=list)
    """:class:`~joy_agents.memory.Outcome` records of the group's samples (memory evolution)."""

    @property
    def variance(self) -> float:
        """Population variance of the group's rewards (the paper's "fluctuation")."""
        n = len(self.rewards)
        if n < 2:
            return 0.0
        mean = sum(self.rewards) / n
        return sum((r - mean) ** 2 for r in self.rewards) / n


def select_top_k(groups: Sequence[Group], k: int | str) -> list[Group]:
    """The ``k`` groups of largest reward variance (ties: earlier first), or every group with ``k="all"``.

    Groups without variance carry no learning signal (all advantages are 0) and are never selected.
    """
    if k == "all":
        return [g for g in groups if g.variance > 0]
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"top_k must be an int >= 1 or 'all', got {k!r}")
    order = sorted(range(len(groups)), key=lambda i: (-groups[i].variance, i))
    return [groups[i] for i in order[:k] if groups[i].variance > 0]


def select_global(groups: Sequence[Group], k: int | str) -> list[Group]:
    """Top-K selection over the groups of every process; returns this process's selected groups."""
    rank, size = world()
    if size == 1:
        return select_top_k(groups, k)
    everyone = all_gather_objects([g.variance for g in groups])
    flat = [(v, r, i) for r, vs in enumerate(everyone) for i, v in enumerate(vs)]  # (variance, rank, index)
    order = sorted(range(len(flat)), key=lambda j: (-flat[j][0], j))
    keep = [j for j in order if flat[j][0] > 0]
    if k != "all":
        keep = keep[: int(k)]
    return [groups[flat[j][2]] for j in sorted(keep) if flat[j][1] == rank]


def advantages_of(groups: Sequence[Group], scale: bool = True) -> list[list[float]]:
    """GRPO advantages of every group's samples (one list per group)."""
    out = []
    for g in groups:
        if not g.rewards:
            out.append([])
            continue
        adv = group_advantages(torch.tensor(g.rewards, dtype=torch.float32), len(g.rewards), scale)
        out.append([float(a) for a in adv])
    return out


def outcome_of(node: Any, trajectory: Any) -> Outcome:
    """The memory :class:`~joy_agents.memory.Outcome` of ``node`` in a finished ``trajectory``."""
    result = trajectory.result
    return Outcome(
        role=node.role,
        key=node.memory_key,
        turn=node.role_turn,
        action=node.text,
        reward=float(result["R_A"]) + float(result["R_F"]),
        retrieved=tuple(node.memory_ids),
    )
