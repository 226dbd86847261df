"""Task templates: each draws entities of the split's pool and builds the gold calls."""

from __future__ import annotations

import datetime as dt
import math
import random
from collections.abc import Callable, Sequence
from typing import Any

from joy_env.domains.general.lookups import fmt, haversine_km, offset_label, rounded, world_tables
from joy_env.domains.general.schemas import TOOL_FNS
from joy_env.domains.general.splits import Pool
from joy_env.domains.general.tables import MONTHS, City, Ticker
from joy_env.domains.general.tools import FLIGHT_SORT, convert_units, flights_between, forecast, hhmm_text, quote


def _acc_city(c: City) -> list[str]:
    return list(dict.fromkeys([c.name, *c.aliases, f"{c.name}, {c.country}"]))


def _acc_zone(c: City) -> list[str]:
    out = _acc_city(c)
    if c.tz:
        out.append(c.tz)
    sign = "+" if c.utc_offset >= 0 else "-"
    h, m = divmod(abs(c.utc_offset), 60)
    out += [offset_label(c.utc_offset), f"UTC{sign}{h:02d}{m:02d}"]
    if m == 0:
        out += [f"UTC{sign}{h}", f"UTC{sign}{h:02d}"]
    if c.utc_offset == 0:
        out += ["UTC", "GMT"]
    return list(dict.fromkeys(out))


def _acc_unit(code: str) -> list[str]:
    return [code, *world_tables()["unit_by_code"][code].names]


def _acc_time(hhmm: str) -> list[str]:
    return [hhmm, hhmm[1:]] if hhmm.startswith("0") else [hhmm]


def _acc_ticker(t: Ticker) -> list[str]:
    return [t.symbol, t.company]


def _date_text(rng: random.Random, d: dt.date) -> str:
    form = rng.randrange(4)
    if form == 0:
        return f"{MONTHS[d.month - 1]} {d.day}, {d.year}"
    if form == 1:
        return f"{d.day} {MONTHS[d.month - 1]} {d.year}"
    return d.isoformat()


def _city_text(rng: random.Random, c: City) -> str:
    r = rng.random()
    if r < 0.12 and c.aliases:
        return c.aliases[0]
    if r < 0.22:
        return f"{c.name}, {c.country}"
    return c.name


def _currency_text(rng: random.Random, code: str, plural: bool = True) -> str:
    cur = world_tables()["currency_by_code"][code]
    name = cur.plural if plural else cur.name
    return rng.choice((code, name, f"{name} ({code})"))


def _ticker_text(rng: random.Random, t: Ticker) -> str:
    return rng.choice((t.symbol, f"{t.company} ({t.symbol})", t.symbol, t.company))


def _unit_text(code: str) -> str:
    return world_tables()["unit_by_code"][code].names[0]


class Plan:
    """Gold turns being built: each call is executed at once so later steps can use its result."""

    def __init__(self) -> None:
        self.turns: list[tuple[dict[str, Any], ...]] = []
        self.required: list[dict[str, Any]] = []

    def turn(self, *calls: tuple[str, dict[str, Any], dict[str, list[Any]]]) -> list[dict[str, Any]]:
        results = []
        batch = []
        for name, args, acceptable in calls:
            results.append(TOOL_FNS[name](None, **args))
            batch.append({"name": name, "arguments": dict(args)})
            self.required.append({name: acceptable})
        self.turns.append(tuple(batch))
        return results

    def one(self, name: str, args: dict[str, Any], acceptable: dict[str, list[Any]]) -> dict[str, Any]:
        return self.turn((name, args, acceptable))[0]


class Retry(Exception):
    """The drawn entities do not fit the template (e.g. a tie); draw again."""


def _fact(x: Any) -> str | None:
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, (int, float)):
        return fmt(x)
    return str(x)


def _facts(*items: Any) -> tuple[str, ...]:
    return tuple(dict.fromkeys(f for f in (_fact(x) for x in items) if f))


_DISTRACTORS = (
    "I'm travelling with my two kids, so keep it simple.",
    "My budget for souvenirs is about {n} dollars, but that's another matter.",
    "My colleague in {other} says hello, by the way.",
    "Last time I checked, my phone battery was at {n} percent.",
    "I usually prefer window seats.",
    "We moved house {n} years ago.",
    "My cousin lives in {other}, but that does not matter here.",
    "Please be quick, my meeting starts in {n} minutes.",
    "I already checked the forecast for {other} yesterday.",
    "I have {n} unread emails waiting.",
)


def _distract(rng: random.Random, pool: Pool, text: str, exclude: Sequence[City] = ()) -> str:
    if rng.random() >= 0.35:
        return text
    others = [c for c in pool.cities if c not in exclude]
    sentence = rng.choice(_DISTRACTORS).format(n=rng.randint(2, 95), other=rng.choice(others).name)
    return f"{sentence} {text}" if rng.random() < 0.5 else f"{text} {sentence}"


def _two(rng: random.Random, items: Sequence[Any]) -> tuple[Any, Any]:
    a, b = rng.sample(list(items), 2)
    return a, b


# --------------------------------------------------------------------------------------------- templates
# Each template draws entities of the split's pool, builds the gold calls in ``plan`` and returns
# (query, answer, facts).

_Result = tuple[str, str, tuple[str, ...]]


def weather_call(c: City, d: dt.date) -> tuple[str, dict[str, Any], dict[str, list[Any]]]:
    return (
        "get_weather",
        {"city": c.name, "date": d.isoformat()},
        {"city": _acc_city(c), "date": [d.isoformat()]},
    )


def _t_weather(rng: random.Random, pool: Pool, plan: Plan) -> _Result:
    c, d = rng.choice(pool.cities), rng.choice(pool.dates)
    w = plan.one(*weather_call(c, d))
    ct, dtx = _city_text(rng, c), _date_text(rng, d)
    query = rng.choice(
        (
            f"What's the weather forecast for {ct} on {dtx}?",
            f"I'm heading to {ct} on {dtx}. What weather should I expect, and how warm will it get?",
            f"Give me the forecast (condition, high and low) for {ct} on {dtx}.",
        )
    )
    answer = (
        f"The forecast for {c.name} is {w['condition']}, with a high of {w['high_c']} C and a low of {w['low_c']} C."
    )
    return _distract(rng, pool, query, [c]), answer, _facts(w["condition"], w["high_c"], w["low_c"])


def _t_weather_compare(rng: random.Random, pool: Pool, plan: Plan) -> _Result:
    a, b = _two(rng, pool.cities)
    d = rng.choice(pool.dates)
    wa, wb = forecast(a, d), forecast(b, d)
    if abs(wa["high_c"]) == abs(wb["high_c"]):  # a tie, or "3" found inside "-3"
        raise Retry
    wa, wb = plan.turn(weather_call(a, d), weather_call(b, d))
    colder = rng.random() < 0.35
    pick = (a if wa["high_c"] < wb["high_c"] else b) if colder else (a if wa["high_c"] > wb["high_c"] else b)
    word = "colder" if colder else "warmer"
    at, bt, dtx = _city_text(rng, a), _city_text(rng, b), _date_text(rng, d)
    query = rng.choice(
        (
            f"Which will be {word} on {dtx}, {at} or {bt}? Tell me both daytime highs.",
            f"I can't decide between {at} and {bt} for a trip on {dtx}. Which one will be {word}? Include the highs.",
        )
    )
    answer = (
        f"{a.name} will have a high of {wa['high_c']} C ({wa['condition']}) and {b.name} a high of "
        f"{wb['high_c']} C ({wb['condition']}), so {pick.name} will be {word}."
    )
    return _distract(rng, pool, query, [a, b]), answer, _facts(pick.name, wa["high_c"], wb["high_c"])


def _flight_search(
    rng: random.Random, o: City, d: City, day: dt.date, budget: bool
) -> tuple[tuple[str, dict[str, Any], dict[str, list[Any]]], dict[str, Any], float | None]:
    """The search_flights call for the cheapest flight (optionally with a budget), and that flight."""
    flights = sorted(flights_between(o, d, day), key=FLIGHT_SORT["price"])
    cheapest = flights[0]
    args: dict[str, Any] = {
        "origin": o.name,
        "destination": d.name,
        "date": day.isoformat(),
        "sort_by": "price",
    }
    acceptable: dict[str, list[Any]] = {
        "origin": _acc_city(o),
        "destination": _acc_city(d),
        "date": [day.isoformat()],
        "sort_by": ["price", ""],
    }
    max_price = None
    if budget:
        max_price = float(math.ceil(cheapest["price"] / 50) * 50 + 50 * rng.randint(1, 4))
        args["max_price"] = rounded(max_price, 2)
        acceptable["max_price"] = [rounded(max_price, 2), ""]
    else:
        acceptable["max_price"] = [""]
    return ("search_flights", args, acceptable), cheapest, max_price


def convert_call(amount: float, src: str, dst: str) -> tuple[str, dict[str, Any], dict[str, list[Any]]]:
    return (
        "convert_currency",
        {"amount": amount, "from_currency": src, "to_currency": dst},
        {"amount": [amount], "from_currency": [src], "to_currency": [dst]},
    )


def _t_flight_convert(rng: random.Random, pool: Pool, plan: Plan) -> _Result:
    o, d = _two(rng, pool.cities)
    day = rng.choice(pool.dates)
    cur = rng.choice(pool.partners["USD"])
    call, cheapest, max_price = _flight_search(rng, o, d, day, rng.random() < 0.3)
    result = plan.one(*call)
    assert result["flights"][0]["flight_number"] == cheapest["flight_number"]
    conv = plan.one(*convert_call(cheapest["price"], "USD", cur))
    ot, dtt, dtx, ct = _city_text(rng, o), _city_text(rng, d), _date_text(rng, day), _currency_text(rng, cur)
    query = rng.choice(
        (
            f"Find the cheapest flight from {ot} to {dtt} on {dtx} and tell me the fare in {ct}.",
            f"I need to fly {ot} to {dtt} on {dtx}. What's the cheapest option, and what does it cost in {ct}?",
        )
    )
    if max_price is not None:
        query += f" I don't want to pay more than ${fmt(max_price)}."
    answer = (
        f"The cheapest flight from {o.name} to {d.name} on {day.isoformat()} is {cheapest['flight_number']} "
        f"({cheapest['airline']}) at {fmt(cheapest['price'])} USD, which is {fmt(conv['converted'])} {cur}."
    )
    return _distract(rng, pool, query, [o, d]), answer, _facts(cheapest["flight_number"], conv["converted"])


def _t_date_plan(rng: random.Random, pool: Pool, plan: Plan) -> _Result:
    s, e = sorted(rng.sample(list(pool.dates), 2))
    if (e - s).days < 7:
        raise Retry
    diff = plan.one(
        "date_diff",
        {"start_date": s.isoformat(), "end_date": e.isoformat()},
        {"start_date": [s.isoformat()], "end_date": [e.isoformat()]},
    )
    n = diff["days"]
    res = plan.one("add_days", {"date": e.isoformat(), "days": n}, {"date": [e.isoformat()], "days": [n]})
    st, et = _date_text(rng, s), _date_text(rng, e)
    query = rng.choice(
        (
            f"Our project kicked off on {st} and the review is on {et}. How many days apart are they? If the "
            "launch comes the same number of days after the review, on what date and weekday does it fall?",
            f"I planted tomatoes on {st} and the first harvest was on {et}. How many days was that? If the "
            f"next "
            "harvest takes just as long after the first one, what date and day of the week will it be?",
            f"The lease started on {st} and the first inspection was on {et}. How many days passed between "
            f"them, "
            "and when (date and weekday) is the second inspection if it comes the same number of days later?",
        )
    )
    answer = (
        f"{s.isoformat()} to {e.isoformat()} is {n} days; {n} days after {e.isoformat()} is "
        f"{res['result_date']}, a {res['weekday']}."
    )
    return _distract(rng, pool, query), answer, _facts(n, res["result_date"], res["weekday"])


def _t_meeting_weather(rng: random.Random, pool: Pool, plan: Plan) -> _Result:
    a, b = _two(rng, pool.cities)
    if a.utc_offset == b.utc_offset:
        raise Retry
    d = rng.choice(pool.dates)
    hhmm = hhmm_text(rng.randrange(96) * 15)
    conv = plan.one(
        "convert_timezone",
        {"time": hhmm, "date": d.isoformat(), "from_tz": a.name, "to_tz": b.name},
        {"time": _acc_time(hhmm), "date": [d.isoformat()], "from_tz": _acc_zone(a), "to_tz": _acc_zone(b)},
    )
    local = dt.date.fromisoformat(conv["converted_date"])
    w = plan.one(*weather_call(b, local))
    at, bt, dtx = _city_text(rng, a), _city_text(rng, b), _date_text(rng, d)
    query = rng.choice(
        (
            f"I have a video call at {hhmm} {at} time on {dtx}. What time and date is that in {bt}, and "
            f"what's "
            "the weather forecast there on that local date?",
            f"Our team in {at} starts a workshop at {hhmm} local time on {dtx}. When is that for the people "
            f"in "
            f"{bt} (time and date), and what weather will they have that day?",
        )
    )
    answer = (
        f"The forecast for {b.name} is {w['condition']} with a high of {w['high_c']} C; {hhmm} in {a.name} "
        f"is {conv['converted_time']} on {conv['converted_date']} in {b.name}."
    )
    facts = _facts(conv["converted_time"], conv["converted_date"], w["condition"])
    return _distract(rng, pool, query, [a, b]), answer, facts


_UNIT_STORIES = {
    "length": (
        "The hiking trail is {v} {f} long. How long is that in {t}?",
        "My desk is {v} {f} wide; what is that in {t}?",
    ),
    "mass": (
        "My suitcase weighs {v} {f}. How much is that in {t}?",
        "The recipe needs {v} {f} of flour. How many {t} is that?",
    ),
    "volume": (
        "The water tank holds {v} {f}. What is that in {t}?",
        "I drank {v} {f} of tea today. How much is that in {t}?",
    ),
    "temperature": (
        "The oven is set to {v} {f}. What is that in {t}?",
        "The lake water was {v} {f} this morning. What is that in {t}?",
    ),
}


def _unit_value(rng: random.Random, src: str, dst: str) -> tuple[float | int, dict[str, Any]]:
    dim = world_tables()["unit_by_code"][src].dimension
    if dim == "temperature":
        v: float | int = {"C": rng.randint(5, 250), "F": rng.randint(45, 480), "K": rng.randint(280, 520)}[src]
    else:
        v = rng.choice((rng.randint(1, 500), rounded(rng.randint(10, 2000) / 10, 1), rng.randint(1, 20)))
    res = convert_units(None, v, src, dst)
    if not 0.01 <= res["result"] <= 1e7:
        raise Retry
    return v, res


def _t_units(rng: random.Random, pool: Pool, plan: Plan) -> _Result:
    n = 1 if rng.random() < 0.6 else 2
    pairs = rng.sample(list(pool.unit_pairs), n)
    values = [_unit_value(rng, s, t)[0] for s, t in pairs]
    calls = [
        (
            "convert_units",
            {"value": v, "from_unit": s, "to_unit": t},
            {"value": [v], "from_unit": _acc_unit(s), "to_unit": _acc_unit(t)},
        )
        for v, (s, t) in zip(values, pairs, strict=True)
    ]
    results = plan.turn(*calls)
    texts = [(fmt(v), _unit_text(s), _unit_text(t)) for v, (s, t) in zip(values, pairs, strict=True)]
    if n == 1:
        v, f, t = texts[0]
        dim = world_tables()["unit_by_code"][pairs[0][0]].dimension
        story = rng.choice((*_UNIT_STORIES[dim], "Convert {v} {f} to {t}."))
        query = story.format(v=v, f=f, t=t)
    else:
        query = (
            f"Please convert {texts[0][0]} {texts[0][1]} to {texts[0][2]}, and also {texts[1][0]} "
            f"{texts[1][1]} to {texts[1][2]}."
        )
    answer = " ".join(f"{v} {f} is {fmt(r['result'])} {t}." for (v, f, t), r in zip(texts, results, strict=True))
    return _distract(rng, pool, query), answer, _facts(*(r["result"] for r in results))


def _t_stock_compare(rng: random.Random, pool: Pool, plan: Plan) -> _Result:
    if rng.random() < 0.6:
        a, b = _two(rng, pool.tickers)
        d = rng.choice(pool.weekdays)
        if quote(a, d)["close"] == quote(b, d)["close"]:
            raise Retry
        qa, qb = plan.turn(
            (
                "get_stock_quote",
                {"symbol": a.symbol, "date": d.isoformat()},
                {"symbol": _acc_ticker(a), "date": [d.isoformat()]},
            ),
            (
                "get_stock_quote",
                {"symbol": b.symbol, "date": d.isoformat()},
                {"symbol": _acc_ticker(b), "date": [d.isoformat()]},
            ),
        )
        top = a if qa["close"] > qb["close"] else b
        dtx = _date_text(rng, d)
        query = rng.choice(
            (
                f"Which closed higher on {dtx}: {_ticker_text(rng, a)} or {_ticker_text(rng, b)}? Give both "
                f"closing prices.",
                f"Compare the closing prices of {_ticker_text(rng, a)} and {_ticker_text(rng, b)} on {dtx}.",
            )
        )
        answer = (
            f"On {d.isoformat()}, {a.symbol} closed at {fmt(qa['close'])} USD and {b.symbol} at "
            f"{fmt(qb['close'])} USD, so {top.symbol} closed higher."
        )
        return _distract(rng, pool, query), answer, _facts(qa["close"], qb["close"], top.symbol)
    t = rng.choice(pool.tickers)
    d1, d2 = sorted(rng.sample(list(pool.weekdays), 2))
    q1, q2 = plan.turn(
        (
            "get_stock_quote",
            {"symbol": t.symbol, "date": d1.isoformat()},
            {"symbol": _acc_ticker(t), "date": [d1.isoformat()]},
        ),
        (
            "get_stock_quote",
            {"symbol": t.symbol, "date": d2.isoformat()},
            {"symbol": _acc_ticker(t), "date": [d2.isoformat()]},
        ),
    )
    tt = _ticker_text(rng, t)
    query = f"What did {tt} close at on {_date_text(rng, d1)} and on {_date_text(rng, d2)}?"
    answer = (
        f"On {d1.isoformat()} {t.symbol} closed at {fmt(q1['close'])} USD, and on {d2.isoformat()} at "
        f"{fmt(q2['close'])} USD."
    )
    return _distract(rng, pool, query), answer, _facts(q1["close"], q2["close"])


def _t_define(rng: random.Random, pool: Pool, plan: Plan) -> _Result:
    if rng.random() < 0.55:
        w = rng.choice(pool.words)
        r = plan.one("define_word", {"word": w.word}, {"word": [w.word]})
        query = rng.choice(
            (
                f"What does the word '{w.word}' mean, and what part of speech is it?",
                f'I came across "{w.word}" in a novel. Can you define it for me?',
                f"Define {w.word}.",
            )
        )
        answer = f"'{w.word}' ({r['part_of_speech']}): {r['definition']}."
        return _distract(rng, pool, query), answer, _facts(r["part_of_speech"], r["definition"])
    a, b = _two(rng, pool.words)
    ra, rb = plan.turn(
        ("define_word", {"word": a.word}, {"word": [a.word]}),
        ("define_word", {"word": b.word}, {"word": [b.word]}),
    )
    query = rng.choice(
        (
            f"What do the words '{a.word}' and '{b.word}' mean?",
            f"My crossword has two words I don't know: {a.word} and {b.word}. Please define both.",
        )
    )
    answer = (
        f"'{a.word}' ({ra['part_of_speech']}): {ra['definition']}. '{b.word}' ({rb['part_of_speech']}): "
        f"{rb['definition']}."
    )
    return _distract(rng, pool, query), answer, _facts(ra["definition"], rb["definition"])


def _t_lookup(rng: random.Random, pool: Pool, plan: Plan) -> _Result:
    kind = rng.randrange(5)
    if kind == 0:
        c = rng.choice([c for c in pool.cities if c.name != c.country])
        r = plan.one("get_population", {"city": c.name}, {"city": _acc_city(c)})
        query = rng.choice(
            (
                f"How many people live in the city of {_city_text(rng, c)}?",
                f"What is the population of {_city_text(rng, c)} (the city, not the country)?",
            )
        )
        answer = f"{c.name} has a population of {r['population']}."
        return _distract(rng, pool, query, [c]), answer, _facts(r["population"])
    if kind == 1:
        a, b = _two(rng, [c for c in pool.cities if c.name != c.country])
        ra, rb = plan.turn(
            ("get_population", {"city": a.name}, {"city": _acc_city(a)}),
            ("get_population", {"city": b.name}, {"city": _acc_city(b)}),
        )
        big = a if ra["population"] > rb["population"] else b
        query = f"Which city has more inhabitants, {_city_text(rng, a)} or {_city_text(rng, b)}?"
        answer = f"{a.name} has {ra['population']} people and {b.name} has {rb['population']}, so {big.name} is larger."
        return (
            _distract(rng, pool, query, [a, b]),
            answer,
            _facts(big.name, ra["population"], rb["population"]),
        )
    if kind in (2, 3):
        c = rng.choice([c for c in pool.countries if c.name != c.capital])
        r = plan.one("get_country_info", {"country": c.name}, {"country": [c.name, *c.aliases]})
        if kind == 2:
            query = f"What is the capital of {c.name}, and which currency is used there?"
            answer = f"The capital of {c.name} is {r['capital']} and its currency is {r['currency']}."
            return _distract(rng, pool, query), answer, _facts(r["capital"], r["currency"])
        query = rng.choice(
            (
                f"How many people live in the country of {c.name}?",
                f"What is the population of {c.name} as a whole country?",
            )
        )
        answer = f"{c.name} has a population of {r['population']}."
        return _distract(rng, pool, query), answer, _facts(r["population"])
    a = rng.choice(sorted(k for k, v in pool.partners.items() if v))
    b = rng.choice(pool.partners[a])
    r = plan.one(
        "get_exchange_rate",
        {"from_currency": a, "to_currency": b},
        {"from_currency": [a], "to_currency": [b]},
    )
    query = rng.choice(
        (
            f"What's the exchange rate from {_currency_text(rng, a)} to {_currency_text(rng, b)}?",
            f"How many {_currency_text(rng, b)} do I get for one {_currency_text(rng, a, plural=False)}? "
            "I only need the rate.",
        )
    )
    answer = f"1 {a} = {fmt(r['rate'])} {b}."
    return _distract(rng, pool, query), answer, _facts(r["rate"])


def _nice_amount(rng: random.Random, code: str) -> int | float:
    usd = rng.choice((50, 80, 100, 150, 200, 250, 300, 400, 500, 750, 1000, 1200, 1500, 2000))
    x = float(usd * world_tables()["currency_by_code"][code].per_usd)
    magnitude = 10 ** max(0, int(math.floor(math.log10(x))) - 1)
    return rounded(round(x / magnitude) * magnitude, 2)


def _t_country_money(rng: random.Random, pool: Pool, plan: Plan) -> _Result:
    c = rng.choice(pool.countries)
    src = rng.choice(pool.partners[c.currency])
    amount = _nice_amount(rng, src)
    info = plan.one("get_country_info", {"country": c.name}, {"country": [c.name, *c.aliases]})
    conv = plan.one(*convert_call(amount, src, info["currency"]))
    st = _currency_text(rng, src)
    query = rng.choice(
        (
            f"I'm visiting {c.name} next month with {fmt(amount)} {st}. Which currency do they use, and "
            f"how much "
            "local money is that?",
            f"How much is {fmt(amount)} {st} worth in the local currency of {c.name}? Tell me the currency too.",
        )
    )
    answer = f"{c.name} uses {info['currency']}; {fmt(amount)} {src} is {fmt(conv['converted'])} {info['currency']}."
    return _distract(rng, pool, query), answer, _facts(info["currency"], conv["converted"])


def _distance_call(a: City, b: City, unit: str) -> tuple[str, dict[str, Any], dict[str, list[Any]]]:
    args: dict[str, Any] = {"city_a": a.name, "city_b": b.name}
    acceptable: dict[str, list[Any]] = {"city_a": _acc_city(a), "city_b": _acc_city(b)}
    if unit == "mi":
        args["unit"] = "mi"
        acceptable["unit"] = ["mi"]
    else:
        acceptable["unit"] = ["km", ""]
    return "get_distance", args, acceptable


def _t_distance(rng: random.Random, pool: Pool, plan: Plan) -> _Result:
    unit = rng.choice(("km", "mi"))
    unit_name = "kilometers" if unit == "km" else "miles"
    if rng.random() < 0.6:
        a, b = _two(rng, pool.cities)
        r = plan.one(*_distance_call(a, b, unit))
        query = rng.choice(
            (
                f"How far is it from {_city_text(rng, a)} to {_city_text(rng, b)} in {unit_name}, as the crow flies?",
                f"What's the straight-line distance between {_city_text(rng, a)} and {_city_text(rng, b)} "
                f"in {unit_name}?",
            )
        )
        answer = f"{a.name} and {b.name} are {r['distance']} {unit} apart."
        return _distract(rng, pool, query, [a, b]), answer, _facts(r["distance"])
    a, b, c = rng.sample(list(pool.cities), 3)
    if haversine_km(a, b) == haversine_km(a, c):
        raise Retry
    rb, rc = plan.turn(_distance_call(a, b, unit), _distance_call(a, c, unit))
    if rb["distance"] == rc["distance"]:
        raise Retry
    far = b if rb["distance"] > rc["distance"] else c
    query = (
        f"Which is farther from {_city_text(rng, a)}: {_city_text(rng, b)} or {_city_text(rng, c)}? "
        f"Give both distances in {unit_name}."
    )
    answer = (
        f"From {a.name}, {b.name} is {rb['distance']} {unit} and {c.name} is {rc['distance']} {unit} away, "
        f"so {far.name} is farther."
    )
    return _distract(rng, pool, query, [a, b, c]), answer, _facts(far.name, rb["distance"], rc["distance"])


def _t_trip_budget(rng: random.Random, pool: Pool, plan: Plan) -> _Result:
    o, d = _two(rng, pool.cities)
    day = rng.choice(pool.dates)
    cur = rng.choice(pool.partners["USD"])
    call, cheapest, _ = _flight_search(rng, o, d, day, False)
    _, w = plan.turn(call, weather_call(d, day))
    conv = plan.one(*convert_call(cheapest["price"], "USD", cur))
    dtx = _date_text(rng, day)
    query = (
        f"I'm planning a trip from {_city_text(rng, o)} to {_city_text(rng, d)} on {dtx}. Find the cheapest "
        f"flight, tell me its fare in {_currency_text(rng, cur)}, and what the weather will be like in "
        f"{d.name} that day."
    )
    answer = (
        f"The forecast for {d.name} on {day.isoformat()} is {w['condition']} with a high of {w['high_c']} C; "
        f"the cheapest flight is {cheapest['flight_number']} at {fmt(cheapest['price'])} USD, which is "
        f"{fmt(conv['converted'])} {cur}."
    )
    facts = _facts(cheapest["flight_number"], conv["converted"], w["condition"])
    return _distract(rng, pool, query, [o, d]), answer, facts


def _t_stock_in_currency(rng: random.Random, pool: Pool, plan: Plan) -> _Result:
    t = rng.choice(pool.tickers)
    d = rng.choice(pool.weekdays)
    cur = rng.choice(pool.partners["USD"])
    q = plan.one(
        "get_stock_quote",
        {"symbol": t.symbol, "date": d.isoformat()},
        {"symbol": _acc_ticker(t), "date": [d.isoformat()]},
    )
    conv = plan.one(*convert_call(q["close"], "USD", cur))
    query = (
        f"What was the closing price of {_ticker_text(rng, t)} on {_date_text(rng, d)}, and what is that "
        f"in {_currency_text(rng, cur)}?"
    )
    answer = f"{t.symbol} closed at {fmt(q['close'])} USD on {d.isoformat()}, which is {fmt(conv['converted'])} {cur}."
    return _distract(rng, pool, query), answer, _facts(q["close"], conv["converted"])


def _t_weather_fahrenheit(rng: random.Random, pool: Pool, plan: Plan) -> _Result:
    c, d = rng.choice(pool.cities), rng.choice(pool.dates)
    w = forecast(c, d)
    f = convert_units(None, w["high_c"], "C", "F")["result"]
    plan.one(*weather_call(c, d))
    plan.one(
        "convert_units",
        {"value": w["high_c"], "from_unit": "C", "to_unit": "F"},
        {"value": [w["high_c"]], "from_unit": _acc_unit("C"), "to_unit": _acc_unit("F")},
    )
    query = rng.choice(
        (
            f"My grandmother only understands Fahrenheit. What will the high be in {_city_text(rng, c)} on "
            f"{_date_text(rng, d)} in Fahrenheit, and what's the sky going to look like?",
            f"What's the forecast high in degrees Fahrenheit for {_city_text(rng, c)} on "
            f"{_date_text(rng, d)}? "
            "Include the condition.",
        )
    )
    answer = (
        f"The forecast for {c.name} on {d.isoformat()} is {w['condition']} with a high of {w['high_c']} C, "
        f"which is {fmt(f)} F."
    )
    return _distract(rng, pool, query, [c]), answer, _facts(f, w["condition"])


TEMPLATES: dict[str, Callable[[random.Random, Pool, Plan], _Result]] = {
    "weather": _t_weather,
    "weather_compare": _t_weather_compare,
    "flight_convert": _t_flight_convert,
    "date_plan": _t_date_plan,
    "meeting_weather": _t_meeting_weather,
    "units": _t_units,
    "stock_compare": _t_stock_compare,
    "define": _t_define,
    "lookup": _t_lookup,
    "country_money": _t_country_money,
    "distance": _t_distance,
    "trip_budget": _t_trip_budget,
    "stock_in_currency": _t_stock_in_currency,
    "weather_fahrenheit": _t_weather_fahrenheit,
}
TEST_ONLY_TEMPLATES = frozenset({"trip_budget", "stock_in_currency", "weather_fahrenheit"})
