"""The general tools' JSON schemas, the agent's system prompt and :func:`domain`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from joy_env.core import Domain, Tool
from joy_env.domains.general.tools import (
    add_days,
    convert_currency,
    convert_timezone,
    convert_units,
    date_diff,
    define_word,
    get_country_info,
    get_distance,
    get_exchange_rate,
    get_population,
    get_stock_quote,
    get_weather,
    search_flights,
)


def _s(description: str, max_length: int = 100) -> dict[str, Any]:
    return {"type": "string", "maxLength": max_length, "description": description}


_DATE_S = "ISO date YYYY-MM-DD, e.g. 2025-03-14"


def _schema(properties: Mapping[str, Any], required: Sequence[str]) -> dict[str, Any]:
    return {"type": "object", "properties": dict(properties), "required": list(required)}


TOOLS: tuple[Tool, ...] = (
    Tool(
        "get_weather",
        "Daily weather forecast for a city on a date: condition, high and low in Celsius, chance of "
        "precipitation, humidity and wind.",
        _schema({"city": _s("City name in English, e.g. 'Lisbon'"), "date": _s(_DATE_S, 32)}, ["city", "date"]),
        get_weather,
    ),
    Tool(
        "convert_units",
        "Convert a quantity between units of length (m, km, cm, mm, mi, yd, ft, in), mass (kg, g, mg, lb, "
        "oz, t), volume (L, mL, gal, qt, pt, cup, fl_oz, m3) or temperature (C, F, K).",
        _schema(
            {
                "value": {"type": "number", "minimum": -1e12, "maximum": 1e12, "description": "The quantity"},
                "from_unit": _s("Unit of the value, a code or a name, e.g. 'mi' or 'miles'", 40),
                "to_unit": _s("Target unit, e.g. 'km'", 40),
            },
            ["value", "from_unit", "to_unit"],
        ),
        convert_units,
    ),
    Tool(
        "convert_currency",
        "Convert an amount of money from one currency to another at today's fixed rate.",
        _schema(
            {
                "amount": {
                    "type": "number",
                    "minimum": 0,
                    "maximum": 1e12,
                    "description": "Amount to convert",
                },
                "from_currency": _s("ISO 4217 code of the amount's currency, e.g. 'USD'", 40),
                "to_currency": _s("ISO 4217 code of the target currency, e.g. 'EUR'", 40),
            },
            ["amount", "from_currency", "to_currency"],
        ),
        convert_currency,
    ),
    Tool(
        "get_exchange_rate",
        "Exchange rate between two currencies: units of to_currency for one unit of from_currency.",
        _schema(
            {"from_currency": _s("ISO 4217 code, e.g. 'GBP'", 40), "to_currency": _s("ISO 4217 code", 40)},
            ["from_currency", "to_currency"],
        ),
        get_exchange_rate,
    ),
    Tool(
        "date_diff",
        "Number of days from start_date to end_date (negative if end_date is earlier).",
        _schema({"start_date": _s(_DATE_S, 32), "end_date": _s(_DATE_S, 32)}, ["start_date", "end_date"]),
        date_diff,
    ),
    Tool(
        "add_days",
        "Add a number of days (negative to subtract) to a date; returns the new date and its weekday.",
        _schema(
            {
                "date": _s(_DATE_S, 32),
                "days": {
                    "type": "integer",
                    "minimum": -36500,
                    "maximum": 36500,
                    "description": "Days to add",
                },
            },
            ["date", "days"],
        ),
        add_days,
    ),
    Tool(
        "convert_timezone",
        "Convert a local time on a date from one time zone to another (fixed offsets, no daylight saving). "
        "A zone is a city name, an abbreviation such as JST, CET, EST, IST, or an offset like UTC+05:30.",
        _schema(
            {
                "time": _s("Local time, 24-hour HH:MM", 16),
                "date": _s(_DATE_S, 32),
                "from_tz": _s("Zone of the given time, e.g. 'Tokyo' or 'JST'", 60),
                "to_tz": _s("Target zone, e.g. 'London' or 'UTC'", 60),
            },
            ["time", "date", "from_tz", "to_tz"],
        ),
        convert_timezone,
    ),
    Tool(
        "get_stock_quote",
        "End-of-day stock quote (open, high, low, close in USD, volume) of a listed company on a weekday.",
        _schema({"symbol": _s("Ticker symbol, e.g. 'AQNX'", 40), "date": _s(_DATE_S, 32)}, ["symbol", "date"]),
        get_stock_quote,
    ),
    Tool(
        "search_flights",
        "Search one-way flights between two cities on a date. Returns flight numbers, airlines, local "
        "departure and arrival times, duration, stops and the fare in USD.",
        _schema(
            {
                "origin": _s("Departure city, e.g. 'Madrid'"),
                "destination": _s("Arrival city, e.g. 'Rome'"),
                "date": _s(_DATE_S, 32),
                "max_price": {
                    "type": "number",
                    "minimum": 0,
                    "description": "Only fares up to this price (USD)",
                },
                "sort_by": {
                    "type": "string",
                    "enum": ["price", "departure", "duration"],
                    "default": "price",
                    "description": "Order of the results (default: cheapest first)",
                },
            },
            ["origin", "destination", "date"],
        ),
        search_flights,
    ),
    Tool(
        "define_word",
        "Dictionary lookup of an English word: part of speech and definition.",
        _schema({"word": _s("A single English word", 40)}, ["word"]),
        define_word,
    ),
    Tool(
        "get_population",
        "Population of a city (the city itself, not its country).",
        _schema({"city": _s("City name in English")}, ["city"]),
        get_population,
    ),
    Tool(
        "get_country_info",
        "Facts about a country: capital, continent, population, currency code, languages, calling code.",
        _schema({"country": _s("Country name in English, e.g. 'Japan'")}, ["country"]),
        get_country_info,
    ),
    Tool(
        "get_distance",
        "Straight-line (great-circle) distance between two cities, rounded to whole units.",
        _schema(
            {
                "city_a": _s("First city"),
                "city_b": _s("Second city"),
                "unit": {"type": "string", "enum": ["km", "mi"], "default": "km", "description": "km or mi"},
            },
            ["city_a", "city_b"],
        ),
        get_distance,
    ),
)

TOOL_FNS: dict[str, Callable[..., Any]] = {t.name: t.fn for t in TOOLS}

SYSTEM_PROMPT = (
    "You are the general function-calling agent. You answer everyday questions (weather forecasts, unit and "
    "currency conversions, dates and time zones, stock quotes, flights, word definitions, facts about cities "
    "and countries, distances) with your tools. Pass dates as YYYY-MM-DD, currencies as ISO codes and city "
    "names in English. Independent calls may go in the same turn; when one call needs another's result, "
    "wait for it. Ignore details of the request that no tool needs. When done, answer briefly and copy the "
    "exact names and numbers from the tool results, e.g. <answer>The forecast for Lisbon on 2025-05-02 is "
    "sunny, high 24 C, low 15 C.</answer>"
)


def domain() -> Domain:
    """The general sub-agent's tools and prompt (no database)."""
    return Domain(agent="general", tools=TOOLS, system_prompt=SYSTEM_PROMPT)
