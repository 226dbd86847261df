"""The public scoring functions and the reward configuration."""

import pytest

from joy_env.rewards import RewardConfig, extract_number, score_answer, score_calls, score_facts, token_f1


@pytest.mark.parametrize(
    "prediction,gold",
    [
        ("The answer is 42.", "42"),
        ("$1,234.50", "1234.5"),
        ("It costs 18.0 dollars", "18"),
        ("\\boxed{7}", "7"),
        ("work... #### 1,000", "1000"),
        ("A: 12 apples", "12"),
        ("-3 degrees", "-3"),
        ("3/4", "0.75"),
        ("first 5 then 9 km", "9"),
    ],
)
def test_math_answers_match(prediction, gold):
    assert score_answer(prediction, gold, "math") == 1.0


@pytest.mark.parametrize("prediction,gold", [("41", "42"), ("no number", "3"), ("12.5", "125"), ("", "0")])
def test_math_answers_differ(prediction, gold):
    assert score_answer(prediction, gold, "math") == 0.0


def test_extract_number_prefers_boxed_and_hashes():
    assert extract_number("2 and \\boxed{5} and 9") == 5
    assert extract_number("x 3 #### 8") == 8
    assert extract_number("2026-06-01") is not None  # a date still yields a number, never raises


def test_qa_exact_match_and_f1():
    assert score_answer("The Eiffel Tower", "eiffel tower", "qa") == 1.0
    assert score_answer("30 days.", "30 days", "qa") == 1.0
    f1 = score_answer("within 30 days of delivery", "30 days", "qa")
    assert 0 < f1 < 1 and f1 == pytest.approx(token_f1("within 30 days of delivery", "30 days"))
    assert score_answer("no idea", "30 days", "qa") == 0.0


def test_facts_are_matched_on_word_boundaries_with_canonical_numbers():
    answer = "Order O30012 is Shipped; total $1,299.50 via UPS."
    assert score_facts(answer, ["o30012", "shipped", "1299.5"]) == 1.0
    assert score_facts(answer, ["O3001"]) == 0.0  # a prefix of an id is not the id
    assert score_facts("costs $200.03", ["200.00"]) == 0.0  # 200 is not 200.03
    assert score_facts("costs $1.5", ["5"]) == 0.0
    assert score_facts("costs $200.", ["200.00"]) == 1.0
    assert score_facts(answer, ["1299.5", "delivered"]) == 0.5
    assert score_answer(answer, "O30012\nshipped", "ecommerce") == 1.0


def test_unknown_domain_is_an_error():
    with pytest.raises(ValueError, match="valid"):
        score_answer("1", "1", "chemistry")


GOLD = [{"get_weather": {"city": ["Paris", "Paris, France"], "unit": ["", "celsius"]}}]


def test_score_calls_acceptable_values_and_optional_args():
    assert score_calls([{"name": "get_weather", "arguments": {"city": "paris"}}], GOLD) == 1.0
    assert (
        score_calls([{"name": "get_weather", "arguments": {"city": "Paris, France", "unit": "celsius"}}], GOLD) == 1.0
    )
    assert score_calls([{"name": "get_weather", "arguments": {"city": "Lyon"}}], GOLD) == 0.0
    assert score_calls([{"name": "get_weather", "arguments": {}}], GOLD) == 0.0  # city is required
    assert score_calls([{"name": "get_weather", "arguments": {"city": "Paris", "x": 1}}], GOLD) == 0.0


def test_score_calls_types_follow_bfcl_rules():
    gold = [{"f": {"x": [2.0], "n": [3]}}]
    functions = [{"name": "f", "parameters": {"properties": {"x": {"type": "number"}, "n": {"type": "integer"}}}}]
    assert score_calls([{"name": "f", "arguments": {"x": 2, "n": 3}}], gold, functions) == 1.0  # int for float
    assert score_calls([{"name": "f", "arguments": {"x": 2.0, "n": 3.0}}], gold, functions) == 0.0  # float for int
    assert score_calls([{"name": "f", "arguments": {"x": "2", "n": 3}}], gold, functions) == 0.0  # str for number


def test_score_calls_counts_matching_and_extra_calls():
    gold = [{"a": {"x": [1]}}, {"b": {"y": ["q"]}}]
    p_a = {"name": "a", "arguments": {"x": 1}}
    p_b = {"name": "b", "arguments": {"y": "Q"}}
    assert score_calls([p_b, p_a], gold) == 1.0
    assert score_calls([p_b, p_a], gold, ordered=True) == 0.0
    assert score_calls([p_a], gold) == 0.5
    assert score_calls([p_a, p_b, p_a], gold) == pytest.approx(2 / 3)
    assert score_calls([p_a, p_b, p_a], gold, allow_extra=True) == 1.0
    assert score_calls([], []) == 1.0
    assert score_calls([p_a], []) == 0.0


def test_score_calls_nested_values():
    gold = [{"f": {"opts": [{"k": ["v"], "o": ["", 1]}], "xs": [[1, 2]]}}]
    assert score_calls([{"name": "f", "arguments": {"opts": {"k": "v"}, "xs": [1, 2]}}], gold) == 1.0
    assert score_calls([{"name": "f", "arguments": {"opts": {"k": "v", "z": 1}, "xs": [1, 2]}}], gold) == 0.0
    assert score_calls([{"name": "f", "arguments": {"opts": {"k": "v"}, "xs": [2, 1]}}], gold) == 0.0


def test_score_calls_tolerates_garbage():
    assert score_calls([{"name": None}, "x", {"name": "a", "arguments": "s"}], [{"a": {}}]) == 0.0


def test_reward_config_validation():
    with pytest.raises(ValueError, match="format_weight"):
        RewardConfig(format_weight=-1)
    with pytest.raises(ValueError, match="turn_cost"):
        RewardConfig(turn_cost=float("nan"))


def test_partial_credit_blends_product_and_mean_of_checks():
    checks = {"route": 1.0, "calls": 0.5, "db": 1.0, "answer": 0.0}
    assert RewardConfig().accuracy(checks, answered=True) == 0.0
    assert RewardConfig().accuracy({**checks, "answer": 0.5}, answered=True) == pytest.approx(0.25)  # the product
    assert RewardConfig(partial_credit=1.0).accuracy(checks, answered=True) == pytest.approx(2.5 / 4)
    assert RewardConfig(partial_credit=0.4).accuracy(checks, answered=True) == pytest.approx(0.4 * 2.5 / 4)
    all_hold = dict.fromkeys(checks, 1.0)
    assert RewardConfig(partial_credit=0.4).accuracy(all_hold, answered=True) == pytest.approx(1.0)
    assert RewardConfig(partial_credit=1.0).accuracy(all_hold, answered=False) == 0.0  # no final answer: no credit
    with pytest.raises(ValueError, match="partial_credit"):
        RewardConfig(partial_credit=1.5)
    with pytest.raises(ValueError, match="partial_credit"):
        RewardConfig(partial_credit=True)
