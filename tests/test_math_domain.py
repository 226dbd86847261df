"""The math domain: calculator tool, generated word problems, GSM8K loader, collaborative parts."""

from __future__ import annotations

import json
import random
import re
from fractions import Fraction
from pathlib import Path

import pytest

from joy_env.core import SPLITS, Domain, SubTask, Task, ToolContext, ToolError
from joy_env.domains import math as md
from joy_env.domains.math import pools
from joy_env.safe_math import parse_number

FIXTURE = Path(__file__).parent / "data" / "gsm8k_sample.jsonl"
CTX = ToolContext(db=None)
SAMPLE = 300


def _run(call: dict) -> str:
    tool = {t.name: t for t in md.TOOLS}[call["name"]]
    assert set(call["arguments"]) <= set(tool.parameters["properties"])
    return tool.fn(CTX, **call["arguments"])["result"]


def _sample(source: md.MathTaskSource, split: str) -> list[Task]:
    size = source.size(split)
    step = max(1, size // SAMPLE)
    return [source.task(split, i) for i in range(0, size, step)][:SAMPLE]


@pytest.fixture(scope="module")
def source() -> md.MathTaskSource:
    return md.task_source(0)


@pytest.fixture(scope="module")
def samples(source: md.MathTaskSource) -> dict[str, list[Task]]:
    return {split: _sample(source, split) for split in SPLITS}


# ------------------------------------------------------------------------------------------------ tool


def test_domain_and_schema() -> None:
    dom = md.domain()
    assert isinstance(dom, Domain) and dom.agent == "math" and dom.build_db is None
    assert dom.system_prompt == md.SYSTEM_PROMPT and "calculator" in md.SYSTEM_PROMPT
    assert [t.name for t in dom.tools] == ["calculator"]
    schema = md.TOOLS[0].schema()
    json.dumps(schema)
    params = schema["function"]["parameters"]
    assert params["type"] == "object" and params["required"] == ["expression"]
    assert params["properties"]["expression"]["type"] == "string"
    assert not md.TOOLS[0].writes


def test_calculator_tool() -> None:
    calc = md.TOOLS[0].fn
    assert calc(CTX, expression="0.1 + 0.2") == {"result": "0.3"}
    assert calc(CTX, expression="round(10 / 3, 2)") == {"result": "3.33"}
    for bad in ("1/0", "x + 1", "__import__('os')", "9**9**9", "", "DROP TABLE users; --", "1" * 600):
        with pytest.raises(ToolError, match="calculator"):
            calc(CTX, expression=bad)


# ---------------------------------------------------------------------------------------- generated tasks


def test_gold_solutions_are_consistent(samples: dict[str, list[Task]]) -> None:
    for split, tasks in samples.items():
        assert len(tasks) == SAMPLE
        for task in tasks:
            assert task.domain == "math" and task.answer_type == "math"
            assert re.fullmatch(rf"math/{split}/\d+", task.task_id)
            assert len(task.route) == 1
            sub = task.route[0]
            assert sub.agent == "math" and sub.query == task.query and sub.required_calls == ()
            results = []
            for turn in sub.turns:
                assert 1 <= len(turn) <= 2
                for call in turn:
                    results.append(parse_number(_run(call)))
            assert 2 <= len(results) <= 6 and task.meta["steps"] == len(results)
            assert len(sub.turns[-1]) == 1, "the final answer comes from a single last call"
            gold = parse_number(task.answer)
            assert results[-1] == gold
            # exact integer or exact cents, never a rounded intermediate
            assert all((r * 100).denominator == 1 for r in results), task
            assert sub.answer.endswith(f"{task.answer}.") and task.answer in sub.answer
            assert task.query.isascii() and task.query.isprintable()
            assert gold >= 0


def test_results_flow_between_steps(samples: dict[str, list[Task]]) -> None:
    """Later calls use the earlier results (the gold solution is a real chain, not independent sums)."""
    for task in samples["train"][:100]:
        turns = task.route[0].turns
        produced = {_run(c) for c in turns[0]}
        for turn in turns[1:]:
            for call in turn:
                numbers = set(re.findall(r"\d+(?:\.\d+)?", call["arguments"]["expression"]))
                assert numbers & produced or not produced, task
            produced |= {_run(c) for c in turn}


def test_templates_and_distractors(samples: dict[str, list[Task]]) -> None:
    assert len(md.TEMPLATES) >= 10 and len(md.TEST_ONLY_TEMPLATES) >= 2
    seen = {split: {t.template for t in tasks} for split, tasks in samples.items()}
    assert seen["train"] == set(md.TEMPLATES) - set(md.TEST_ONLY_TEMPLATES)
    assert not seen["validation"] & set(md.TEST_ONLY_TEMPLATES)
    assert set(md.TEST_ONLY_TEMPLATES) <= seen["test"]
    share = sum(t.meta["test_only_template"] for t in samples["test"]) / len(samples["test"])
    assert 0.10 <= share <= 0.25
    for t in samples["test"]:
        assert t.meta["test_only_template"] == (t.template in md.TEST_ONLY_TEMPLATES)
    parallel = sum(any(len(turn) == 2 for turn in t.route[0].turns) for t in samples["train"])
    assert parallel > SAMPLE // 10
    distractors = sum(any(d.split("{x}")[0] in t.query for d in md.DISTRACTORS) for t in samples["train"])
    assert SAMPLE // 5 < distractors < SAMPLE * 3 // 5


def test_determinism() -> None:
    a, b = md.task_source(0), md.task_source(0)
    for split in SPLITS:
        for i in (0, 1, 17, b.size(split) - 1):
            assert a.task(split, i) == b.task(split, i)
    other = md.task_source(1)
    assert [a.task("train", i).query for i in range(20)] != [other.task("train", i).query for i in range(20)]


def test_sizes_and_bad_index(source: md.MathTaskSource) -> None:
    assert source.size("train") == 20000 and source.size("validation") == source.size("test") == 2000
    for split, index in (("train", -1), ("train", 20000), ("test", 2000), ("dev", 0), ("train", 1.5)):
        with pytest.raises(ValueError, match="split|index"):
            source.task(split, index)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="split"):
        source.size("dev")


def test_pools_are_disjoint_across_splits() -> None:
    per_split: dict[str, set[str]] = {s: set() for s in SPLITS}
    checked = []
    for name in dir(pools):  # every entity pool of the templates (the distractor sentences are shared)
        value = getattr(pools, name)
        if name.isupper() and isinstance(value, tuple) and name != "DISTRACTORS":
            checked.append(name)
            for split in SPLITS:
                for entry in md.part(value, split):
                    per_split[split].update(entry if isinstance(entry, tuple) else (entry,))
    assert {"FEMALE", "MALE", "GADGETS", "CLUBS", "STORES"} <= set(checked)
    assert not per_split["train"] & per_split["validation"]
    assert not per_split["train"] & per_split["test"]
    assert not per_split["validation"] & per_split["test"]


def test_tasks_use_only_their_split_entities(samples: dict[str, list[Task]]) -> None:
    owner = {}
    for pool in (md.FEMALE, md.MALE, md.GADGETS, md.SCHOOLS, md.TANKS, md.SHARE_ITEMS):
        for split in SPLITS:
            owner.update({entry: split for entry in md.part(pool, split)})
    for split, tasks in samples.items():
        for task in tasks:
            for entry, entry_split in owner.items():
                if re.search(rf"\b{re.escape(entry)}\b", task.query):
                    assert entry_split == split, (split, entry, task.query)


# ------------------------------------------------------------------------------------------------ GSM8K


def test_load_gsm8k_fixture() -> None:
    tasks = md.load_gsm8k(FIXTURE)
    lines = [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]
    assert len(tasks) == len(lines) >= 8
    answers = [t.answer for t in tasks]
    assert answers[1] == "1236" and "1234" in answers and "45" in answers and "2.25" in answers
    for task in tasks:
        assert task.domain == "math" and task.answer_type == "math" and task.template == "gsm8k"
        assert task.query.isascii()
        sub = task.route[0]
        assert sub.agent == "math" and sub.answer == task.answer
        assert task.meta["steps"] == len(sub.turns)
        for turn in sub.turns:
            (call,) = turn
            _run(call)  # every derived call executes
    first = tasks[0].route[0].turns
    assert [t[0]["arguments"]["expression"] for t in first] == ["4*12", "48-30"]
    # "<<3x8=24>>" does not parse: that step is dropped, the rest stays
    pencils = next(t for t in tasks if "pencils" in t.query)
    assert [t[0]["arguments"]["expression"] for t in pencils.route[0].turns] == ["24/2"]
    assert "'" in next(t for t in tasks if "tulips" in t.query).query  # curly quote made ASCII


def test_last_annotation_matches_gold_when_present() -> None:
    for task in md.load_gsm8k(FIXTURE):
        turns = task.route[0].turns
        if turns:
            assert parse_number(_run(turns[-1][0])) == parse_number(task.answer)


def test_gsm8k_task_source() -> None:
    src = md.gsm8k_task_source(FIXTURE, seed=3)
    total = sum(src.size(s) for s in SPLITS)
    assert total == len(md.load_gsm8k(FIXTURE))
    queries = {s: {src.task(s, i).query for i in range(src.size(s))} for s in SPLITS}
    assert not queries["train"] & queries["test"] and not queries["train"] & queries["validation"]
    for split in SPLITS:
        for i in range(src.size(split)):
            assert src.task(split, i).task_id == f"gsm8k/{split}/{i}"
    # the partition depends on the question only, not on the seed or the file order
    other = md.gsm8k_task_source(FIXTURE, seed=4)
    assert {s: {other.task(s, i).query for i in range(other.size(s))} for s in SPLITS} == queries
    with pytest.raises(ValueError, match="index"):
        src.task("train", src.size("train"))


def test_gsm8k_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not found"):
        md.load_gsm8k(tmp_path / "missing.jsonl")
    good = json.dumps({"question": "What is 1 + 1?", "answer": "1 + 1 = <<1+1=2>>2\n#### 2"})
    cases = {
        "not json": "not valid JSON",
        json.dumps(["a", "b"]): "string fields",
        json.dumps({"question": "Q?"}): "string fields",
        json.dumps({"question": "Q?", "answer": 3}): "string fields",
        json.dumps({"question": "Q?", "answer": "no final marker"}): "####",
        json.dumps({"question": "Q?", "answer": "x\n#### seven"}): "not a number",
        json.dumps({"question": "  ", "answer": "x\n#### 7"}): "empty question",
    }
    for bad, message in cases.items():
        path = tmp_path / "bad.jsonl"
        path.write_text(f"{good}\n\n{good}\n{bad}\n")
        with pytest.raises(ValueError, match=message) as info:
            md.load_gsm8k(path)
        assert ":4:" in str(info.value), "the message names the line number"


# ----------------------------------------------------------------------------------------- parts


def test_calc_part() -> None:
    sub, out = md.calc_part(random.Random(0), "train", "What is 12 times 3.5?", "12 * 3.5")
    assert isinstance(sub, SubTask) and sub.agent == "math" and sub.query == "What is 12 times 3.5?"
    assert sub.turns == (({"name": "calculator", "arguments": {"expression": "12 * 3.5"}},),)
    assert out == {"result": "42", "value": 42.0}
    assert "42" in sub.answer
    with pytest.raises(ValueError):
        md.calc_part(random.Random(0), "train", "bad", "1 / 0")


def test_discount_part() -> None:
    percents, shipping = set(), 0
    for i in range(200):
        rng = random.Random(i)
        price, qty = round(random.Random(-i).uniform(1, 300), 2), 1 + i % 6
        sub, out = md.discount_part(rng, "train", price, qty)
        assert sub.agent == "math" and sub.query == out["question"]
        assert "Round to the nearest cent." in sub.query and f"{out['percent']}% discount" in sub.query
        expected = Fraction(str(price)) * qty * (100 - out["percent"]) / 100 + Fraction(str(out["shipping"]))
        assert abs(Fraction(str(out["total"])) - expected) <= Fraction(1, 200)
        assert parse_number(_run(sub.turns[0][0])) == Fraction(str(out["total"]))
        assert out["value"] == out["total"] and f"{out['total']:.2f}" in sub.answer
        percents.add(out["percent"])
        shipping += out["shipping"] > 0
        if out["shipping"]:
            assert f"${out['shipping']:.2f} shipping" in sub.query
    assert len(percents) >= 5 and 40 < shipping < 160
    for bad_price, bad_qty in ((0, 1), (-5.0, 1), (10.0, 0), (10.0, 1.5), (float("nan"), 1)):
        with pytest.raises(ValueError):
            md.discount_part(random.Random(0), "train", bad_price, bad_qty)  # type: ignore[arg-type]


def test_shopping_change_pays_any_total_and_keeps_earlier_tasks() -> None:
    big = 0
    for i in range(4000):
        steps = md.Steps()
        text = md.t_shopping_change(random.Random(i), "train", steps)  # never fails to generate
        m = re.search(r"pays with (?:a \$(\d+) bill|(\d+) \$100 bills)", text)
        assert m, text
        paid = int(m.group(1)) if m.group(1) else 100 * int(m.group(2))
        total = Fraction(steps.results[2])
        assert Fraction(steps.results[-1]) == paid - total and 0 < paid - total <= 100
        if m.group(2):
            big += 1
            assert total >= 200
        else:
            assert total < 200
    assert big  # the seeds above include totals of $200 or more (they used to fail)
