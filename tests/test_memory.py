"""Memory banks: embedder, normal thresholds, write / refresh / evict rules, retrieval ranking, persistence."""

from __future__ import annotations

import math

import pytest

from joy_agents.memory import (
    Z_975,
    HashEmbedder,
    MemoryBank,
    MemoryConfig,
    Outcome,
    evolve,
    make_embedder,
    normal_thresholds,
    render_memories,
)


def test_hash_embedder_is_deterministic_normalised_and_similarity_tracks_overlap():
    e = HashEmbedder(256)
    a, b, c = e.embed(["track order 1234 for alice", "track order 1234 for alice", "weather in Lisbon tomorrow"])
    assert a == b
    assert math.isclose(sum(x * x for x in a), 1.0, rel_tol=1e-9)
    near = e.embed(["track order 1235 for alice"])[0]
    cos = lambda u, v: sum(x * y for x, y in zip(u, v, strict=True))  # noqa: E731
    assert cos(a, near) > 0.7 > cos(a, c)
    assert HashEmbedder(256).embed(["x y"]) == e.embed(["x y"])  # no per-process salt
    with pytest.raises(ValueError, match="embedder"):
        make_embedder("word2vec")


def test_normal_thresholds_are_the_975_and_25_points():
    rewards = [0.0, 1.0, 0.5, 0.25, 0.75]
    mu, sigma, low, high = normal_thresholds(rewards)
    assert mu == pytest.approx(0.5)
    assert sigma == pytest.approx(math.sqrt(sum((r - 0.5) ** 2 for r in rewards) / 5))
    assert high == pytest.approx(mu + Z_975 * sigma) and low == pytest.approx(mu - Z_975 * sigma)
    assert normal_thresholds([1.0, 1.0, 1.0]) is None
    assert normal_thresholds([0.3]) is None


def _outcomes(n_low: int = 30, top: float = 1.0, bottom: float = -1.0, shown: tuple = ()) -> list[Outcome]:
    out = [Outcome("math", f"question {i}", 0, f"act {i}", 0.0) for i in range(n_low)]
    out.append(Outcome("math", "what is 17 * 23", 0, '<tool_call>{"name": "calculator"}</tool_call>', top))
    out.append(Outcome("math", "question bad", 0, "<answer>no</answer>", bottom, retrieved=shown))
    return out


def test_evolve_writes_samples_above_the_975_point_only():
    banks = {"math": MemoryBank("math")}
    counts = evolve(banks, _outcomes(), now=3)
    assert counts["written"] == 1
    (entry,) = banks["math"].entries.values()
    assert entry.key == "what is 17 * 23" and entry.reward == 1.0 and entry.time == 3
    mu = normal_thresholds([o.reward for o in _outcomes()])[0]
    assert entry.margin == pytest.approx(1.0 - mu)


def test_evolve_refreshes_instead_of_duplicating_and_evicts_entries_behind_bad_samples():
    bank = MemoryBank("math")
    banks = {"math": bank}
    evolve(banks, _outcomes(), now=1)
    evolve(banks, _outcomes(), now=2)
    assert len(bank) == 1 and bank.stats["refreshes"] == 1 and next(iter(bank.entries.values())).time == 2
    # the bad sample (below the 2.5% point) was shown entry 0: it goes
    first_id = next(iter(bank.entries))
    bad = [Outcome("math", f"q{i}", 0, "a", 0.0) for i in range(30)] + [
        Outcome("math", "z", 0, "a", -1.0, retrieved=(first_id,))
    ]
    counts = evolve(banks, bad, now=3)
    assert counts["evicted"] == 1 and len(bank) == 0


def test_evolve_ignores_disabled_banks_and_flat_rewards():
    bank = MemoryBank("math", MemoryConfig(enabled=False))
    assert evolve({"math": bank}, _outcomes(), now=1) == {"written": 0, "evicted": 0}
    assert len(bank) == 0
    flat = [Outcome("math", "q", 0, "a", 0.5) for _ in range(10)]
    assert evolve({"math": MemoryBank("math")}, flat, now=1)["written"] == 0


def test_retrieval_filters_by_turn_and_similarity_and_ranks_by_recency_and_margin():
    bank = MemoryBank("qa", MemoryConfig(min_similarity=0.5, top_n=2, half_life=1.0))
    old = bank.write("how long is the return window for shoes", 0, "A", reward=1.0, mu=0.5, now=0)
    new = bank.write("how long is the return window for shoes?", 0, "B", reward=1.0, mu=0.5, now=10)
    bank.write("how long is the return window for shoes", 1, "C", reward=1.0, mu=0.5, now=10)
    bank.write("weather in Lisbon", 0, "D", reward=1.0, mu=0.0, now=10)
    found = bank.retrieve("how long is the return window for shoes", turn=0, now=10)
    assert [e.action for e, _ in found] == ["B", "A"]  # same similarity band: the recent one first
    assert all(e.turn == 0 for e, _ in found) and old.hits == 1 and new.hits == 1
    assert bank.retrieve("completely unrelated text about flights", turn=0, now=10) == []
    assert bank.stats["lookups"] == 2 and bank.stats["hits"] == 1
    # a large reward margin outranks recency
    bank.write("how long is the return window for shoes!!", 0, "E", reward=3.0, mu=0.0, now=0)
    assert bank.retrieve("how long is the return window for shoes", 0, now=10, k=1)[0][0].action == "E"


def test_capacity_drops_the_lowest_scoring_entry_and_round_trip_keeps_everything():
    bank = MemoryBank("general", MemoryConfig(capacity=2))
    bank.write("a b c", 0, "x", 1.0, 0.9, now=0)
    bank.write("d e f", 0, "y", 1.0, 0.0, now=5)
    bank.write("g h i", 0, "z", 1.0, 0.0, now=6)
    assert sorted(e.action for e in bank.entries.values()) == ["y", "z"]
    again = MemoryBank.from_dict(bank.to_dict(), bank.config)
    assert again.to_dict() == bank.to_dict()
    assert again.write("j k l", 0, "w", 1.0, 0.0, now=7).entry_id == 3


def test_render_memories_and_config_validation():
    bank = MemoryBank("math")
    e = bank.write("what is 2 + 2", 0, "<answer>4</answer>", 1.0, 0.0, now=0)
    text = render_memories([e])
    assert "what is 2 + 2" in text and "<answer>4</answer>" in text
    assert render_memories([]) == ""
    with pytest.raises(ValueError, match="z"):
        MemoryConfig(z=0)
    with pytest.raises(ValueError, match="min_similarity"):
        MemoryConfig(min_similarity=2.0)
