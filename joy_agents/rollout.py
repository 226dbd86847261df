"""The rollout engine: many episodes at once, one batched ``generate`` per role per step.

``RolloutEngine(policy, env_id, split).run(starts)`` plays one episode per start (a task index or an
``EnvSnapshot`` to branch from) over its own env clones. At every step it collects the pending turns of
all running episodes, groups them by role, and sends each role's prompts through one
``policy.generate`` call (the role's adapter active, KV cache, left padding). Each agent turn becomes a
:class:`Node` holding the role, the prompt and completion token ids, the per-token log-probs, the text
sent to the env and, optionally, the env snapshot taken just before the turn (for node-wise branching).
When an episode ends its :class:`Trajectory` gets the env's reward breakdown; ``node.reward`` is the
team reward R and ``node.breakdown`` the node's own record (format, R_F and R_E shares).

Token ids are never re-derived from text: what the policy produced is what trainers get.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import joy_env
from joy_agents.policy import Sample, SamplingConfig
from joy_env.env import EnvSnapshot


@dataclass
class Node:
    """One agent turn of a trajectory."""

    role: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str
    turn: int
    snapshot: EnvSnapshot | None = None
    reward: float = 0.0
    breakdown: dict[str, Any] = field(default_factory=dict)


@dataclass
class Trajectory:
    """One episode: its nodes in order and the env's episode breakdown."""

    task_id: str
    domain: str
    nodes: list[Node]
    result: dict[str, Any]

    @property
    def reward(self) -> float:
        return float(self.result["R"])

    @property
    def success(self) -> bool:
        return bool(self.result["success"])

    @property
    def generated_tokens(self) -> int:
        return sum(len(n.completion_ids) for n in self.nodes)


@dataclass
class RolloutConfig:
    """How the engine samples."""

    sampling: SamplingConfig = field(
        default_factory=lambda: SamplingConfig(temperature=0.0, max_new_tokens=160, stop=("</answer>",))
    )
    """Sampling of every role (greedy by default). Turns end at ``</answer>`` or the end-of-turn token, so
    a turn may hold several tool calls."""
    max_prompt_tokens: int = 3072
    """Longer prompts keep their last tokens."""
    keep_snapshots: bool = False
    """Store the env snapshot before each node (needed for node-wise branching)."""
    max_cycles: int = 24
    """Agent turns per episode before truncation."""

    def __post_init__(self) -> None:
        if self.max_prompt_tokens < 16:
            raise ValueError(f"max_prompt_tokens must be >= 16, got {self.max_prompt_tokens}")


class RolloutEngine:
    """Runs episodes of ``env_id`` with a :class:`~joy_agents.policy.TeamPolicy` (see the module doc)."""

    def __init__(
        self,
        policy: Any,
        env_id: str = "joy/mixed-v0",
        split: str = "test",
        seed: int = 0,
        config: RolloutConfig | None = None,
        progress: bool = True,
    ) -> None:
        self.policy = policy
        self.config = config or RolloutConfig()
        self.env_id = env_id
        self.split = split
        self.prototype = joy_env.make(env_id, split=split, seed=seed, max_cycles=self.config.max_cycles)
        self.progress = progress
        self._pool: list[Any] = []

    def _env(self, i: int) -> Any:
        """The i-th env of the pool (envs share the prototype's read-only world)."""
        while len(self._pool) <= i:
            proto = self.prototype
            self._pool.append(joy_env.JoyEnv(proto.world, self.split, self.config.max_cycles, proto.reward_config))
        return self._pool[i]

    def run(self, starts: Sequence[int | EnvSnapshot], sampling: SamplingConfig | None = None) -> list[Trajectory]:
        """Play one episode per start; returns the trajectories in the order of ``starts``."""
        sampling = sampling or self.config.sampling
        envs = []
        for i, start in enumerate(starts):
            env = self._env(i)
            if isinstance(start, EnvSnapshot):
                env.restore(start)
            else:
                env.reset(options={"task_index": int(start)})
            envs.append(env)
        nodes: list[list[Node]] = [[] for _ in envs]
        done = [False] * len(envs)
        bar = None
        if self.progress and len(envs) > 1:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(envs), desc=f"rollout {self.split}", unit="ep", leave=False)
        while not all(done):
            pending: dict[str, list[int]] = defaultdict(list)
            for i, env in enumerate(envs):
                if done[i]:
                    continue
                while env.agents:
                    _, _, term, trunc, _ = env.last(observe=False)
                    if not (term or trunc):
                        break
                    env.step(None)
                if not env.agents:
                    done[i] = True
                    if bar is not None:
                        bar.update(1)
                    continue
                pending[env.agent_selection].append(i)
            for role, idx in pending.items():
                prompts = []
                for i in idx:
                    info = envs[i].infos[role]
                    ids = self.policy.encode_prompt(role, info["messages"], info["tools"] or None)
                    prompts.append(ids[-self.config.max_prompt_tokens :])
                samples = self.policy.generate(role, prompts, sampling, num_samples=1)
                for i, group in zip(idx, samples, strict=True):
                    self._apply(envs[i], role, group[0], nodes[i])
        if bar is not None:
            bar.close()
        return [self._trajectory(env, ns) for env, ns in zip(envs, nodes, strict=True)]

    def _apply(self, env: Any, role: str, sample: Sample, nodes: list[Node]) -> None:
        snap = env.snapshot() if self.config.keep_snapshots else None
        nodes.append(
            Node(
                role=role,
                prompt_ids=list(sample.prompt_ids),
                completion_ids=list(sample.completion_ids),
                logprobs=list(sample.logprobs),
                text=sample.text,
                finish_reason=sample.finish_reason,
                turn=env.infos[role]["turn"],
                snapshot=snap,
            )
        )
        env.step(sample.text)  # the policy's text never holds the end-of-turn token

    def _trajectory(self, env: Any, nodes: list[Node]) -> Trajectory:
        result = env.episode_breakdown
        for node, record in zip(nodes, result["nodes"], strict=True):
            node.reward = float(result["R"])
            node.breakdown = record
        return Trajectory(task_id=result["task_id"], domain=result["domain"], nodes=nodes, result=result)


def summarize(trajectories: Sequence[Trajectory]) -> dict[str, Any]:
    """The ``metrics`` block of ``results.json``: success, reward, accuracy, format validity, per domain."""
    n = len(trajectories)
    if n == 0:
        raise ValueError("summarize needs at least one trajectory")
    turns = sum(len(t.nodes) for t in trajectories)
    valid = sum(1 for t in trajectories for nd in t.result["nodes"] if nd["format_ok"])
    per: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        per[t.domain].append(t)
    return {
        "success_rate": sum(t.success for t in trajectories) / n,
        "mean_reward": sum(t.reward for t in trajectories) / n,
        "mean_accuracy": sum(t.result["R_A"] for t in trajectories) / n,
        "format_valid_rate": valid / turns if turns else 0.0,
        "generated_tokens": sum(t.generated_tokens for t in trajectories),
        "episodes": n,
        "per_domain": {
            d: {
                "success_rate": sum(t.success for t in ts) / len(ts),
                "mean_accuracy": sum(t.result["R_A"] for t in ts) / len(ts),
                "n": len(ts),
            }
            for d, ts in sorted(per.items())
        },
    }
