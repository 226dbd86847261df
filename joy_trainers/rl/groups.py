"""GRPO groups: G scored samples of one situation, the reward signal their advantages come from, and
marginal-benefit selection by that signal's variance (the paper's top-K); whole-trajectory groups for the joint
baselines; memory outcomes.

How a group's rewards become advantages is :class:`Scoring` (``RLConfig``'s ``advantage_reward``,
``min_reward_spread`` and ``scale_rewards``): which reward terms form the signal, how little spread makes a group
flat (never selected, never trained on), and what the centred signal is divided by."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from joy_agents.memory import Outcome
from joy_trainers.distributed import all_gather_objects, world
from joy_trainers.losses import group_advantages, reward_spread, scale_mode

ADVANTAGE_REWARDS = ("total", "accuracy", "shaped_accuracy")
"""The reward terms a group's advantages come from (``RLConfig.advantage_reward``)."""


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
    accuracy: list[float] = field(default_factory=list)
    """R_A of the trajectory each sample led to (needed by ``advantage_reward`` other than ``total``)."""
    success: list[bool] = field(default_factory=list)
    """Whether the trajectory each sample led to succeeded (the ``advantages/*`` metrics)."""

    @property
    def variance(self) -> float:
        """Population variance of the group's rewards (the paper's "fluctuation")."""
        n = len(self.rewards)
        if n < 2:
            return 0.0
        mean = sum(self.rewards) / n
        return sum((r - mean) ** 2 for r in self.rewards) / n


@dataclass(frozen=True)
class Scoring:
    """How a step scores its groups: the signal (``advantage_reward``), the spread under which a group is flat
    (``min_reward_spread``) and the advantages' scale (``scale_rewards``); :meth:`of` reads them from a trainer's
    config (the options of the same names, documented there)."""

    advantage_reward: str = "total"
    min_reward_spread: float = 1e-6
    scale_rewards: str = "group"

    def __post_init__(self) -> None:
        if self.advantage_reward not in ADVANTAGE_REWARDS:
            raise ValueError(f"advantage_reward must be one of {ADVANTAGE_REWARDS}, got {self.advantage_reward!r}")
        object.__setattr__(self, "scale_rewards", scale_mode(self.scale_rewards))
        if not self.min_reward_spread >= 0:
            raise ValueError(f"min_reward_spread must be >= 0, got {self.min_reward_spread!r}")

    @classmethod
    def of(cls, cfg: Any) -> Scoring:
        """The scoring options of ``cfg`` (an :class:`~joy_trainers.rl.RLConfig`; defaults for those it lacks)."""
        return cls(**{name: getattr(cfg, name) for name in cls.__dataclass_fields__ if hasattr(cfg, name)})

    def signal(self, group: Group) -> list[float]:
        """The values ``group``'s advantages are centred from: R (``total``), R_A (``accuracy``), or R where the
        samples' R_A differ by ``min_reward_spread`` or more and R_A elsewhere (``shaped_accuracy``: the shaping
        terms R_F - R_E only order the samples of a group that already differs in accuracy)."""
        if self.advantage_reward == "total":
            return [float(r) for r in group.rewards]
        if len(group.accuracy) != len(group.rewards):
            raise ValueError(
                f"advantage_reward={self.advantage_reward!r} needs each sample's R_A (Group.accuracy), but the group "
                f"of {group.role!r} holds {len(group.accuracy)} values for {len(group.rewards)} rewards"
            )
        accuracy = [float(a) for a in group.accuracy]
        if self.advantage_reward == "shaped_accuracy" and self.spreads(accuracy):
            return [float(r) for r in group.rewards]
        return accuracy

    def spreads(self, values: Sequence[float]) -> bool:
        """Whether ``values`` differ: by ``min_reward_spread`` or more, and by more than nothing."""
        spread = reward_spread(values)
        return spread > 0 and spread >= self.min_reward_spread

    def is_flat(self, group: Group) -> bool:
        """Whether ``group``'s signal does not spread (:meth:`spreads`): a flat group carries no learning signal;
        it is never selected nor trained on."""
        return not self.spreads(self.signal(group))

    def strength(self, group: Group) -> float:
        """The population variance of ``group``'s signal (the paper's "fluctuation"), 0 for a flat group: what
        top-K selection ranks by."""
        if self.is_flat(group):
            return 0.0
        values = self.signal(group)
        mean = sum(values) / len(values)
        return sum((v - mean) ** 2 for v in values) / len(values)


def select_top_k(groups: Sequence[Group], k: int | str, scoring: Scoring | None = None) -> list[Group]:
    """The ``k`` groups of largest signal variance (ties: earlier first), or every group that is not flat with
    ``k="all"`` (in their order).

    Flat groups (:meth:`Scoring.is_flat`) carry no learning signal and are never selected.
    """
    scoring = scoring or Scoring()
    strength = [scoring.strength(g) for g in groups]
    if k == "all":
        return [g for g, s in zip(groups, strength, strict=True) if s > 0]
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"top_k must be an int >= 1 or 'all', got {k!r}")
    order = sorted(range(len(groups)), key=lambda i: (-strength[i], i))
    return [groups[i] for i in order[:k] if strength[i] > 0]


def select_global(groups: Sequence[Group], k: int | str, scoring: Scoring | None = None) -> list[Group]:
    """Top-K selection over the groups of every process; returns this process's selected groups."""
    scoring = scoring or Scoring()
    rank, size = world()
    if size == 1:
        return select_top_k(groups, k, scoring)
    everyone = all_gather_objects([scoring.strength(g) for g in groups])
    flat = [(v, r, i) for r, vs in enumerate(everyone) for i, v in enumerate(vs)]  # (strength, rank, index)
    order = sorted(range(len(flat)), key=lambda j: (-flat[j][0], j))
    keep = [j for j in order if flat[j][0] > 0]
    if k != "all":
        keep = keep[: int(k)]
    return [groups[flat[j][2]] for j in sorted(keep) if flat[j][1] == rank]


def advantages_of(groups: Sequence[Group], scoring: Scoring | None = None) -> list[list[float]]:
    """GRPO advantages of every group's samples (one list per group): each group's signal centred on its mean and
    scaled as ``scoring.scale_rewards`` says; a flat group's are all 0. With ``"batch"`` the std is that of every
    signal value of the groups that are not flat, over every process (each process calls this with its own
    groups)."""
    scoring = scoring or Scoring()
    signals = [scoring.signal(g) for g in groups]
    flat = [scoring.is_flat(g) for g in groups]
    batch_std = None
    if scoring.scale_rewards == "batch":
        local = [v for values, f in zip(signals, flat, strict=True) if not f for v in values]
        values = [v for part in all_gather_objects(local) for v in part] if world()[1] > 1 else local
        batch_std = float(torch.tensor(values, dtype=torch.float64).std()) if len(values) > 1 else 0.0
    out = []
    for values, is_flat in zip(signals, flat, strict=True):
        if is_flat or not values:
            out.append([0.0] * len(values))
            continue
        rewards = torch.tensor(values, dtype=torch.float32)
        adv = group_advantages(rewards, len(values), scoring.scale_rewards, batch_std=batch_std)
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
