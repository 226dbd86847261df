"""The operations of one training step on the run's :class:`~joy_trainers.rl.state.RunState`, which a trainer's
``step`` calls in turn: sample groups (:func:`trajectory_groups`; node-wise sampling is ``joyagents_grpo``'s own),
with dynamic sampling around it (:func:`draw_groups`), update the roles from the selected groups
(:func:`update_selected`, :func:`update_roles`), evolve the memory (:func:`evolve_memory`), and the step's metrics
row (:func:`metrics_row`).

They sit above the state and the pure pieces they use (:mod:`~joy_trainers.rl.groups`,
:mod:`~joy_trainers.rl.update`, :mod:`~joy_trainers.rl.metrics`), none of which knows the state."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from joy_agents.memory import evolve
from joy_trainers.distributed import all_gather_objects, shard
from joy_trainers.rl.config import RLConfig
from joy_trainers.rl.groups import Group, Scoring, advantages_of, outcome_of
from joy_trainers.rl.metrics import StepOutput
from joy_trainers.rl.state import RunState
from joy_trainers.rl.update import ReferencePolicy, UpdateConfig, policy_update, update_config


def trajectory_groups(
    state: RunState,
    tasks: Sequence[int],
    group_size: int,
    temperature: float,
    top_p: float | None = None,
    memory_time: int = 0,
) -> tuple[list[Group], list[Any], list[Any]]:
    """G whole trajectories per task, every role sampling at ``temperature`` and ``top_p`` (default: the run's
    settings'): one joint group per task. ``memory_time`` is the step, for the memory banks' decay.

    Returns ``(groups, trajectories, [])`` (no separate continuations)."""
    sampling = state.settings.sampling(temperature, top_p)
    starts = [t for t in tasks for _ in range(group_size)]
    trajs = state.engine.run(starts, sampling, memory_time=memory_time) if starts else []
    groups = []
    for k in range(len(tasks)):
        members = trajs[k * group_size : (k + 1) * group_size]
        groups.append(
            Group(
                role="*",
                rewards=[t.reward for t in members],
                members=[[n for n in t.nodes if n.trainable] for t in members],
                key=members[0].task_id if members else "",
                outcomes=[outcome_of(n, t) for t in members for n in t.nodes],
                accuracy=[float(t.result["R_A"]) for t in members],
                success=[t.success for t in members],
            )
        )
    return groups, trajs, []


@dataclass
class Drawn:
    """What a step sampled over all its draws of tasks (:func:`draw_groups`)."""

    groups: list[Group] = field(default_factory=list)
    trajectories: list[Any] = field(default_factory=list)
    continuations: list[Any] = field(default_factory=list)
    draws: int = 0
    """Batches of tasks drawn (``sampling/draws``)."""


def draw_groups(
    state: RunState,
    tasks: Sequence[int],
    sample: Callable[[list[int]], tuple[list[Group], list[Any], list[Any]]],
) -> Drawn:
    """``sample(tasks)`` (``(groups, trajectories, continuations)`` of this process's tasks), then, with the run's
    ``groups_per_step``, ``sample`` again on this process's share of the next batches of ``tasks_per_step`` RL
    tasks (:meth:`~joy_trainers.rl.state.RunState.draw_tasks`) until the groups that are not flat, over every
    process, number ``groups_per_step``, or ``max_draws`` batches are drawn (DAPO's dynamic sampling: a step's
    update never runs on a handful of groups because its first tasks happened to be all solved or all failed).
    Every process draws the same batches. Returns everything drawn."""
    cfg = state.config
    scoring = Scoring.of(cfg)
    drawn = Drawn()
    batch = list(tasks)
    while True:
        groups, trajectories, continuations = sample(batch)
        drawn.groups += groups
        drawn.trajectories += trajectories
        drawn.continuations += continuations
        drawn.draws += 1
        if not cfg.groups_per_step or drawn.draws >= cfg.max_draws:
            return drawn
        spread = sum(all_gather_objects(sum(not scoring.is_flat(g) for g in drawn.groups)))
        if spread >= cfg.groups_per_step:
            return drawn
        batch = shard(state.draw_tasks(cfg.tasks_per_step))


def evolve_memory(state: RunState, groups: Sequence[Group], step: int) -> dict[str, Any]:
    """Memory evolution from every sample of the step (all processes' outcomes, the same on every rank)."""
    if not state.banks:
        return {}
    local = [o for g in groups for o in g.outcomes]
    outcomes = [o for rank_outcomes in all_gather_objects(local) for o in rank_outcomes]
    z = next(iter(state.banks.values())).config.z
    return evolve(state.banks, outcomes, step, z)


def update_selected(state: RunState, selected: Sequence[Group], cfg: RLConfig) -> dict[str, Any]:
    """Advantages of the selected groups (:class:`~joy_trainers.rl.groups.Scoring` of ``cfg``), then
    ``update_epochs`` passes of one :func:`policy_update` per role owning one of them (the same roles in the same
    order on every process): one optimiser step per role over every sample of every selected group, whatever
    task it came from; the last pass's statistics. A flat group is left out (selection never passes one)."""
    scoring = Scoring.of(cfg)
    selected = [g for g in selected if not scoring.is_flat(g)]
    per_role: dict[str, list[tuple[Any, float]]] = {}
    for g, adv in zip(selected, advantages_of(selected, scoring), strict=True):
        if g.role == "*":  # a whole trajectory: every node shares its advantage
            for nodes, a in zip(g.members, adv, strict=True):
                for n in nodes:
                    per_role.setdefault(n.role, []).append((n, a))
        else:
            for s, a in zip(g.samples, adv, strict=True):
                per_role.setdefault(g.role, []).append((s, a))
    ucfg = update_config(cfg)
    stats: dict[str, Any] = {}
    for _ in range(cfg.update_epochs):  # later passes: the clipped ratio bounds the change
        stats = update_roles(state, per_role, ucfg, state.reference)
    return stats


def update_roles(
    state: RunState,
    per_role: dict[str, list[tuple[Any, float]]],
    ucfg: UpdateConfig,
    reference: ReferencePolicy | None = None,
) -> dict[str, Any]:
    """One :func:`policy_update` per role that has ``(sample, advantage)`` pairs on any process, in the same
    order on every process, except the run's frozen roles (``state.frozen``: never updated, whatever their
    samples); returns the statistics per updated role. A micro-batch size halved after running out of memory is
    kept in ``state.micro_batch_size`` for later steps."""
    roles = sorted({r for rs in all_gather_objects(sorted(per_role)) for r in rs} - state.frozen)
    fitted = state.micro_batch_size  # halved after an out-of-memory error in an earlier step
    if fitted:
        ucfg.micro_batch_size = min(ucfg.micro_batch_size, fitted)
    start = ucfg.micro_batch_size
    stats: dict[str, Any] = {}
    for role in roles:
        rows = per_role.get(role, [])
        samples, advantages = [s for s, _ in rows], [a for _, a in rows]
        stats[role] = policy_update(state.team, role, state.optimizers[role], samples, advantages, ucfg, reference)
    if ucfg.micro_batch_size < start:
        state.micro_batch_size = ucfg.micro_batch_size
    return stats


def group_figures(groups: Sequence[Group], selected: Sequence[Group], scoring: Scoring) -> dict[str, list[Any]]:
    """This process's per-group and per-sample values behind the ``groups/*``, ``policy/entropy`` and
    ``advantages/*`` metrics (lists, so that :func:`metrics_row` joins every process's)."""
    updated = [g for g in selected if not scoring.is_flat(g)]
    accuracy_only = Scoring("accuracy", scoring.min_reward_spread)
    tokens = [(n, s) for g in groups for n, s in sampled_logprobs(g)]
    return {
        "variances": [g.variance for g in groups],
        "flat": [scoring.is_flat(g) for g in groups],
        # groups that differ in R but not in R_A: only the shaping terms (format, efficiency) tell them apart
        "shaping_only": [
            scoring.spreads(g.rewards) and not accuracy_only.spreads(g.accuracy) for g in groups if g.accuracy
        ],
        "entropy": tokens,
        "advantages": [
            (ok, a)
            for g, adv in zip(updated, advantages_of(updated, scoring), strict=True)
            for ok, a in zip(g.success, adv, strict=False)
        ],
        "sample_rewards": [r for g in groups for r in g.rewards],
        "selected_roles": [g.role for g in updated],
        "selected_variances": [scoring.strength(g) for g in updated],
    }


def sampled_logprobs(group: Group) -> list[tuple[int, float]]:
    """``(tokens, sum of their log-probs)`` of every sampled turn of ``group``: its samples (node-wise groups) or
    every turn of its members (whole trajectories). ``-sum / tokens`` over many turns estimates the per-token
    entropy of the sampling policy (at its temperature): the mean of ``-log p`` of tokens drawn from ``p``."""
    turns = list(group.samples) if group.samples else [n for nodes in group.members for n in nodes]
    return [(len(t.logprobs), float(sum(t.logprobs))) for t in turns if len(t.logprobs)]


def metrics_row(state: RunState, step: int, out: StepOutput) -> dict[str, Any]:
    """The metrics row of ``step`` (0-based) from its :class:`StepOutput`, summed / averaged over every
    process; adds the step's generated tokens to ``state.tokens_total``."""
    trajectories, groups, selected, continuations = out.trajectories, out.groups, out.selected, out.continuations
    update_stats, memory_stats = out.update_stats, out.memory_stats
    cfg = state.config
    local = {
        "rewards": [t.reward for t in trajectories],
        "success": [float(t.success) for t in trajectories],
        "domains": [(t.domain, t.reward) for t in trajectories],
        "tokens": sum(t.generated_tokens for t in trajectories) + sum(t.generated_tokens for t in continuations),
        "continuations": len(continuations),
        "branched_nodes": len(groups) if groups and groups[0].role != "*" else 0,
        "truncated": sum(1 for t in [*trajectories, *continuations] for n in t.nodes if n.prompt_truncated),
        **group_figures(groups, selected, Scoring.of(cfg)),
    }
    parts = all_gather_objects(local)

    def cat(key: str) -> list[Any]:
        return [x for p in parts for x in p[key]]

    def mean(xs: Sequence[float]) -> float:
        return float(sum(xs) / len(xs)) if xs else 0.0

    rewards = cat("rewards")
    tokens = sum(p["tokens"] for p in parts)
    state.tokens_total += tokens
    sampled = cat("entropy")
    advantages = cat("advantages")
    row: dict[str, Any] = {
        "step": step + 1,
        "iteration": step // cfg.steps_per_iteration + 1,
        "charts/reward_mean": mean(rewards),
        "charts/success_rate": mean(cat("success")),
        "charts/sample_reward_mean": mean(cat("sample_rewards")),
        "charts/tokens_generated": tokens,
        "charts/tokens_generated_total": state.tokens_total,
        "charts/episodes": len(rewards),
        "sampling/continuations": sum(p["continuations"] for p in parts),
        "sampling/branched_nodes": sum(p["branched_nodes"] for p in parts),
        "groups/total": len(cat("variances")),
        "groups/variance_mean": mean(cat("variances")),
        "groups/with_spread": sum(1 for f in cat("flat") if not f),
        "groups/flat_fraction": mean([float(f) for f in cat("flat")]),
        "groups/shaping_only": sum(cat("shaping_only")),
        "groups/selected": len(cat("selected_roles")),
        "groups/selected_variance_mean": mean(cat("selected_variances")),
        "policy/entropy": -sum(s for _, s in sampled) / max(1, sum(n for n, _ in sampled)),
        "advantages/success_mean": mean([a for ok, a in advantages if ok]),
        "advantages/failure_mean": mean([a for ok, a in advantages if not ok]),
        "prompts/truncated": sum(p["truncated"] for p in parts),
    }
    by_domain: dict[str, list[float]] = {}
    for d, r in cat("domains"):
        by_domain.setdefault(d, []).append(r)
    for d, rs in sorted(by_domain.items()):
        row[f"charts/reward/{d}"] = mean(rs)
    for role in state.team.roles:
        row[f"groups/selected/{role}"] = sum(
            1 for r in cat("selected_roles") if r == role or (r == "*" and role in update_stats)
        )
    updated = [s for s in update_stats.values() if s.get("samples")]
    total = sum(s["samples"] for s in updated) or 1.0
    for name in ("policy_loss", "kl", "clip_fraction"):
        row[f"losses/{name}"] = sum(s[name] * s["samples"] for s in updated) / total if updated else 0.0
    row["losses/grad_norm"] = mean([s["grad_norm"] for s in updated if "grad_norm" in s])
    row["losses/roles_updated"] = len(updated)
    for name, seconds in (out.timer.seconds if out.timer is not None else {}).items():
        row[f"time/{name}_s"] = seconds
    if state.banks:
        lookups = sum(b.stats["lookups"] for b in state.banks.values())
        hits = sum(b.stats["hits"] for b in state.banks.values())
        row["memory/size"] = sum(len(b) for b in state.banks.values())
        row["memory/hit_rate"] = hits / lookups if lookups else 0.0
        row["memory/written"] = memory_stats.get("written", 0)
        row["memory/evicted"] = memory_stats.get("evicted", 0)
    row["time/wall_s"] = state.wall
    row.update(out.metrics)
    return row
