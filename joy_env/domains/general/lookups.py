"""Lookups in the tables and argument parsing shared by the tools and the task templates."""

from __future__ import annotations

import datetime as dt
import difflib
import functools
import hashlib
import math
import numbers
import re
import unicodedata
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from joy_env.core import ToolError
from joy_env.domains.general.tables import (
    CITY_ROWS,
    COUNTRY_ROWS,
    CURRENCY_ROWS,
    TICKER_ROWS,
    UNIT_ROWS,
    WORD_ROWS,
    City,
    Country,
    Currency,
    Ticker,
    Unit,
    Word,
)


def h(*parts: object) -> int:
    """A stable 64-bit hash of the parts (SHA-256; Python's hash() is salted per process)."""
    data = "\x1f".join(str(p) for p in parts).encode("utf-8")
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big")


def lookup_key(text: str) -> str:
    """Lookup key: accents stripped, lowercase, '.' and apostrophes dropped, other punctuation -> space."""
    text = unicodedata.normalize("NFKD", text)
    text = "".join(ch for ch in text if not unicodedata.combining(ch)).lower()
    text = text.replace(".", "").replace("'", "")
    return re.sub(r"[^a-z0-9]+", " ", text).strip()


def show(value: object) -> str:
    """An agent-supplied value quoted for an error message: short and printable ASCII."""
    text = str(value)
    if len(text) > 40:
        text = text[:40] + "..."
    return ascii(text)


@functools.cache
def world_tables() -> dict[str, Any]:
    cities = tuple(City(*row[:7], aliases=tuple(row[7])) for row in CITY_ROWS)
    countries = tuple(Country(*row[:7], aliases=tuple(row[7])) for row in COUNTRY_ROWS)
    currencies = tuple(Currency(c, n, p, Fraction(r)) for c, n, p, r in CURRENCY_ROWS)
    tickers = tuple(Ticker(*row) for row in TICKER_ROWS)
    words = tuple(Word(*row) for row in WORD_ROWS)
    units = tuple(Unit(c, d, Fraction(f) if f else Fraction(0), names) for c, d, f, names in UNIT_ROWS)
    city_index: dict[str, City] = {}
    for c in cities:
        for name in (c.name, *c.aliases):
            city_index.setdefault(lookup_key(name), c)
        city_index.setdefault(lookup_key(f"{c.name} {c.country}"), c)
    country_index: dict[str, Country] = {}
    for c in countries:
        for name in (c.name, *c.aliases):
            country_index.setdefault(lookup_key(name), c)
    currency_index: dict[str, Currency] = {}
    for c in currencies:
        for name in (c.code, c.name, c.plural):
            currency_index.setdefault(lookup_key(name), c)
    unit_index: dict[str, Unit] = {}
    for u in units:
        for name in (u.code, *u.names):
            unit_index.setdefault(lookup_key(name), u)
    ticker_index: dict[str, Ticker] = {}
    for t in tickers:
        ticker_index[lookup_key(t.symbol)] = t
        ticker_index.setdefault(lookup_key(t.company), t)
    word_index = {w.word: w for w in words}
    assert len({c.name for c in cities}) == len(cities)
    assert all(c.currency in {x.code for x in currencies} for c in countries)
    return {
        "cities": cities,
        "countries": countries,
        "currencies": currencies,
        "tickers": tickers,
        "words": words,
        "units": units,
        "city_index": city_index,
        "country_index": country_index,
        "currency_index": currency_index,
        "unit_index": unit_index,
        "ticker_index": ticker_index,
        "word_index": word_index,
        "currency_by_code": {c.code: c for c in currencies},
        "unit_by_code": {u.code: u for u in units},
    }


def _unknown(kind: str, value: str, names: Sequence[str], examples: Sequence[str], hint: str = "") -> ToolError:
    keyed = {lookup_key(n): n for n in names}
    close = [keyed[k] for k in difflib.get_close_matches(lookup_key(value), list(keyed), n=3, cutoff=0.75)]
    msg = f"Unknown {kind} {show(value)}."
    if close:
        msg += f" Did you mean {', '.join(close)}?"
    msg += f" Known {kind} values include: {', '.join(examples)} ({len(names)} in total)."
    if hint:
        msg += " " + hint
    return ToolError(msg)


def text_arg(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"{what} must be a non-empty string")
    return value.strip()


def find_city(value: object, what: str = "city") -> City:
    text = text_arg(value, what)
    tables = world_tables()
    index = tables["city_index"]
    city = index.get(lookup_key(text))
    if city is None and "," in text:
        city = index.get(lookup_key(text.split(",", 1)[0]))
    if city is None:
        names = [c.name for c in tables["cities"]]
        raise _unknown(
            "city",
            text,
            names,
            ("Paris", "Tokyo", "New York", "Nairobi", "Sydney"),
            "Use the English city name, e.g. 'Sao Paulo'.",
        )
    return city


def find_country(value: object) -> Country:
    text = text_arg(value, "country")
    tables = world_tables()
    country = tables["country_index"].get(lookup_key(text))
    if country is None:
        names = [c.name for c in tables["countries"]]
        raise _unknown(
            "country",
            text,
            names,
            ("France", "Japan", "Brazil", "Kenya", "Canada"),
            "Use the English country name.",
        )
    return country


def find_currency(value: object, what: str) -> Currency:
    text = text_arg(value, what)
    tables = world_tables()
    cur = tables["currency_index"].get(lookup_key(text))
    if cur is None:
        codes = [c.code for c in tables["currencies"]]
        raise _unknown(
            "currency", text, codes, ("USD", "EUR", "JPY", "GBP", "INR"), "Use a three-letter ISO 4217 code."
        )
    return cur


def find_unit(value: object, what: str) -> Unit:
    text = text_arg(value, what)
    tables = world_tables()
    unit = tables["unit_index"].get(lookup_key(text))
    if unit is None:
        names = [u.code for u in tables["units"]] + [n for u in tables["units"] for n in u.names]
        raise _unknown(
            "unit",
            text,
            names,
            ("m", "km", "mi", "ft", "kg", "lb", "L", "gal", "C", "F"),
            "Length, mass, volume and temperature units are supported.",
        )
    return unit


def find_ticker(value: object) -> Ticker:
    text = text_arg(value, "symbol")
    tables = world_tables()
    ticker = tables["ticker_index"].get(lookup_key(text))
    if ticker is None:
        symbols = [t.symbol for t in tables["tickers"]]
        raise _unknown(
            "symbol",
            text,
            symbols,
            ("AQNX", "NBLA", "TRNX", "ZPHR", "LYRA"),
            "Only the simulated exchange's tickers are listed.",
        )
    return ticker


def find_word(value: object) -> Word:
    text = text_arg(value, "word")
    tables = world_tables()
    word = tables["word_index"].get(lookup_key(text))
    if word is None:
        words = [w.word for w in tables["words"]]
        raise _unknown(
            "word",
            text,
            words,
            ("abundant", "candid", "glacier", "ponder", "serene"),
            "The built-in dictionary holds single English words only.",
        )
    return word


_DATE_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")


def parse_date(value: object, what: str = "date", lo: int = 1900, hi: int = 2100) -> dt.date:
    text = text_arg(value, what)
    m = _DATE_RE.fullmatch(text)
    if m is None:
        raise ToolError(f"{what} must be an ISO date YYYY-MM-DD, got {show(text)}")
    try:
        day = dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        raise ToolError(f"{what} {text} is not a valid calendar date") from None
    if not lo <= day.year <= hi:
        raise ToolError(f"{what} {text} is out of range: years {lo}-{hi} are supported")
    return day


def number_arg(value: object, what: str, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ToolError(f"{what} must be a number")
    x = float(value)
    if not math.isfinite(x) or not lo <= x <= hi:
        raise ToolError(f"{what} must be a finite number between {fmt(lo)} and {fmt(hi)}, got {show(value)}")
    return x


def rounded(x: float | Fraction, digits: int) -> int | float:
    """Round to ``digits`` decimals; integral values become ints (so JSON shows 12, not 12.0)."""
    v = float(round(Fraction(x), digits)) if isinstance(x, Fraction) else round(float(x), digits)
    if v == 0:
        return 0
    if v.is_integer() and abs(v) < 2**53:
        return int(v)
    return v


def fmt(x: float | int) -> str:
    """How a number appears in answers and facts (the shortest repr of the rounded value)."""
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) < 2**53):
        return str(int(x))
    return repr(float(x))


def offset_label(minutes: int) -> str:
    sign = "+" if minutes >= 0 else "-"
    m = abs(minutes)
    return f"UTC{sign}{m // 60:02d}:{m % 60:02d}"


def haversine_km(a: City, b: City) -> float:
    p1, p2 = math.radians(a.lat), math.radians(b.lat)
    dp, dl = p2 - p1, math.radians(b.lon - a.lon)
    s = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * 6371.0 * math.asin(min(1.0, math.sqrt(s)))
