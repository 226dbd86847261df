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
    _CITY_ROWS,
    _COUNTRY_ROWS,
    _CURRENCY_ROWS,
    _TICKER_ROWS,
    _UNIT_ROWS,
    _WORD_ROWS,
    City,
    Country,
    Currency,
    Ticker,
    Unit,
    Word,
)


def _h(*parts: object) -> int:
    """A stable 64-bit hash of the parts (SHA-256; Python's hash() is salted per process)."""
    data = "\x1f".join(str(p) for p in parts).encode("utf-8")
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big")


def _key(text: str) -> str:
    """Lookup key: accents stripped, lowercase, '.' and apostrophes dropped, other punctuation -> space."""
    text = unicodedata.normalize("NFKD", text)
    text = "".join(ch for ch in text if not unicodedata.combining(ch)).lower()
    text = text.replace(".", "").replace("'", "")
    return re.sub(r"[^a-z0-9]+", " ", text).strip()


def _show(value: object) -> str:
    """An agent-supplied value quoted for an error message: short and printable ASCII."""
    text = str(value)
    if len(text) > 40:
        text = text[:40] + "..."
    return ascii(text)


@functools.cache
def _tables() -> dict[str, Any]:
    cities = tuple(City(*row[:7], aliases=tuple(row[7])) for row in _CITY_ROWS)
    countries = tuple(Country(*row[:7], aliases=tuple(row[7])) for row in _COUNTRY_ROWS)
    currencies = tuple(Currency(c, n, p, Fraction(r)) for c, n, p, r in _CURRENCY_ROWS)
    tickers = tuple(Ticker(*row) for row in _TICKER_ROWS)
    words = tuple(Word(*row) for row in _WORD_ROWS)
    units = tuple(Unit(c, d, Fraction(f) if f else Fraction(0), names) for c, d, f, names in _UNIT_ROWS)
    city_index: dict[str, City] = {}
    for c in cities:
        for name in (c.name, *c.aliases):
            city_index.setdefault(_key(name), c)
        city_index.setdefault(_key(f"{c.name} {c.country}"), c)
    country_index: dict[str, Country] = {}
    for c in countries:
        for name in (c.name, *c.aliases):
            country_index.setdefault(_key(name), c)
    currency_index: dict[str, Currency] = {}
    for c in currencies:
        for name in (c.code, c.name, c.plural):
            currency_index.setdefault(_key(name), c)
    unit_index: dict[str, Unit] = {}
    for u in units:
        for name in (u.code, *u.names):
            unit_index.setdefault(_key(name), u)
    ticker_index: dict[str, Ticker] = {}
    for t in tickers:
        ticker_index[_key(t.symbol)] = t
        ticker_index.setdefault(_key(t.company), t)
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
    keyed = {_key(n): n for n in names}
    close = [keyed[k] for k in difflib.get_close_matches(_key(value), list(keyed), n=3, cutoff=0.75)]
    msg = f"Unknown {kind} {_show(value)}."
    if close:
        msg += f" Did you mean {', '.join(close)}?"
    msg += f" Known {kind} values include: {', '.join(examples)} ({len(names)} in total)."
    if hint:
        msg += " " + hint
    return ToolError(msg)


def _text(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"{what} must be a non-empty string")
    return value.strip()


def _find_city(value: object, what: str = "city") -> City:
    text = _text(value, what)
    tables = _tables()
    index = tables["city_index"]
    city = index.get(_key(text))
    if city is None and "," in text:
        city = index.get(_key(text.split(",", 1)[0]))
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


def _find_country(value: object) -> Country:
    text = _text(value, "country")
    tables = _tables()
    country = tables["country_index"].get(_key(text))
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


def _find_currency(value: object, what: str) -> Currency:
    text = _text(value, what)
    tables = _tables()
    cur = tables["currency_index"].get(_key(text))
    if cur is None:
        codes = [c.code for c in tables["currencies"]]
        raise _unknown(
            "currency", text, codes, ("USD", "EUR", "JPY", "GBP", "INR"), "Use a three-letter ISO 4217 code."
        )
    return cur


def _find_unit(value: object, what: str) -> Unit:
    text = _text(value, what)
    tables = _tables()
    unit = tables["unit_index"].get(_key(text))
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


def _find_ticker(value: object) -> Ticker:
    text = _text(value, "symbol")
    tables = _tables()
    ticker = tables["ticker_index"].get(_key(text))
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


def _find_word(value: object) -> Word:
    text = _text(value, "word")
    tables = _tables()
    word = tables["word_index"].get(_key(text))
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


def _parse_date(value: object, what: str = "date", lo: int = 1900, hi: int = 2100) -> dt.date:
    text = _text(value, what)
    m = _DATE_RE.fullmatch(text)
    if m is None:
        raise ToolError(f"{what} must be an ISO date YYYY-MM-DD, got {_show(text)}")
    try:
        day = dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        raise ToolError(f"{what} {text} is not a valid calendar date") from None
    if not lo <= day.year <= hi:
        raise ToolError(f"{what} {text} is out of range: years {lo}-{hi} are supported")
    return day


def _number(value: object, what: str, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ToolError(f"{what} must be a number")
    x = float(value)
    if not math.isfinite(x) or not lo <= x <= hi:
        raise ToolError(f"{what} must be a finite number between {_fmt(lo)} and {_fmt(hi)}, got {_show(value)}")
    return x


def _num(x: float | Fraction, digits: int) -> int | float:
    """Round to ``digits`` decimals; integral values become ints (so JSON shows 12, not 12.0)."""
    v = float(round(Fraction(x), digits)) if isinstance(x, Fraction) else round(float(x), digits)
    if v == 0:
        return 0
    if v.is_integer() and abs(v) < 2**53:
        return int(v)
    return v


def _fmt(x: float | int) -> str:
    """How a number appears in answers and facts (the shortest repr of the rounded value)."""
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) < 2**53):
        return str(int(x))
    return repr(float(x))


def _offset_label(minutes: int) -> str:
    sign = "+" if minutes >= 0 else "-"
    m = abs(minutes)
    return f"UTC{sign}{m // 60:02d}:{m % 60:02d}"


def _haversine_km(a: City, b: City) -> float:
    p1, p2 = math.radians(a.lat), math.radians(b.lat)
    dp, dl = p2 - p1, math.radians(b.lon - a.lon)
    s = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * 6371.0 * math.asin(min(1.0, math.sqrt(s)))
