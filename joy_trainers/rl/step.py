"""The operations of one training step on the run's :class:`~joy_trainers.rl.state.RunState`, which a trainer's
``step`` calls in turn: sample groups (:func:`trajectory_groups`; node-wise sampling is ``joyagents_grpo``'s own),
update the roles from the selected groups (:func:`update_selected`, :func:`update_roles`), evolve the memory
(:func:`evolve_memory`), and the step's metrics row (:func:`metrics_row`).

They sit above the state and the pure pieces they use (:mod:`~joy_trainers.rl.groups`,
:mod:`~joy_trainers.rl.update`, :mod:`~joy_trainers.rl.metrics`), none of which knows the state."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from joy_agents.memory import evolve
from joy_trainers.distributed import all_gather_objects
from joy_trainers.rl.config import RLConfig
from joy_trainers.rl.groups import Group, advantages_of, outcome_of
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
            )
        )
    return groups, trajs, []


def evolve_memory(state: RunState, groups: Sequence[Group], step: int) -> dict[str, Any]:
    """Memory evolution from every sample of the step (all processes' outcomes, the same on every rank)."""
    if not state.banks:
        return {}
    local = [o for g in groups for o in g.outcomes]
    outcomes = [o for rank_outcomes in all_gather_objects(local) for o in rank_outcomes]
    z = next(iter(state.banks.values())).config.z
    return evolve(state.banks, outcomes, step, z)


def update_selected(state: RunState, selected: Sequence[Group], cfg: RLConfig) -> dict[str, Any]:
    """Advantages of the selected groups, then ``update_epochs`` passes of one :func:`policy_update` per role
    owning one of them (the same roles in the same order on every process); the last pass's statistics."""
    per_role: dict[str, list[tuple[Any, float]]] = {}
    for g, adv in zip(selected, advantages_of(selected, cfg.scale_rewards), strict=True):
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
        "variances": [g.variance for g in groups],
        "sample_rewards": [r for g in groups for r in g.rewards],
        "selected_roles": [g.role for g in selected],
        "selected_variances": [g.variance for g in selected],
        "truncated": sum(1 for t in [*trajectories, *continuations] for n in t.nodes if n.prompt_truncated),
    }
    parts = all_gather_objects(local)

    def cat(key: str) -> list[Any]:
        return [x for p in parts for x in p[key]]

    def mean(xs: Sequence[float]) -> float:
        return float(sum(xs) / len(xs)) if xs else 0.0

    rewards = cat("rewards")
    tokens = sum(p["tokens"] for p in parts)
    state.tokens_total += tokens
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
        "groups/nonzero_variance": sum(1 for v in cat("variances") if v > 0),
        "groups/selected": len(cat("selected_roles")),
        "groups/selected_variance_mean": mean(cat("selected_variances")),
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
