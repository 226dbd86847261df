"""The rollout engine: many episodes at once, every live episode's turn in one decode batch.

``RolloutEngine(policy, env_id, split).run(starts)`` (``env_kwargs``: the env's task-source options, e.g.
``{"source": "tau2"}``) plays one episode per start (a task index or an ``EnvSnapshot`` to branch from) over its
own env clones, with the :class:`~joy_agents.sampling.settings.GenerationSettings` of its :class:`RolloutConfig`.
It makes the settings' sampler (:func:`~joy_agents.sampling.base.make_sampler`), submits the pending turn of
every episode, and steps the sampler; each turn that comes back is applied to its env at once and the episode's
next turn is submitted, while the others go on (the path of one decode step down to the model:
:mod:`joy_agents.sampling`). Each agent turn becomes a :class:`Node` holding the role, the prompt and completion
token ids, the per-token log-probs, the text sent to the env, what the role received since its previous turn
(``incoming``) and, optionally, the env snapshot taken just before the turn (for node-wise branching). When an
episode ends its :class:`Trajectory` gets the env's reward breakdown; ``node.reward`` is the team reward R and
``node.breakdown`` the node's own record (format, R_F and R_E shares).

Token ids are never re-derived from text: what the policy produced is what trainers get.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import joy_env
from joy_agents.config import Sample, SamplingConfig
from joy_agents.memory import render_memories
from joy_agents.sampling.base import Sampler, make_sampler
from joy_agents.sampling.settings import GenerationSettings
from joy_agents.sampling.stats import EngineStats
from joy_env.env import EnvSnapshot
from joy_env.protocol import clip


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
    memory_ids: tuple[int, ...] = ()
    """Memory entries shown in the prompt (or reused as the action when ``finish_reason == "memory"``)."""
    memory_key: str = ""
    """The query the role answered (its first user message): the key memory is written under."""
    role_turn: int = 0
    """How many turns the role had taken before this one in its own conversation."""
    prompt_truncated: bool = False
    """Whether the prompt was cut to ``GenerationSettings.max_prompt_tokens`` (its oldest turns left out)."""
    incoming: str = ""
    """What the role received since its previous turn (:func:`incoming_text`): at its first turn its request or
    sub-query, then tool results, sub-agents' answers, format errors, a customer's replies."""

    @property
    def trainable(self) -> bool:
        """Whether the node holds generated tokens (a memory reuse or an empty turn holds none)."""
        return bool(self.completion_ids)


@dataclass(frozen=True)
class Branch:
    """A start that restores ``snapshot`` and plays ``sample`` as the first turn (node-wise branching):
    ``sample`` must come from the role whose turn it is in ``snapshot``."""

    snapshot: EnvSnapshot
    sample: Sample
    memory_ids: tuple[int, ...] = ()


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
    """How the engine plays episodes: the generation settings, passed whole, and what it keeps."""

    generation: GenerationSettings = field(default_factory=GenerationSettings)
    """Tokens per turn, turns per episode, prompt tokens kept, the temperature of the turns (greedy by default;
    :meth:`RolloutEngine.run` may take its own sampling) and the engine with its options. Turns end at
    ``</answer>`` or the end-of-turn token, so a turn may hold several tool calls."""
    keep_snapshots: bool = False
    """Store the env snapshot before each node (needed for node-wise branching)."""

    def __post_init__(self) -> None:
        if not isinstance(self.generation, GenerationSettings):
            raise TypeError(
                f"RolloutConfig.generation must be a GenerationSettings, got {type(self.generation).__name__}"
            )


class RolloutEngine:
    """Runs episodes of ``env_id`` with a :class:`~joy_agents.policy.TeamPolicy` (see the module doc)."""

    def __init__(
        self,
        policy: Any,
        env_id: str = "joy/mixed-v0",
        split: str = "test",
        seed: int = 0,
        config: RolloutConfig | None = None,
        *,
        progress: bool = True,
        memory: dict[str, Any] | None = None,
        env_kwargs: Mapping[str, Any] | None = None,
        reward_config: joy_env.RewardConfig | None = None,
    ) -> None:
        self.policy = policy
        self.memory = memory or {}
        """Role -> :class:`~joy_agents.memory.MemoryBank`; roles with a bank see retrieved entries."""
        self.config = config or RolloutConfig()
        self.env_id = env_id
        self.split = split
        self.env_kwargs = dict(env_kwargs or {})
        """Task-source options of ``joy_env.make`` (e.g. ``{"source": "tau2"}``)."""
        rewards = {"reward_config": reward_config} if reward_config is not None else {}
        self.prototype = joy_env.make(
            env_id, split=split, seed=seed, max_cycles=self.config.generation.max_cycles, **self.env_kwargs, **rewards
        )
        self.progress = progress
        self._pool: list[Any] = []
        self.last_truncated = False
        self.stats: EngineStats | None = None
        """What the sampler of the last :meth:`run` computed (a sampler given to it: everything it ran so far)."""

    def _env(self, i: int) -> Any:
        """The i-th env of the pool (envs share the prototype's read-only world)."""
        while len(self._pool) <= i:
            proto = self.prototype
            cycles = self.config.generation.max_cycles
            self._pool.append(joy_env.JoyEnv(proto.world, self.split, cycles, proto.reward_config))
        return self._pool[i]

    def prompt(self, env: Any, role: str, memory_time: int = 0) -> tuple[list[int], tuple[int, ...], str | None]:
        """The prompt ids of ``role``'s pending turn in ``env`` (memory included, read at ``memory_time``, and cut
        to ``max_prompt_tokens``), the memory entries shown, and an action to reuse from memory (or None).
        Whether the prompt was cut is in ``self.last_truncated``."""
        info = env.infos[role]
        messages = list(info["messages"])
        memory_ids: tuple[int, ...] = ()
        note = ""
        reuse = None
        bank = self.memory.get(role)
        if bank is not None and bank.config.enabled:
            found = bank.retrieve(memory_key(messages), role_turn(messages), memory_time)
            if found:
                memory_ids = tuple(e.entry_id for e, _ in found)
                best, sim = found[0]
                if bank.config.reuse_similarity is not None and sim >= bank.config.reuse_similarity:
                    reuse = best.action
                note = render_memories([e for e, _ in found])
        limit = self.config.generation.max_prompt_tokens
        fitted = self.policy.fit_prompt(role, messages, info["tools"] or None, limit, note)
        self.last_truncated = fitted.truncated
        return fitted.ids, memory_ids, reuse

    def run(
        self,
        starts: Sequence[int | EnvSnapshot | Branch],
        sampling: SamplingConfig | None = None,
        sampler: Sampler | None = None,
        memory_time: int = 0,
    ) -> list[Trajectory]:
        """Play one episode per start (a task index, a snapshot, or a :class:`Branch`) with ``sampling`` (default:
        the settings' own, :meth:`GenerationSettings.sampling`); returns the trajectories in the order of
        ``starts``. A branch's trajectory starts with its forced node. The turns are sampled by ``sampler`` (an idle
        one, left open for the caller's next requests: an RL step's phases share one) or by a sampler of the
        settings' engine made for the call. The memory banks are read at ``memory_time`` (a training step: the
        decay of their entries)."""
        sampling = sampling or self.config.generation.sampling()
        if sampler is not None and sampler.busy:
            raise ValueError("RolloutEngine.run needs an idle sampler: drain the requests it runs first")
        envs = []
        nodes: list[list[Node]] = []
        for i, start in enumerate(starts):
            env = self._env(i)
            nodes.append([])
            if isinstance(start, Branch):
                env.restore(start.snapshot)
                self._apply(env, env.agent_selection, start.sample, nodes[-1], start.memory_ids)
            elif isinstance(start, EnvSnapshot):
                env.restore(start)
            else:
                env.reset(options={"task_index": int(start)})
            envs.append(env)
        bar = None
        if self.progress and len(envs) > 1:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(envs), desc=f"rollout {self.split}", unit="ep")
        self._play(envs, nodes, sampling, bar, sampler, memory_time)
        if bar is not None:
            bar.close()
        return [self._trajectory(env, ns) for env, ns in zip(envs, nodes, strict=True)]

    def _next_turn(self, env: Any) -> str | None:
        """Step ``env`` past agents that are done; the role whose turn is pending, or None at the episode's end."""
        while env.agents:
            _, _, term, trunc, _ = env.last(observe=False)
            if not (term or trunc):
                return env.agent_selection
            env.step(None)
        return None

    def _play(
        self,
        envs: list[Any],
        nodes: list[list[Node]],
        sampling: SamplingConfig,
        bar: Any,
        given: Sampler | None,
        memory_time: int,
    ) -> None:
        """Every episode's pending turn submitted to the sampler; a finished turn is applied at once and the
        episode's next turn submitted (it joins the running batch of the ``continuous`` engine, the next step's
        calls of the others)."""
        sampler = given if given is not None else make_sampler(self.policy, self.config.generation, sampling)
        self.stats = sampler.stats

        def advance(i: int) -> None:
            env = envs[i]
            while (role := self._next_turn(env)) is not None:
                ids, memory_ids, reuse = self.prompt(env, role, memory_time)
                if reuse is None:
                    sampler.submit(role, ids, (i, memory_ids, self.last_truncated), sampling=sampling)
                    return
                self._apply(env, role, _reused(ids, reuse), nodes[i], memory_ids, self.last_truncated)
            if bar is not None:
                bar.update(1)

        try:
            for i in range(len(envs)):
                advance(i)
            while sampler.busy:
                for (i, memory_ids, cut), sample in sampler.step():
                    self._apply(envs[i], envs[i].agent_selection, sample, nodes[i], memory_ids, cut)
                    advance(i)
        finally:
            if given is None:
                sampler.close()

    def _apply(
        self,
        env: Any,
        role: str,
        sample: Sample,
        nodes: list[Node],
        memory_ids: tuple[int, ...] = (),
        truncated: bool = False,
    ) -> None:
        snap = env.snapshot() if self.config.keep_snapshots else None
        messages = env.infos[role]["messages"]
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
                memory_ids=tuple(memory_ids),
                memory_key=memory_key(messages),
                role_turn=role_turn(messages),
                prompt_truncated=truncated,
                incoming=incoming_text(messages),
            )
        )
        env.step(sample.text)  # the policy's text never holds the end-of-turn token

    def _trajectory(self, env: Any, nodes: list[Node]) -> Trajectory:
        result = env.episode_breakdown
        # an episode started from a snapshot already holds the records of the nodes before it
        records = result["nodes"][len(result["nodes"]) - len(nodes) :]
        for node, record in zip(nodes, records, strict=True):
            node.reward = float(result["R"])
            node.breakdown = record
        return Trajectory(task_id=result["task_id"], domain=result["domain"], nodes=nodes, result=result)


def memory_key(messages: Sequence[dict[str, Any]]) -> str:
    """The query a role is answering: the content of its first user message."""
    return next((str(m.get("content", "")) for m in messages if m.get("role") == "user"), "")


def role_turn(messages: Sequence[dict[str, Any]]) -> int:
    """How many turns the role has taken in its conversation so far."""
    return sum(1 for m in messages if m.get("role") == "assistant")


INCOMING_CHARS = 1000
"""Characters of :attr:`Node.incoming` kept (the start, with a marker when cut)."""


def incoming_text(messages: Sequence[dict[str, Any]], limit: int = INCOMING_CHARS) -> str:
    """What a role received since its previous turn: the contents of the messages after its last assistant
    message (all but the system prompt at its first turn), one per line, cut to ``limit`` characters."""
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    parts = [str(m.get("content") or "") for m in messages[last + 1 :] if m.get("role") != "system"]
    return clip("\n".join(p for p in parts if p), limit)


def _reused(prompt_ids: list[int], action: str) -> Sample:
    return Sample(prompt_ids=list(prompt_ids), completion_ids=[], logprobs=[], text=action, finish_reason="memory")


def truncated_prompts(trajectories: Sequence[Trajectory]) -> int:
    """How many agent turns of ``trajectories`` saw a prompt cut to ``max_prompt_tokens``."""
    return sum(1 for t in trajectories for n in t.nodes if n.prompt_truncated)


def summarize(trajectories: Sequence[Trajectory]) -> dict[str, Any]:
    """The ``metrics`` block of ``results.json``: success, reward, accuracy, format validity, per domain (with
    the mean of each accuracy check, ``checks``)."""
    n = len(trajectories)
    if n == 0:
        raise ValueError("summarize needs at least one trajectory")

    def format_rate(ts: Sequence[Trajectory]) -> float:
        turns = sum(len(t.nodes) for t in ts)
        valid = sum(1 for t in ts for nd in t.result["nodes"] if nd["format_ok"])
        return valid / turns if turns else 0.0

    per: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        per[t.domain].append(t)

    def check_means(ts: Sequence[Trajectory]) -> dict[str, float]:
        """Mean of each accuracy check (e.g. ``db`` and ``communicate``) over the episodes that report it."""
        seen: dict[str, list[float]] = defaultdict(list)
        for t in ts:
            for name, value in (t.result.get("accuracy") or {}).items():
                seen[name].append(float(value))
        return {name: sum(v) / len(v) for name, v in seen.items()}

    return {
        "success_rate": sum(t.success for t in trajectories) / n,
        "mean_reward": sum(t.reward for t in trajectories) / n,
        "mean_accuracy": sum(t.result["R_A"] for t in trajectories) / n,
        "format_valid_rate": format_rate(trajectories),
        "generated_tokens": sum(t.generated_tokens for t in trajectories),
        "episodes": n,
        "prompts_truncated": truncated_prompts(trajectories),
        "per_domain": {
            d: {
                "success_rate": sum(t.success for t in ts) / len(ts),
                "mean_accuracy": sum(t.result["R_A"] for t in ts) / len(ts),
                "format_valid_rate": format_rate(ts),
                "checks": check_means(ts),
                "n": len(ts),
            }
            for d, ts in sorted(per.items())
        },
    }
