"""The QA domain: knowledge base, BM25 search tool, generated questions, policy parts."""

from __future__ import annotations

import json
import random
import re
import string

import pytest

from joy_env.core import SPLITS, Domain, SubTask, Task, ToolContext, ToolError
from joy_env.domains import qa

SAMPLE = 300
SEED = 0


def _norm(text: str) -> str:
    text = "".join(c for c in text.lower() if c not in string.punctuation)
    return " ".join(w for w in text.split() if w not in ("a", "an", "the"))


@pytest.fixture(scope="module")
def ctx() -> ToolContext:
    return ToolContext(db=qa.build_db(SEED))


@pytest.fixture(scope="module")
def samples() -> dict[str, list[Task]]:
    src = qa.task_source(SEED)
    out = {}
    for split in SPLITS:
        step = max(1, src.size(split) // SAMPLE)
        out[split] = [src.task(split, i) for i in range(0, src.size(split), step)][:SAMPLE]
    return out


def _search(ctx: ToolContext, call: dict) -> list[dict]:
    assert call["name"] == "search_kb"
    tool = qa.TOOLS[0]
    assert set(call["arguments"]) <= set(tool.parameters["properties"])
    return tool.fn(ctx, **call["arguments"])


# ------------------------------------------------------------------------------------------ KB and tool


def test_domain_and_schema() -> None:
    dom = qa.domain()
    assert isinstance(dom, Domain) and dom.agent == "qa" and dom.audit == {}
    assert [t.name for t in dom.tools] == ["search_kb"] and not dom.tools[0].writes
    assert "search_kb" in dom.system_prompt
    schema = dom.tools[0].schema()
    json.dumps(schema)
    params = schema["function"]["parameters"]
    assert params["required"] == ["query"]
    assert params["properties"]["top_k"]["minimum"] == 1 and params["properties"]["top_k"]["maximum"] == 10
    conn = dom.build_db(7)
    assert conn.execute("SELECT seed FROM kb_info").fetchone() == (7,)
    conn.serialize()  # the env snapshots databases as images


def test_kb_size_and_content() -> None:
    passages = qa.kb(SEED)
    ids = [p["id"] for p in passages]
    assert len(ids) == len(set(ids)) > 900
    for p in passages:
        assert set(p) == {"id", "title", "text"}
        for value in p.values():
            assert value.isascii() and value.isprintable()
    facts = qa.policy_facts(SEED)
    policy_facts = (
        len(facts["returns"])
        + len(facts["restocking"])
        + len(facts["warranty"])
        + 2 * len(facts["shipping"])
        + 4 * len(facts["tiers"])
        + len(facts["accepted"])
        + len(facts["refused"])
        + 5
    )
    assert policy_facts >= 60
    open_passages = [p for p in passages if not p["id"].startswith("policy-")]
    assert len(open_passages) >= 300
    assert set(facts["returns"]) == set(qa.CATEGORIES)
    for category in ("electronics", "clothing", "shoes", "home", "sports", "books", "beauty"):
        assert category in qa.CATEGORIES  # the shop's catalog categories


def test_kb_determinism() -> None:
    first = qa.kb(SEED)
    qa.world_of.cache_clear()
    assert qa.kb(SEED) == first
    assert qa.kb(SEED + 1) != first
    assert qa.kb(SEED) is not qa.kb(SEED)  # callers get a copy, the cache stays intact


def test_search_kb_tool(ctx: ToolContext) -> None:
    tool = qa.TOOLS[0].fn
    res = tool(ctx, query="return window shoes")
    assert len(res) == 3 and res[0]["title"] == "Returns: Shoes"
    assert len(tool(ctx, query="warranty", top_k=10)) == 10
    assert len(tool(ctx, query="warranty", top_k=1)) == 1
    assert tool(ctx, query="zzzz qqqq") == []
    assert tool(ctx, query="the of and") == []  # only stopwords: no results, not an error
    assert isinstance(tool(ctx, query="'; DROP TABLE kb_info; --"), list)
    assert ctx.db.execute("SELECT seed FROM kb_info").fetchone() == (SEED,)
    for bad in ("", "   "):
        with pytest.raises(ToolError, match="query"):
            tool(ctx, query=bad)
    for bad_k in (0, 11, -3):
        with pytest.raises(ToolError, match="top_k"):
            tool(ctx, query="shipping", top_k=bad_k)
    json.dumps(tool(ctx, query="express shipping cost"))


def test_search_uses_the_seed_of_the_database() -> None:
    query = "capital"
    seed1 = qa.TOOLS[0].fn(ToolContext(db=qa.build_db(1)), query=query)
    assert seed1 == qa.search(1, query)
    assert qa.TOOLS[0].fn(ToolContext(db=None), query=query) == qa.search(qa.DEFAULT_SEED, query)
    assert seed1 != qa.search(0, query)


# --------------------------------------------------------------------------------------------- tasks


def test_gold_retrieval_and_answers(ctx: ToolContext, samples: dict[str, list[Task]]) -> None:
    passages = {p["id"]: p for p in qa.kb(SEED)}
    for split, tasks in samples.items():
        assert len(tasks) == SAMPLE
        for task in tasks:
            assert task.domain == "qa" and task.answer_type == "qa"
            assert re.fullmatch(rf"qa/{split}/\d+", task.task_id)
            (sub,) = task.route
            assert sub.agent == "qa" and sub.query == task.query and sub.answer == task.answer
            assert sub.required_calls == ()
            assert 1 <= len(task.answer.split()) <= 6, task.answer
            assert task.query.isascii() and task.query.isprintable()
            gold = task.meta["passages"]
            assert len(sub.turns) == len(gold) == task.meta["hops"]
            for turn, pid in zip(sub.turns, gold, strict=True):
                (call,) = turn
                ids = [r["id"] for r in _search(ctx, call)]
                assert pid in ids[:3], (task.query, call, ids)
            final = passages[gold[-1]]["text"]
            if task.template == "payment_accepted":
                method = task.meta["method"]
                assert method in final and (task.answer == "yes") == (gold[-1] == "policy-payment-accepted")
            else:
                assert _norm(task.answer) in _norm(final), (task.answer, final)
            if task.meta["hops"] == 2:
                assert task.meta["bridge"] in passages[gold[0]]["text"]
                assert task.meta["bridge"] in sub.turns[1][0]["arguments"]["query"]


def test_questions_alone_retrieve_the_passage(samples: dict[str, list[Task]]) -> None:
    """Searching with the question itself also works (the agent need not know the gold keywords)."""
    for task in samples["validation"]:
        ids = [p["id"] for p in qa.search(SEED, task.query, 3)]
        assert task.meta["passages"][0] in ids


def test_distractors_compete(samples: dict[str, list[Task]]) -> None:
    """The top 3 usually holds look-alike passages of the same kind besides the gold one."""
    alike = total = 0
    for task in samples["train"]:
        for turn, pid in zip(task.route[0].turns, task.meta["passages"], strict=True):
            ids = [r["id"] for r in qa.search(SEED, turn[0]["arguments"]["query"], 3)]
            total += 1
            alike += any(i != pid and i.split("-")[0] == pid.split("-")[0] for i in ids)
    assert alike >= 0.6 * total


def test_template_coverage_and_test_only(samples: dict[str, list[Task]]) -> None:
    seen = {split: {t.template for t in tasks} for split, tasks in samples.items()}
    multi = set(qa.MULTI_HOP_TEMPLATES)
    assert not (seen["train"] | seen["validation"]) & multi
    assert multi <= seen["test"]
    assert len(seen["train"]) >= 25
    share = sum(t.meta["test_only_template"] for t in samples["test"]) / SAMPLE
    assert 0.10 <= share <= 0.25


def test_splits_are_disjoint(samples: dict[str, list[Task]]) -> None:
    def open_passages(split: str) -> set[str]:
        return {p for t in samples[split] for p in t.meta["passages"] if not p.startswith("policy-")}

    def categories(split: str) -> set[str]:
        return {t.meta["category"] for t in samples[split] if "category" in t.meta}

    def policy_questions(split: str) -> set[str]:
        return {t.query for t in samples[split] if t.meta["passages"][0].startswith("policy-")}

    for a, b in (("train", "validation"), ("train", "test"), ("validation", "test")):
        assert not open_passages(a) & open_passages(b)
        assert not categories(a) & categories(b)
        assert not policy_questions(a) & policy_questions(b)
        assert not {t.query for t in samples[a]} & {t.query for t in samples[b]}


def test_determinism_and_errors() -> None:
    a, b = qa.task_source(SEED), qa.task_source(SEED)
    for split in SPLITS:
        for i in (0, 5, a.size(split) - 1):
            assert a.task(split, i) == b.task(split, i)
    assert a.size("train") == 20000 and a.size("validation") == a.size("test") == 2000
    for split, index in (("train", -1), ("train", 20000), ("validation", 2000), ("dev", 0)):
        with pytest.raises(ValueError, match="split|index"):
            a.task(split, index)
    other = qa.task_source(SEED + 1)
    assert [a.task("train", i).query for i in range(20)] != [other.task("train", i).query for i in range(20)]


# --------------------------------------------------------------------------------------------- parts


def test_policy_part(ctx: ToolContext) -> None:
    facts = qa.policy_facts(SEED)
    sub, info = qa.policy_part(random.Random(1), "train", "returns", "shoes")
    assert isinstance(sub, SubTask) and sub.agent == "qa"
    assert info["answer"] == f"{facts['returns']['shoes']} days" == sub.answer
    assert info["question"] == sub.query and "shoes" in sub.query and info["category"] == "shoes"
    assert info["value"] == facts["returns"]["shoes"] and info["unit"] == "days"
    _, info2 = qa.policy_part(random.Random(1), "test", "warranty", "Shoes")  # case-insensitive
    assert info2["category"] == "shoes" and info2["value"] == facts["warranty"]["shoes"]
    _, info3 = qa.policy_part(random.Random(1), "train", "returns", "book")  # singular accepted
    assert info3["category"] == "books"
    for i in range(200):
        topic = qa.TOPICS[i % len(qa.TOPICS)]
        split = SPLITS[i % 3]
        category = qa.CATEGORIES[i % len(qa.CATEGORIES)] if i % 2 else None
        sub, info = qa.policy_part(random.Random(i), split, topic, category)
        assert {"answer", "question", "topic", "category", "query", "passage_id", "value"} <= set(info)
        assert 1 <= len(info["answer"].split()) <= 6
        (call,) = sub.turns[0]
        assert info["passage_id"] in [r["id"] for r in _search(ctx, call)]
        if topic in ("returns", "warranty"):
            assert info["category"] == (category or info["category"]) and info["category"] in qa.CATEGORIES
        else:
            assert info["category"] is None
    with pytest.raises(ValueError, match="topic"):
        qa.policy_part(random.Random(0), "train", "refunds")
    with pytest.raises(ValueError, match="category"):
        qa.policy_part(random.Random(0), "train", "returns", "spaceships")
    with pytest.raises(ValueError, match="split"):
        qa.policy_part(random.Random(0), "dev", "returns")


def test_policy_part_follows_the_seed() -> None:
    sub, info = qa.policy_part(random.Random(0), "train", "returns", "shoes", seed=5)
    assert info["value"] == qa.policy_facts(5)["returns"]["shoes"]
    ids = [r["id"] for r in qa.TOOLS[0].fn(ToolContext(db=qa.build_db(5)), **sub.turns[0][0]["arguments"])]
    assert info["passage_id"] in ids
