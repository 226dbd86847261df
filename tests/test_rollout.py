"""The rollout engine: batched per-role generation over many episodes, nodes, snapshots, metrics."""

import pytest

import joy_env
from joy_agents.policy import SamplingConfig, TeamConfig, TeamPolicy
from joy_agents.rollout import RolloutConfig, RolloutEngine, summarize
from joy_agents.sampling.settings import GenerationSettings


@pytest.fixture(scope="module")
def team(tiny_dir):
    return TeamPolicy(TeamConfig(model=str(tiny_dir)))


def _engine(team, keep_snapshots=False, **kw):
    settings = GenerationSettings(temperature=1.0, max_new_tokens=8, max_cycles=4, max_prompt_tokens=192, **kw)
    config = RolloutConfig(settings, keep_snapshots=keep_snapshots)
    return RolloutEngine(team, "joy/mixed-v0", "validation", 0, config, progress=False)


def test_per_role_engine_makes_one_generate_call_per_role_per_step(team, monkeypatch):
    calls = []
    original = team.generate

    def spy(role, prompts, config, num_samples=1):
        calls.append((role, len(prompts)))
        return original(role, prompts, config, num_samples)

    monkeypatch.setattr(team, "generate", spy)
    trajectories = _engine(team, engine="generate").run(list(range(4)))
    assert len(trajectories) == 4
    # every step batches all pending master turns of the four episodes into one call
    assert calls[0] == ("master", 4)
    total_turns = sum(len(t.nodes) for t in trajectories)
    assert sum(n for _, n in calls) == total_turns
    steps = 4  # max_cycles: every episode here is truncated or ends within 4 turns
    assert len(calls) <= steps * len(team.roles)


def _mixed_starts(n=8):
    """Starts whose first turns belong to different roles: task indices (the master's turn) and snapshots taken
    where the expert has just called a sub-agent."""
    env = joy_env.make("joy/mixed-v0", split="validation", seed=0, max_cycles=4)
    starts = []
    for i in range(n):
        env.reset(options={"task_index": i})
        if i % 2:
            starts.append(i)
            continue
        env.step(joy_env.expert_action(env))
        starts.append(env.snapshot() if env.agents else i)
    return starts


def _greedy_turns(trajectories):
    return [[(n.role, n.completion_ids, n.finish_reason) for n in t.nodes] for t in trajectories]


@pytest.mark.parametrize("max_rows", [3, 256])
def test_continuous_engine_plays_the_same_greedy_episodes_as_per_role_generate(distinct_team, max_rows):
    """Rows of every role decode together, leave when their turn ends and are joined by the next turns (with
    max_rows=3 most turns wait for a free row): the episodes are those of one generate call per role."""
    import torch

    starts = _mixed_starts()
    per_role = _engine(distinct_team, engine="generate").run(starts, SamplingConfig(0.0, 1.0, 24, ("</answer>",)))
    engine = _engine(distinct_team, max_batch_rows=max_rows)
    continuous = engine.run(starts, SamplingConfig(0.0, 1.0, 24, ("</answer>",)))
    assert _greedy_turns(continuous) == _greedy_turns(per_role)
    for a, b in zip(continuous, per_role, strict=True):
        assert a.result["R"] == b.result["R"]
        for x, y in zip(a.nodes, b.nodes, strict=True):
            assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4)
    stats = engine.stats
    assert stats.tokens_kept == sum(t.generated_tokens for t in continuous)
    assert stats.tokens_computed >= stats.tokens_kept  # free slots decode until reused or compacted away
    assert stats.rows_per_forward <= max_rows


def test_continuous_engine_decodes_all_roles_in_one_forward(distinct_team, monkeypatch):
    from joy_agents.sampling.stacked_lora import StackedLoRA

    shared = distinct_team.model_for("master")
    decodes, mixed = [], []
    original_forward, original_rows = shared.forward, StackedLoRA.set_rows

    def spy(*args, **kwargs):
        if kwargs["input_ids"].shape[1] == 1:  # a decode step (prefills run whole prompts)
            decodes.append(kwargs["input_ids"].shape[0])
        return original_forward(*args, **kwargs)

    def rows(self, roles):
        mixed.append(list(roles))
        return original_rows(self, roles)

    monkeypatch.setattr(shared, "forward", spy)
    monkeypatch.setattr(StackedLoRA, "set_rows", rows)
    engine = _engine(distinct_team, draft_tokens=0)  # one token per row per decode step (drafts: test_drafts.py)
    trajectories = engine.run(_mixed_starts(), SamplingConfig(0.0, 1.0, 24, ("</answer>",)))
    assert len(decodes) == engine.stats.decode_forwards and sum(decodes) == engine.stats.tokens_computed
    assert len({n.role for t in trajectories for n in t.nodes}) > 1
    # decode forwards carried rows of several roles at once, each through its own adapter
    assert any(len(set(roles)) > 1 for roles in mixed)
    assert engine.stats.rows_per_forward > 1


def test_nodes_hold_ids_logprobs_and_rewards(team):
    trajectories = _engine(team).run([0, 1])
    for t in trajectories:
        assert len(t.nodes) == t.result["turns"] and t.nodes
        for node in t.nodes:
            assert node.role in team.roles
            assert len(node.completion_ids) == len(node.logprobs) > 0
            assert all(lp <= 0 for lp in node.logprobs)
            assert node.prompt_ids and node.reward == t.reward
            assert node.breakdown["agent"] == node.role
    metrics = summarize(trajectories)
    assert metrics["episodes"] == 2 and 0 <= metrics["success_rate"] <= 1
    assert metrics["generated_tokens"] == sum(t.generated_tokens for t in trajectories)
    assert sum(d["n"] for d in metrics["per_domain"].values()) == 2
    # format validity per domain: valid turns over turns of that domain's episodes; overall = pooled
    for domain, m in metrics["per_domain"].items():
        ts = [t for t in trajectories if t.domain == domain]
        valid = sum(nd["format_ok"] for t in ts for nd in t.result["nodes"])
        assert m["format_valid_rate"] == valid / sum(len(t.nodes) for t in ts)
    valid = sum(nd["format_ok"] for t in trajectories for nd in t.result["nodes"])
    assert metrics["format_valid_rate"] == valid / sum(len(t.nodes) for t in trajectories)


def test_branching_from_a_node_snapshot_replays_the_episode(team):
    engine = _engine(team, keep_snapshots=True)
    first = engine.run([5])[0]
    node = first.nodes[-1]
    assert node.snapshot is not None
    env = joy_env.make("joy/mixed-v0", split="validation", max_cycles=4)
    env.restore(node.snapshot)
    env.step(node.text)
    while env.agents:  # the episode ends on that node (last node) or the dead agents step out
        _, _, term, trunc, _ = env.last(observe=False)
        assert term or trunc
        env.step(None)
    assert env.episode_breakdown["R"] == first.reward


def test_starts_from_snapshots_and_greedy_is_deterministic(team):
    engine = _engine(team, keep_snapshots=True)
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=6, stop=("</answer>",))
    a = engine.run([3], sampling=greedy)
    b = engine.run([3], sampling=greedy)
    assert [n.completion_ids for n in a[0].nodes] == [n.completion_ids for n in b[0].nodes]
    c = engine.run([a[0].nodes[0].snapshot], sampling=greedy)  # branch from the first node
    assert [n.completion_ids for n in c[0].nodes] == [n.completion_ids for n in a[0].nodes]


def test_memory_entries_reach_the_prompt_and_near_identical_queries_reuse_the_action(team):
    from joy_agents.memory import MemoryBank, MemoryConfig
    from joy_env.expert import expert_action

    engine = _engine(team)
    env = engine.prototype
    env.reset(options={"task_index": 0})
    query, action = env.task.query, expert_action(env)
    shown = MemoryBank("master", MemoryConfig(min_similarity=0.5))
    shown.write(query, 0, action, reward=1.0, mu=0.0, now=0)
    # keep the whole system message, where memory goes
    config = RolloutConfig(GenerationSettings(temperature=1.0, max_new_tokens=8, max_cycles=4, max_prompt_tokens=4096))
    engine = RolloutEngine(team, "joy/mixed-v0", "validation", 0, config, progress=False, memory={"master": shown})
    (traj,) = engine.run([0])
    first = traj.nodes[0]
    assert first.memory_ids == (0,) and first.memory_key == query and first.role_turn == 0
    prompt = team.tokenizer_for("master").decode(first.prompt_ids)
    assert "Memory:" in prompt and action[:40] in prompt
    assert shown.stats["hits"] >= 1

    reuse = MemoryBank("master", MemoryConfig(min_similarity=0.5, reuse_similarity=0.99))
    reuse.write(query, 0, action, reward=1.0, mu=0.0, now=0)
    engine.memory = {"master": reuse}
    (traj,) = engine.run([0])
    first = traj.nodes[0]
    assert first.finish_reason == "memory" and first.text == action and not first.trainable
    assert traj.result["nodes"][0]["format_ok"]
