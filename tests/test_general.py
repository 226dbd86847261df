"""Tests of the general tool-calling domain: tools, errors, determinism, splits and gold solutions."""

from __future__ import annotations

import collections
import json
import random
import re
import string

import pytest

from joy_env.core import SPLITS, SubTask, Task, ToolError
from joy_env.domains import general as g

TOOLS = {t.name: t for t in g.TOOLS}
_SUPPORTED_KEYWORDS = {
    "type",
    "properties",
    "required",
    "enum",
    "items",
    "minimum",
    "maximum",
    "maxLength",
    "default",
    "description",
}


def call(name: str, **arguments):
    return TOOLS[name].fn(None, **arguments)


# ------------------------------------------------------------------------------------------ local checks


def _schema_errors(value, schema, path="args") -> list[str]:
    """A small validator of the schema subset the env supports (types, enum, bounds, unknown keys)."""
    kind = schema.get("type")
    py = {
        "string": str,
        "integer": int,
        "number": (int, float),
        "boolean": bool,
        "array": list,
        "object": dict,
    }
    if kind is not None:
        if isinstance(value, bool) and kind != "boolean":
            return [f"{path}: bool for {kind}"]
        if not isinstance(value, py[kind]):
            return [f"{path}: {type(value).__name__} for {kind}"]
    errors = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not in enum")
    if isinstance(value, str) and len(value) > schema.get("maxLength", 10**9):
        errors.append(f"{path}: too long")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < schema.get("minimum", -float("inf")) or value > schema.get("maximum", float("inf")):
            errors.append(f"{path}: out of bounds")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        errors += [f"{path}: missing {k}" for k in schema.get("required", []) if k not in value]
        for k, v in value.items():
            if k not in props:
                errors.append(f"{path}: unknown {k}")
            else:
                errors += _schema_errors(v, props[k], f"{path}.{k}")
    return errors


def _norm(value):
    if isinstance(value, str):
        return value.strip().strip(string.punctuation + " ").lower()
    return value


def _arg_ok(value, acceptable) -> bool:
    for a in acceptable:
        if a == "":
            continue
        if isinstance(a, bool) or isinstance(value, bool):
            if value is a:
                return True
        elif isinstance(a, (int, float)) and isinstance(value, (int, float)):
            if float(a) == float(value):
                return True
        elif isinstance(a, str) and isinstance(value, str) and _norm(a) == _norm(value):
            return True
    return False


def call_matches(executed: dict, required: dict) -> bool:
    ((name, args),) = required.items()
    if executed["name"] != name:
        return False
    given = executed["arguments"]
    if any(k not in args for k in given):
        return False
    for arg, acceptable in args.items():
        if arg not in given:
            if "" not in acceptable:
                return False
        elif not _arg_ok(given[arg], acceptable):
            return False
    return True


def required_satisfied(executed: list[dict], required: list[dict]) -> bool:
    """Every required call is matched by a distinct executed call (backtracking assignment)."""

    def assign(i: int, used: frozenset[int]) -> bool:
        if i == len(required):
            return True
        return any(
            j not in used and call_matches(c, required[i]) and assign(i + 1, used | {j}) for j, c in enumerate(executed)
        )

    return assign(0, frozenset())


def fact_text(text: str) -> str:
    text = text.lower().replace("$", " ")
    text = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)
    return " ".join(text.split())


def has_fact(text: str, fact: str) -> bool:
    f = fact_text(fact)
    return re.search(r"(?<![a-z0-9])" + re.escape(f) + r"(?![a-z0-9])", fact_text(text)) is not None


def run_gold(sub: SubTask) -> list[dict]:
    """Execute the gold turns; returns the executed calls with their results."""
    executed = []
    for turn in sub.turns:
        assert turn, "empty turn"
        for c in turn:
            tool = TOOLS[c["name"]]
            assert _schema_errors(c["arguments"], tool.parameters) == [], (c, tool.parameters)
            result = tool.fn(None, **c["arguments"])
            json.dumps(result)
            executed.append({"name": c["name"], "arguments": c["arguments"], "result": result})
    return executed


def _printable(text: str) -> bool:
    return all(ch in string.printable for ch in text)


# ------------------------------------------------------------------------------------------------ domain


def test_domain_and_tool_schemas():
    d = g.domain()
    assert d.agent == "general" and d.build_db is None and d.tools == g.TOOLS
    assert "general" in d.system_prompt and _printable(d.system_prompt)
    assert len(g.TOOLS) >= 10 and len(TOOLS) == len(g.TOOLS)
    assert "calculator" not in TOOLS
    for tool in g.TOOLS:
        assert not tool.writes
        schema = tool.schema()
        assert schema["type"] == "function" and schema["function"]["name"] == tool.name
        params = tool.parameters
        assert params["type"] == "object"
        assert set(params["required"]) <= set(params["properties"])
        for prop in params["properties"].values():
            assert set(prop) <= _SUPPORTED_KEYWORDS
            assert prop["type"] in ("string", "number", "integer")
            assert prop.get("description")
            if "default" in prop:
                assert _schema_errors(prop["default"], prop) == []
        json.dumps(schema)
        assert _printable(json.dumps(schema))


# ------------------------------------------------------------------------------------------------- tools


def test_get_weather():
    w = call("get_weather", city="Paris", date="2025-07-14")
    assert set(w) >= {"city", "date", "condition", "high_c", "low_c", "precipitation_chance"}
    assert w["city"] == "Paris" and w["date"] == "2025-07-14"
    assert isinstance(w["high_c"], int) and w["low_c"] < w["high_c"]
    assert w == call("get_weather", city="  paris, France ", date="2025-07-14")
    assert call("get_weather", city="NYC", date="2025-01-02") == call("get_weather", city="New York", date="2025-01-02")
    assert call("get_weather", city="S\u00e3o Paulo", date="2025-01-02")["city"] == "Sao Paulo"
    assert call("get_weather", city="st johns", date="2025-01-02")["city"] == "St. John's"

    # seasons: Oslo is warmer in July than in January on average; Sydney the other way round
    def mean_high(city, month):
        return sum(call("get_weather", city=city, date=f"2025-{month:02d}-{d:02d}")["high_c"] for d in range(1, 29))

    assert mean_high("Oslo", 7) > mean_high("Oslo", 1) + 100
    assert mean_high("Sydney", 1) > mean_high("Sydney", 7) + 50
    conditions = {call("get_weather", city="London", date=f"2025-03-{d:02d}")["condition"] for d in range(1, 32)}
    assert len(conditions) >= 3


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"city": "Gotham", "date": "2025-01-01"}, "Unknown city"),
        ({"city": "Pariss", "date": "2025-01-01"}, "Did you mean Paris"),
        ({"city": "", "date": "2025-01-01"}, "non-empty"),
        ({"city": "Paris", "date": "01/02/2025"}, "YYYY-MM-DD"),
        ({"city": "Paris", "date": "2025-02-30"}, "not a valid calendar date"),
        ({"city": "Paris", "date": "1999-12-31"}, "out of range"),
    ],
)
def test_get_weather_errors(kwargs, message):
    with pytest.raises(ToolError, match=message) as info:
        call("get_weather", **kwargs)
    assert _printable(str(info.value))
    if message.startswith("Unknown"):
        assert "Known city values include" in str(info.value)


@pytest.mark.parametrize(
    "value, src, dst, expected",
    [
        (1, "mi", "km", 1.6093),
        (5, "miles", "kilometers", 8.0467),
        (100, "C", "F", 212),
        (32, "fahrenheit", "celsius", 0),
        (0, "K", "C", -273.15),
        (300, "K", "F", 80.33),
        (1, "lb", "g", 453.5924),
        (16, "oz", "lb", 1),
        (1, "gal", "L", 3.7854),
        (2, "cups", "fl oz", 16),
        (1, "m3", "L", 1000),
        (12, "in", "ft", 1),
        (2.5, "t", "kg", 2500),
    ],
)
def test_convert_units(value, src, dst, expected):
    r = call("convert_units", value=value, from_unit=src, to_unit=dst)
    assert r["result"] == pytest.approx(expected, abs=1e-9)
    assert r["from_unit"] in g.world_tables()["unit_by_code"] and r["to_unit"] in g.world_tables()["unit_by_code"]
    assert isinstance(r["result"], int) == float(expected).is_integer()


def test_convert_units_errors():
    with pytest.raises(ToolError, match="same quantity"):
        call("convert_units", value=1, from_unit="km", to_unit="kg")
    with pytest.raises(ToolError, match="Unknown unit"):
        call("convert_units", value=1, from_unit="furlong", to_unit="m")
    with pytest.raises(ToolError, match="absolute zero"):
        call("convert_units", value=-500, from_unit="F", to_unit="C")
    with pytest.raises(ToolError, match="negative"):
        call("convert_units", value=-3, from_unit="kg", to_unit="lb")
    with pytest.raises(ToolError, match="finite"):
        call("convert_units", value=float("nan"), from_unit="kg", to_unit="lb")
    with pytest.raises(ToolError, match="between"):
        call("convert_units", value=1e300, from_unit="kg", to_unit="lb")


def test_currency_tools():
    r = call("convert_currency", amount=100, from_currency="USD", to_currency="EUR")
    assert r == {"amount": 100, "from_currency": "USD", "to_currency": "EUR", "rate": 0.92, "converted": 92}
    back = call("convert_currency", amount=92, from_currency="eur", to_currency="usd")
    assert back["converted"] == 100
    assert call("convert_currency", amount=10, from_currency="euros", to_currency="Japanese yen")["converted"] == (
        pytest.approx(10 * 151.2 / 0.92, abs=0.006)
    )
    assert call("convert_currency", amount=12.5, from_currency="GBP", to_currency="GBP")["converted"] == 12.5
    rate = call("get_exchange_rate", from_currency="USD", to_currency="JPY")
    assert rate["rate"] == 151.2 and rate["inverse_rate"] == pytest.approx(1 / 151.2, abs=1e-6)
    with pytest.raises(ToolError, match="Unknown currency.*USD, EUR"):
        call("convert_currency", amount=1, from_currency="XYZ", to_currency="USD")
    with pytest.raises(ToolError, match="between 0"):
        call("convert_currency", amount=-1, from_currency="USD", to_currency="EUR")
    with pytest.raises(ToolError):
        call("get_exchange_rate", from_currency="USD", to_currency="dollars of Mars")


def test_date_tools():
    assert call("date_diff", start_date="2025-01-01", end_date="2025-03-01")["days"] == 59
    assert call("date_diff", start_date="2024-02-28", end_date="2024-03-01")["days"] == 2
    assert call("date_diff", start_date="2025-03-01", end_date="2025-01-01")["days"] == -59
    r = call("add_days", date="2024-12-31", days=1)
    assert r == {"date": "2024-12-31", "days": 1, "result_date": "2025-01-01", "weekday": "Wednesday"}
    assert call("add_days", date="2025-03-01", days=-1)["result_date"] == "2025-02-28"
    with pytest.raises(ToolError, match="out of range"):
        call("add_days", date="2099-01-01", days=36500)
    with pytest.raises(ToolError, match="integer"):
        call("add_days", date="2025-01-01", days=True)
    with pytest.raises(ToolError, match="YYYY-MM-DD"):
        call("date_diff", start_date="yesterday", end_date="2025-01-01")


def test_convert_timezone():
    r = call("convert_timezone", time="09:00", date="2025-06-01", from_tz="Tokyo", to_tz="London")
    assert (r["converted_time"], r["converted_date"], r["day_shift"]) == ("00:00", "2025-06-01", 0)
    r = call("convert_timezone", time="23:30", date="2025-12-31", from_tz="New York", to_tz="JST")
    assert (r["converted_time"], r["converted_date"], r["day_shift"]) == ("13:30", "2026-01-01", 1)
    r = call("convert_timezone", time="05:30", date="2025-06-01", from_tz="IST", to_tz="UTC")
    assert r["converted_time"] == "00:00" and r["from_utc_offset"] == "UTC+05:30"
    r = call("convert_timezone", time="9:15 pm", date="2025-06-01", from_tz="UTC-03:30", to_tz="utc+5:45")
    assert r["time"] == "21:15" and r["converted_time"] == "06:30" and r["converted_date"] == "2025-06-02"
    r = call("convert_timezone", time="00:10", date="2025-03-01", from_tz="UTC", to_tz="Honolulu")
    assert (r["converted_time"], r["converted_date"], r["day_shift"]) == ("14:10", "2025-02-28", -1)
    for bad, msg in (("25:00", "valid time"), ("noon", "HH:MM"), ("13:00 pm", "1-12")):
        with pytest.raises(ToolError, match=msg):
            call("convert_timezone", time=bad, date="2025-06-01", from_tz="UTC", to_tz="CET")
    with pytest.raises(ToolError, match="Unknown time zone.*UTC\\+05:30"):
        call("convert_timezone", time="10:00", date="2025-06-01", from_tz="Mars/Olympus", to_tz="CET")
    with pytest.raises(ToolError, match="UTC offset"):
        call("convert_timezone", time="10:00", date="2025-06-01", from_tz="UTC+15", to_tz="CET")


def test_get_stock_quote():
    q = call("get_stock_quote", symbol="AQNX", date="2025-03-04")
    assert q["symbol"] == "AQNX" and q["company"] == "Aquanex Systems" and q["currency"] == "USD"
    assert q["low"] <= min(q["open"], q["close"]) <= max(q["open"], q["close"]) <= q["high"]
    assert q == call("get_stock_quote", symbol=" aqnx ", date="2025-03-04")
    assert q == call("get_stock_quote", symbol="Aquanex Systems", date="2025-03-04")
    closes = {call("get_stock_quote", symbol="AQNX", date=f"2025-03-{d:02d}")["close"] for d in (3, 4, 5, 6, 7)}
    assert len(closes) == 5
    with pytest.raises(ToolError, match="Saturday.*weekday"):
        call("get_stock_quote", symbol="AQNX", date="2025-03-01")
    with pytest.raises(ToolError, match="Unknown symbol.*AQNX"):
        call("get_stock_quote", symbol="AAPL", date="2025-03-04")


def test_search_flights():
    r = call("search_flights", origin="Madrid", destination="Rome", date="2025-05-20")
    flights = r["flights"]
    assert r["currency"] == "USD" and 3 <= r["count"] == len(flights) <= 5
    prices = [f["price"] for f in flights]
    assert prices == sorted(prices) and len(set(prices)) == len(prices)
    assert len({f["flight_number"] for f in flights}) == len(flights)
    for f in flights:
        assert re.fullmatch(r"[A-Z]{2}\d{3,4}", f["flight_number"])
        assert re.fullmatch(r"\d\d:\d\d", f["depart_time"]) and re.fullmatch(r"\d\d:\d\d", f["arrive_time"])
        assert f["duration_min"] > 0 and f["price"] > 0
    by_departure = call("search_flights", origin="Madrid", destination="Rome", date="2025-05-20", sort_by="departure")
    assert [f["depart_time"] for f in by_departure["flights"]] == sorted(f["depart_time"] for f in flights)
    cheap = call("search_flights", origin="Madrid", destination="Rome", date="2025-05-20", max_price=prices[1])
    assert [f["price"] for f in cheap["flights"]] == prices[:2]
    none = call("search_flights", origin="Madrid", destination="Rome", date="2025-05-20", max_price=1)
    assert none["flights"] == [] and none["count"] == 0
    long_haul = call("search_flights", origin="London", destination="Sydney", date="2025-05-20")
    assert min(f["price"] for f in long_haul["flights"]) > max(prices)
    with pytest.raises(ToolError, match="same city"):
        call("search_flights", origin="Rome", destination="rome, italy", date="2025-05-20")
    with pytest.raises(ToolError, match="sort_by"):
        call(
            "search_flights",
            origin="Madrid",
            destination="Rome",
            date="2025-05-20",
            sort_by="name; DROP TABLE",
        )


def test_dictionary_population_country_distance():
    assert len(g.world_tables()["words"]) >= 150
    assert call("define_word", word="Serene") == {
        "word": "serene",
        "part_of_speech": "adjective",
        "definition": "calm and untroubled",
    }
    with pytest.raises(ToolError, match="Did you mean serene"):
        call("define_word", word="serine")
    for w in g.world_tables()["words"]:
        assert re.fullmatch(r"[a-z ]+", w.definition), w
    assert call("get_population", city="Tokyo") == {
        "city": "Tokyo",
        "country": "Japan",
        "population": 13960000,
    }
    info = call("get_country_info", country="USA")
    assert info["country"] == "United States" and info["currency"] == "USD" and info["capital"] == "Washington DC"
    with pytest.raises(ToolError, match="Unknown country"):
        call("get_country_info", country="Atlantis")
    d = call("get_distance", city_a="London", city_b="Paris")
    assert d["unit"] == "km" and 335 <= d["distance"] <= 350
    mi = call("get_distance", city_a="Paris", city_b="London", unit="mi")
    assert mi["distance"] == round(d["distance"] / 1.609344) or abs(mi["distance"] - d["distance"] / 1.609344) < 1
    assert call("get_distance", city_a="Oslo", city_b="Oslo")["distance"] == 0
    with pytest.raises(ToolError, match="'km' or 'mi'"):
        call("get_distance", city_a="Oslo", city_b="Rome", unit="parsec")


_HOSTILE = [
    "",
    " ",
    "'; DROP TABLE users; --",
    "x" * 5000,
    "\x00\x1b[2J",
    "\u202e\u00e9",
    "null",
    "1e309",
    "-1",
]


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_tools_never_crash_on_hostile_strings(name):
    """Every string argument, replaced by odd text, gives a result or a ToolError (never another error)."""
    tool = TOOLS[name]
    good = {
        "city": "Paris",
        "city_a": "Paris",
        "city_b": "Rome",
        "date": "2025-03-04",
        "start_date": "2025-01-01",
        "end_date": "2025-02-01",
        "value": 3,
        "from_unit": "km",
        "to_unit": "mi",
        "amount": 10,
        "from_currency": "USD",
        "to_currency": "EUR",
        "days": 3,
        "time": "10:00",
        "from_tz": "UTC",
        "to_tz": "CET",
        "symbol": "AQNX",
        "origin": "Paris",
        "destination": "Rome",
        "word": "serene",
        "country": "France",
    }
    base = {k: good[k] for k in tool.parameters["required"]}
    json.dumps(tool.fn(None, **base))
    for key, prop in tool.parameters["properties"].items():
        if prop["type"] != "string":
            continue
        for bad in _HOSTILE:
            try:
                result = tool.fn(None, **{**base, key: bad})
            except ToolError as exc:
                assert _printable(str(exc)) and len(str(exc)) < 600
            else:
                assert _printable(json.dumps(result))


def test_tools_are_deterministic_and_ascii():
    rng = random.Random(5)
    for _ in range(200):
        c = rng.choice(g.world_tables()["cities"])
        d = f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        w1, w2 = call("get_weather", city=c.name, date=d), call("get_weather", city=c.name, date=d)
        assert w1 == w2 and _printable(json.dumps(w1))
        other = rng.choice(g.world_tables()["cities"])
        if other != c:
            f1 = call("search_flights", origin=c.name, destination=other.name, date=d)
            assert f1 == call("search_flights", origin=c.name, destination=other.name, date=d)
            assert _printable(json.dumps(f1))


# ---------------------------------------------------------------------------------------------- splits


def test_split_entities_are_disjoint_and_sized():
    ents = {s: g.split_entities(s) for s in SPLITS}
    for kind in ents["train"]:
        sets = {s: set(ents[s][kind]) for s in SPLITS}
        assert not sets["train"] & sets["validation"], kind
        assert not sets["train"] & sets["test"], kind
        assert not sets["validation"] & sets["test"], kind
        total = sum(len(v) for v in sets.values())
        assert len(sets["train"]) >= 0.7 * total and len(sets["test"]) >= 0.05 * total, kind
    assert len(ents["train"]["cities"]) == 99 and len(ents["test"]["tickers"]) == 4
    # every currency has partners in every split, and a pair and its reverse share a split
    for s in SPLITS:
        pairs = set(ents[s]["currency_pairs"])
        codes = {p.split(">")[0] for p in pairs}
        assert len(codes) == len(g.CURRENCY_ROWS)
        assert all(f"{p.split('>')[1]}>{p.split('>')[0]}" in pairs for p in pairs)
    with pytest.raises(ValueError, match="unknown split"):
        g.split_entities("dev")


def test_task_source_api():
    src = g.task_source(0)
    assert [src.size(s) for s in SPLITS] == [20000, 2000, 2000]
    t = src.task("validation", 7)
    assert isinstance(t, Task) and t.task_id == "general/validation/7" and t.domain == "general"
    assert t == src.task("validation", 7) == g.task_source(0).task("validation", 7)
    assert t.answer_type == "facts" and 1 <= len(t.facts) <= 3
    assert len(t.route) == 1 and t.route[0].agent == "general" and t.route[0].required_calls
    for bad in (-1, 2000, 1.5, True, "3"):
        with pytest.raises(ValueError, match="0 <= index < 2000"):
            src.task("test", bad)
    with pytest.raises(ValueError, match="unknown split"):
        src.task("dev", 0)
    with pytest.raises(ValueError, match="unknown split"):
        src.size("dev")
    other = g.task_source(1)
    assert sum(src.task("train", i).query != other.task("train", i).query for i in range(50)) >= 45


def test_templates_and_test_only_share():
    src = g.task_source(3)
    seen = {s: collections.Counter(src.task(s, i).template for i in range(1000)) for s in SPLITS}
    assert len(g.TEMPLATES) >= 8 + len(g.TEST_ONLY_TEMPLATES) and len(g.TEST_ONLY_TEMPLATES) >= 1
    for s in ("train", "validation"):
        assert not set(seen[s]) & g.TEST_ONLY_TEMPLATES
        assert set(seen[s]) == set(g.TEMPLATES) - g.TEST_ONLY_TEMPLATES
    assert set(seen["test"]) == set(g.TEMPLATES)
    share = sum(seen["test"][n] for n in g.TEST_ONLY_TEMPLATES) / 1000
    assert 0.10 <= share <= 0.25
    flags = [src.task("test", i).meta["test_only_template"] for i in range(200)]
    assert any(flags) and not all(flags)


_CITY_ARGS = ("city", "origin", "destination", "city_a", "city_b", "from_tz", "to_tz")


def _uses_only_split_entities(task: Task, ents: dict[str, set[str]]) -> None:
    for turn in task.route[0].turns:
        for c in turn:
            args = c["arguments"]
            for key in _CITY_ARGS:
                if key in args:
                    assert args[key] in ents["cities"], (task.task_id, key, args[key])
            if c["name"] == "get_stock_quote":
                assert args["symbol"] in ents["tickers"]
            if c["name"] == "define_word":
                assert args["word"] in ents["words"]
            if c["name"] == "get_country_info":
                assert args["country"] in ents["countries"]
            if c["name"] in ("convert_currency", "get_exchange_rate") and args["from_currency"] != args["to_currency"]:
                assert f"{args['from_currency']}>{args['to_currency']}" in ents["currency_pairs"]
            if c["name"] == "date_diff":
                assert {args["start_date"], args["end_date"]} <= ents["dates"]


@pytest.mark.parametrize("split", SPLITS)
def test_gold_solutions_are_consistent(split):
    """>= 300 tasks per split: gold turns run cleanly and satisfy required_calls; answers hold the facts."""
    src = g.task_source(11)
    ents = {k: set(v) for k, v in g.split_entities(split).items()}
    rng = random.Random(split)
    indices = rng.sample(range(src.size(split)), 350)
    parallel = chains = 0
    for i in indices:
        task = src.task(split, i)
        (sub,) = task.route
        assert sub.agent == "general" and sub.query == task.query
        assert _printable(task.query) and _printable(task.answer)
        executed = run_gold(sub)
        assert len(sub.required_calls) == len(executed)
        assert required_satisfied(executed, list(sub.required_calls)), (task.task_id, sub.required_calls)
        for req in sub.required_calls:
            ((name, args),) = req.items()
            assert set(args) <= set(TOOLS[name].parameters["properties"])
            assert all(isinstance(v, list) and v for v in args.values())
        assert 1 <= len(task.facts) <= 3
        results_text = json.dumps([e["result"] for e in executed])
        for fact in task.facts:
            assert has_fact(task.answer, fact), (task.task_id, fact, task.answer)
            assert has_fact(sub.answer, fact)
            assert fact_text(fact) in fact_text(results_text).replace('"', " ") or has_fact(results_text, fact), (
                task.task_id,
                fact,
            )
        _uses_only_split_entities(task, ents)
        parallel += task.meta["parallel"]
        chains += len(sub.turns) > 1
    assert parallel >= 50 and chains >= 50


# ----------------------------------------------------------------------------------------------- parts


@pytest.mark.parametrize("split", SPLITS)
def test_currency_part(split):
    rng = random.Random(0)
    pairs = set(g.split_entities(split)["currency_pairs"])
    for amount, cur in ((129.99, "USD"), (1500, "JPY"), (42.5, "eur")):
        sub, info = g.currency_part(rng, split, amount, cur)
        assert sub.agent == "general" and len(sub.turns) == 1 and len(sub.required_calls) == 1
        assert set(info) >= {"to_currency", "converted", "rate"}
        assert f"{cur.upper()}>{info['to_currency']}" in pairs
        (executed,) = run_gold(sub)
        assert executed["result"]["converted"] == info["converted"] and executed["result"]["rate"] == info["rate"]
        assert round(info["converted"], 2) == info["converted"]
        assert required_satisfied([executed], list(sub.required_calls))
        assert has_fact(sub.answer, g.fmt(info["converted"])) and info["to_currency"] in sub.answer
    with pytest.raises(ValueError, match="unknown currency"):
        g.currency_part(rng, split, 10, "XXX")
    with pytest.raises(ValueError, match="unknown split"):
        g.currency_part(rng, "dev", 10, "USD")


@pytest.mark.parametrize("split", SPLITS)
def test_weather_part(split):
    rng = random.Random(1)
    ents = g.split_entities(split)
    for _ in range(20):
        sub, info = g.weather_part(rng, split)
        assert set(info) >= {"city", "date", "condition", "high_c"}
        assert info["city"] in ents["cities"] and info["date"] in ents["dates"]
        (executed,) = run_gold(sub)
        assert executed["result"]["condition"] == info["condition"]
        assert executed["result"]["high_c"] == info["high_c"]
        assert required_satisfied([executed], list(sub.required_calls))
        assert has_fact(sub.answer, info["condition"]) and f"{info['high_c']} C" in sub.answer
