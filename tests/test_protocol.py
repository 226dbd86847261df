"""The action parser and the argument validator."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from joy_env.protocol import (
    MAX_ACTION_CHARS,
    MAX_CALLS_PER_TURN,
    clip,
    format_turn,
    parse_action,
    to_printable,
)
from joy_env.schema import MAX_STRING, validate


def test_parses_tool_calls_in_order_and_ignores_think():
    text = (
        "<think>first weather, then units</think>"
        '<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>\n'
        '<tool_call>{"name": "b", "arguments": {}}</tool_call>'
    )
    p = parse_action(text)
    assert p.valid and p.answer is None
    assert [c["name"] for c in p.calls] == ["a", "b"]
    assert p.calls[0]["arguments"] == {"x": 1}


def test_parses_answer():
    p = parse_action("<think>easy</think> <answer> 42 </answer>")
    assert p.valid and p.answer == "42" and p.calls == []


def test_stringified_arguments_are_accepted():
    p = parse_action('<tool_call>{"name": "a", "arguments": "{\\"x\\": 2}"}</tool_call>')
    assert p.valid and p.calls[0]["arguments"] == {"x": 2}


def test_answer_and_calls_in_one_turn_is_an_error_and_the_answer_is_ignored():
    p = parse_action('<tool_call>{"name": "a", "arguments": {}}</tool_call><answer>1</answer>')
    assert not p.valid and p.answer is None and len(p.calls) == 1


def test_malformed_inputs_become_errors():
    cases = {
        "hello": "no action found",
        "<tool_call>{bad json}</tool_call>": "not valid JSON",
        "<tool_call>[1, 2]</tool_call>": "JSON object",
        '<tool_call>{"arguments": {}}</tool_call>': '"name"',
        '<tool_call>{"name": "a", "arguments": [1]}</tool_call>': "must be a JSON object",
        '<tool_call>{"name": "a", "arguments": {}, "x": 1}</tool_call>': "unknown keys",
        "<tool_call>{": "unclosed",
        "<answer>never closed": "unclosed",
    }
    for text, fragment in cases.items():
        p = parse_action(text)
        assert not p.valid and p.calls == [] and p.answer is None, text
        assert fragment in " ".join(p.errors), (text, p.errors)


def test_an_unclosed_tag_beside_complete_calls_is_an_error_and_the_complete_calls_still_run():
    call = '<tool_call>{"name": "a", "arguments": {}}</tool_call>'
    for text in (call + '\n<tool_call>{"name": "b"', call + "<answer>1", "<answer>1</answer><answer>2"):
        p = parse_action(text)
        assert not p.valid and "unclosed" in " ".join(p.errors), text
    assert parse_action(call + '\n<tool_call>{"name": "b"').calls == [{"name": "a", "arguments": {}}]
    assert parse_action(call + "\n" + call).valid


def test_non_strings_and_huge_actions_are_rejected_without_parsing():
    assert "must be a string" in parse_action(123).errors[0]
    assert "must be a string" in parse_action(None).errors[0]
    p = parse_action("<answer>" + "x" * MAX_ACTION_CHARS + "</answer>")
    assert not p.valid and p.answer is None and "limit" in p.errors[0]


def test_deep_nesting_is_rejected():
    deep = '{"name": "a", "arguments": {"x": ' + "[" * 5000 + "]" * 5000 + "}}"
    p = parse_action(f"<tool_call>{deep}</tool_call>")
    assert not p.valid and p.calls == []
    nested = '{"name": "a", "arguments": {"x": ' + "[" * 30 + "]" * 30 + "}}"
    assert "nested deeper" in parse_action(f"<tool_call>{nested}</tool_call>").errors[0]


def test_too_many_calls_are_cut():
    call = '<tool_call>{"name": "a", "arguments": {}}</tool_call>'
    p = parse_action(call * (MAX_CALLS_PER_TURN + 3))
    assert len(p.calls) == MAX_CALLS_PER_TURN and not p.valid


def test_format_turn_round_trips():
    calls = [{"name": "x", "arguments": {"q": 'a "quoted" <tag>'}}, {"name": "y", "arguments": {"n": 1.5}}]
    assert parse_action(format_turn(calls)).calls == calls
    assert parse_action(format_turn(answer="ok")).answer == "ok"


def test_clip_and_printable():
    assert clip("abc") == "abc"
    assert clip("x" * 500, 10).startswith("x" * 10) and "490 more" in clip("x" * 500, 10)
    assert to_printable("caf\u00e9\x00") == "caf??"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_parser_never_raises(text):
    parse_action(text)
    parse_action(f"<tool_call>{text}</tool_call>")
    parse_action('<tool_call>{"name": "t", "arguments": ' + text + "}</tool_call>")


SCHEMA = {
    "type": "object",
    "properties": {
        "s": {"type": "string", "maxLength": 5},
        "i": {"type": "integer", "minimum": 0, "maximum": 10},
        "n": {"type": "number"},
        "b": {"type": "boolean"},
        "e": {"type": "string", "enum": ["a", "b"]},
        "arr": {"type": "array", "items": {"type": "integer"}},
        "any": {},
    },
    "required": ["s"],
}


def test_schema_accepts_valid_arguments():
    assert validate({"s": "ok", "i": 3, "n": 2, "b": False, "e": "a", "arr": [1, 2], "any": {"x": [1]}}, SCHEMA) == []


def test_schema_rejects_each_violation():
    cases = [
        ({}, "missing the required"),
        ({"s": "toolong"}, "limit is 5"),
        ({"s": 1}, "must be string"),
        ({"s": "a", "i": 1.0}, "must be integer"),
        ({"s": "a", "i": True}, "must be integer"),
        ({"s": "a", "i": 11}, "<= 10"),
        ({"s": "a", "i": -1}, ">= 0"),
        ({"s": "a", "n": "3"}, "must be number"),
        ({"s": "a", "n": float("nan")}, "finite"),
        ({"s": "a", "b": 1}, "must be boolean"),
        ({"s": "a", "e": "c"}, "one of"),
        ({"s": "a", "arr": [1, "x"]}, "arr[1]"),
        ({"s": "a", "zzz": 1}, "unknown argument"),
        ([1], "must be object"),
    ]
    for args, fragment in cases:
        errors = validate(args, SCHEMA)
        assert errors and fragment in " ".join(errors), (args, errors)


def test_schema_caps_strings_and_arrays_regardless_of_schema():
    assert validate("x" * (MAX_STRING + 1), {"type": "string"})
    assert validate(list(range(1000)), {"type": "array"})


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
        lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=5), c, max_size=4),
        max_leaves=30,
    )
)
def test_validate_never_raises(value):
    assert isinstance(validate(value, SCHEMA), list)
    json.dumps(validate({"s": value}, SCHEMA))
