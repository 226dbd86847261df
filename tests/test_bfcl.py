"""Tests of the BFCL v4 loader on small hand-written fixtures (and on the real data if installed)."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest

from joy_env.core import SPLITS, Task
from joy_env.domains import bfcl

DATA = Path(__file__).parent / "data" / "bfcl"


def load(path=DATA, categories=bfcl.DEFAULT_CATEGORIES, **kwargs) -> list[Task]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bfcl.load_bfcl(path, categories, **kwargs)


def by_id(tasks: list[Task]) -> dict[str, Task]:
    return {t.meta["bfcl_id"]: t for t in tasks}


def _fits(value, schema) -> bool:
    """Independent check of a gold argument against a converted schema (the env's rules)."""
    try:
        from joy_env.schema import validate
    except ImportError:  # pragma: no cover - the env's validator is optional here
        return bfcl._fits(value, schema)
    return validate(value, schema) == []


def _gold_matches(task: Task) -> bool:
    """The gold turns satisfy the required calls one to one (the env's matcher when available)."""
    (sub,) = task.route
    calls = [c for turn in sub.turns for c in turn]
    try:
        from joy_env.rewards import score_calls
    except ImportError:  # pragma: no cover
        return len(calls) == len(sub.required_calls)
    return score_calls(calls, list(sub.required_calls), list(task.tools["general"])) == 1.0


# ------------------------------------------------------------------------------------------- conversion


def test_convert_schema_every_type():
    doc = {
        "name": "demo.all_types",
        "description": "Every BFCL type.",
        "parameters": {
            "type": "dict",
            "properties": {
                "d": {
                    "type": "dict",
                    "description": "a dict",
                    "properties": {"x": {"type": "float", "description": "x"}, "y": {"type": "integer"}},
                    "required": ["x", "z"],
                },
                "free": {"type": "dict", "description": "a dict without properties"},
                "f": {"type": "float", "description": "a float", "default": 1.5, "format": "float"},
                "i": {"type": "integer", "description": "an int", "default": "None"},
                "s": {"type": "string", "enum": ["a", "b"], "default": "a", "optional": True},
                "arr": {"type": "array", "items": {"type": "tuple", "items": {"type": "float"}}},
                "b": {"type": "boolean", "default": False},
                "t": {"type": "tuple", "items": {"type": "integer"}},
                "any": {"type": "any", "description": "anything"},
                "long": {"type": "long"},
                "hm": {"type": "HashMap"},
                "odd": {"type": "Widget", "description": "unknown type name"},
            },
            "required": ["d", "f", "missing"],
        },
    }
    out = bfcl.convert_bfcl_schema(doc)
    assert out["type"] == "function"
    fn = out["function"]
    assert fn["name"] == "demo.all_types" and fn["description"] == "Every BFCL type."
    params = fn["parameters"]
    assert params["type"] == "object" and params["required"] == ["d", "f"]
    p = params["properties"]
    assert p["d"] == {
        "type": "object",
        "description": "a dict",
        "properties": {"x": {"type": "number", "description": "x"}, "y": {"type": "integer"}},
        "required": ["x"],
    }
    assert p["free"] == {
        "type": "object",
        "description": "a dict without properties",
        "additionalProperties": True,
    }
    assert p["f"] == {"type": "number", "description": "a float", "default": 1.5}
    assert p["i"] == {"type": "integer", "description": "an int"}  # a default of the wrong type is dropped
    assert p["s"] == {"type": "string", "enum": ["a", "b"], "default": "a"}
    assert p["arr"] == {"type": "array", "items": {"type": "array", "items": {"type": "number"}}}
    assert p["b"] == {"type": "boolean", "default": False}
    assert p["t"] == {"type": "array", "items": {"type": "integer"}}
    assert p["any"] == {"description": "anything"}
    assert p["long"] == {"type": "integer"} and p["hm"]["type"] == "object" and "type" not in p["odd"]
    assert doc["parameters"]["type"] == "dict"  # the input is not modified
    json.dumps(out)
    with pytest.raises(ValueError, match="name"):
        bfcl.convert_bfcl_schema({"description": "no name"})


def test_converted_schema_accepts_values_like_the_env():
    fn = bfcl.convert_bfcl_schema(
        {
            "name": "f",
            "parameters": {
                "type": "dict",
                "properties": {
                    "n": {"type": "float"},
                    "k": {"type": "integer"},
                    "free": {"type": "dict"},
                    "any": {"type": "any"},
                },
            },
        }
    )
    params = fn["function"]["parameters"]
    assert _fits({"n": 3, "k": 2, "free": {"whatever": [1]}, "any": [1, "x"]}, params)
    assert not _fits({"k": 2.5}, params)
    assert not _fits({"n": "3"}, params)
    assert not _fits({"unknown": 1}, params)
    assert not _fits({"n": True}, params)


# ----------------------------------------------------------------------------------------------- loading


def test_load_fixtures_default_categories():
    with pytest.warns(UserWarning, match=r"skipped 1 entries .*simple_python_6.* 1 entries with non-ASCII.* 0 entr"):
        tasks = bfcl.load_bfcl(DATA)
    ids = [t.meta["bfcl_id"] for t in tasks]
    assert ids == [
        "simple_python_0",
        "simple_python_1",
        "simple_python_2",
        "simple_python_3",
        "simple_python_4",
        "multiple_0",
        "multiple_1",
        "parallel_0",
        "parallel_1",
        "parallel_multiple_0",
        "parallel_multiple_1",
    ]
    for t in tasks:
        assert t.domain == "general" and t.answer_type == "none" and t.answer == "done"
        assert t.task_id == f"bfcl/{t.meta['bfcl_id']}" and t.meta["source"] == "bfcl"
        assert t.meta["category"] in bfcl.DEFAULT_CATEGORIES and t.template == f"bfcl_{t.meta['category']}"
        (sub,) = t.route
        assert sub.agent == "general" and sub.strict_calls and sub.answer == "done" and sub.query == t.query
        assert len(sub.turns) == 1 and len(sub.turns[0]) == len(sub.required_calls)
        assert t.query.isascii()
        schemas = {s["function"]["name"]: s["function"] for s in t.tools["general"]}
        for c in sub.turns[0]:
            assert _fits(c["arguments"], schemas[c["name"]]["parameters"]), (t.task_id, c)
        assert _gold_matches(t), t.task_id
    t = by_id(tasks)
    assert t["simple_python_0"].meta["category"] == "simple"
    assert t["parallel_1"].route[0].required_calls == (
        {"math.factorial": {"number": [5]}},
        {"math.factorial": {"number": [7]}},
    )
    assert [c["name"] for c in t["parallel_1"].route[0].turns[0]] == ["math.factorial", "math.factorial"]
    assert [s["function"]["name"] for s in t["multiple_0"].tools["general"]] == [
        "units.convert_mass",
        "units.convert_length",
    ]


def test_gold_values_choice():
    t = by_id(load())

    def args(i):
        return t[i].route[0].turns[0][0]["arguments"]

    assert args("simple_python_0") == {"radius": 4, "unit": "meters"}  # first acceptable non-"" value
    assert args("simple_python_1") == {"point_a": [1.5, 2.0], "point_b": [4.0, 6.0], "precision": 2}  # tuples
    # nested dict form resolved, "" / None-only arguments left out, typographic quote made ASCII everywhere
    assert args("simple_python_2") == {
        "restaurant": "Luigi's",
        "party": {"size": 4, "outdoor": True},
        "time": "19:00",
    }
    assert t["simple_python_2"].query == "Book a table for 4 at Luigi's at 19:00, outside if possible."
    assert t["simple_python_2"].route[0].required_calls[0]["restaurant.book_table"]["restaurant"] == [
        "Luigi's",
        "Luigis",
    ]
    # list of dicts, each in nested form
    assert args("simple_python_3")["keys"] == [
        {"column": "age", "order": "desc"},
        {"column": "name", "order": "asc"},
    ]
    # accents stripped consistently in query and ground truth
    assert "Zurich" in t["simple_python_4"].query and args("simple_python_4") == {"city": "Zurich"}
    assert t["simple_python_4"].route[0].required_calls[0]["weather.current"]["city"] == ["Zurich", "Zurich"]
    assert args("multiple_1") == {"company": "Acme Corp", "limit": 3}


def test_non_ascii_kept_when_asked():
    t = by_id(load(categories=("simple",), ascii_only=False))
    assert "simple_python_5" in t and "\u00fc" in t["simple_python_4"].query


def test_too_long_queries_are_skipped(monkeypatch):
    monkeypatch.setattr(bfcl, "MAX_QUERY", 40)
    with pytest.warns(UserWarning, match=r"2 entries longer than 40 characters \['parallel_multiple_0'"):
        tasks = bfcl.load_bfcl(DATA, ("parallel_multiple",))
    assert tasks == []


def test_system_message_and_live_category():
    t = by_id(load(categories=("live_simple",)))
    assert t["live_simple_0-0-0"].query == (
        "You are a cinema assistant. Use your functions to answer.\n\nlist movies in Mumbai?"
    )
    assert t["live_simple_0-0-0"].meta["category"] == "live_simple"
    assert t["live_simple_1-0-1"].route[0].turns[0][0]["arguments"] == {"city": "Pune", "language": "Hindi"}


def test_categories_selection():
    assert {t.meta["category"] for t in load(categories=("parallel",))} == {"parallel"}
    assert len(load(categories="multiple")) == 2  # a single name is accepted
    both = load(categories=("simple", "simple_python"))  # the same file, loaded once
    assert len(both) == len({t.task_id for t in both}) == 5
    assert [t.meta["category"] for t in load(categories=("parallel_multiple", "parallel"))][:2] == [
        "parallel_multiple",
        "parallel_multiple",
    ]


def test_simple_file_name_of_older_layout(tmp_path):
    (tmp_path / "possible_answer").mkdir()
    shutil.copy(DATA / "BFCL_v4_parallel.json", tmp_path / "BFCL_v4_simple.json")
    shutil.copy(
        DATA / "possible_answer" / "BFCL_v4_parallel.json",
        tmp_path / "possible_answer" / "BFCL_v4_simple.json",
    )
    tasks = load(tmp_path, ("simple",))
    assert [t.meta["bfcl_id"] for t in tasks] == ["parallel_0", "parallel_1"]


# ------------------------------------------------------------------------------------------------ errors


def test_errors_name_the_path_files_and_categories(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match="nowhere") as info:
        bfcl.load_bfcl(missing)
    assert "BFCL_v4_multiple.json" in str(info.value) and "possible_answer" in str(info.value)
    with pytest.raises(ValueError, match="unknown BFCL category 'simpel'.*valid categories: simple, simple_python"):
        bfcl.load_bfcl(DATA, ("simpel",))
    with pytest.raises(ValueError, match="no BFCL category"):
        bfcl.load_bfcl(DATA, ())
    with pytest.raises(FileNotFoundError, match=r"BFCL_v4_live_multiple\.json.*valid categories"):
        bfcl.load_bfcl(DATA, ("live_multiple",))
    # question file present, answers missing
    shutil.copy(DATA / "BFCL_v4_multiple.json", tmp_path / "BFCL_v4_multiple.json")
    with pytest.raises(FileNotFoundError, match=r"possible_answer[/\\]BFCL_v4_multiple\.json"):
        bfcl.load_bfcl(tmp_path, ("multiple",))
    # a broken line, and an entry without ground truth
    (tmp_path / "possible_answer").mkdir()
    (tmp_path / "possible_answer" / "BFCL_v4_multiple.json").write_text('{"id": "multiple_0", "ground_truth": []}\n')
    with pytest.raises(ValueError, match="multiple_1.*no ground truth"):
        bfcl.load_bfcl(tmp_path, ("multiple",))
    (tmp_path / "BFCL_v4_multiple.json").write_text('{"id": "multiple_0", "question": [[\n')
    with pytest.raises(ValueError, match=r"BFCL_v4_multiple\.json:1: not valid JSON"):
        bfcl.load_bfcl(tmp_path, ("multiple",))


# ------------------------------------------------------------------------------------------------ source


def test_task_source_splits():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        src = bfcl.bfcl_task_source(DATA, bfcl.VALID_CATEGORIES[:5] + ("live_simple",), seed=0)
        again = bfcl.bfcl_task_source(DATA, bfcl.VALID_CATEGORIES[:5] + ("live_simple",), seed=0)
        shuffled = bfcl.bfcl_task_source(DATA, bfcl.VALID_CATEGORIES[:5] + ("live_simple",), seed=1)
    sizes = {s: src.size(s) for s in SPLITS}
    assert sum(sizes.values()) == 13
    seen = {}
    for split in SPLITS:
        for i in range(src.size(split)):
            t = src.task(split, i)
            assert t.task_id == f"bfcl/{split}/{i}" and t == again.task(split, i)
            seen[t.meta["bfcl_id"]] = split
    assert len(seen) == 13
    # the split of an entry depends on its id only (not on the seed or on the other categories)
    for split in SPLITS:
        assert {shuffled.task(split, i).meta["bfcl_id"] for i in range(shuffled.size(split))} == {
            k for k, v in seen.items() if v == split
        }
    only_parallel = bfcl.bfcl_task_source(DATA, ("parallel",), seed=5)
    for split in SPLITS:
        for i in range(only_parallel.size(split)):
            assert seen[only_parallel.task(split, i).meta["bfcl_id"]] == split
    assert bfcl._bucket("x") in SPLITS
    with pytest.raises(ValueError, match="out of range"):
        src.task("train", src.size("train"))
    with pytest.raises(ValueError, match="unknown split"):
        src.size("dev")


def test_split_proportions_on_many_ids():
    counts = {s: 0 for s in SPLITS}
    for i in range(5000):
        counts[bfcl._bucket(f"simple_python_{i}")] += 1
    assert 0.77 < counts["train"] / 5000 < 0.83 and 0.08 < counts["test"] / 5000 < 0.12


def test_find_bfcl_data_and_default_path(monkeypatch):
    found = bfcl.find_bfcl_data()
    assert found is None or (found / "possible_answer").is_dir()
    monkeypatch.setattr(bfcl, "find_bfcl_data", lambda: None)
    with pytest.raises(FileNotFoundError, match="bfcl-eval"):
        bfcl.bfcl_task_source()


@pytest.mark.skipif(bfcl.find_bfcl_data() is None, reason="bfcl-eval is not installed")
def test_real_bfcl_data():
    path = bfcl.find_bfcl_data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tasks = bfcl.load_bfcl(path)
    assert len(tasks) > 900
    assert {t.meta["category"] for t in tasks} == set(bfcl.DEFAULT_CATEGORIES)
    assert any("." in s["function"]["name"] for t in tasks for s in t.tools["general"])
    for t in tasks:
        (sub,) = t.route
        schemas = {s["function"]["name"]: s["function"] for s in t.tools["general"]}
        for c in sub.turns[0]:
            assert _fits(c["arguments"], schemas[c["name"]]["parameters"]), (t.task_id, c)
        assert _gold_matches(t), t.task_id
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        src = bfcl.bfcl_task_source(None, bfcl.DEFAULT_CATEGORIES, seed=0)
    assert src.size("train") > 700 and src.size("test") > 60
