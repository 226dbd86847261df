"""The general tools: pure functions of their arguments (see :mod:`joy_env.domains.general`)."""

from __future__ import annotations

import datetime as dt
import math
import numbers
import re
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from joy_env.core import ToolContext, ToolError
from joy_env.domains.general.lookups import (
    find_city,
    find_country,
    find_currency,
    find_ticker,
    find_unit,
    find_word,
    fmt,
    h,
    haversine_km,
    lookup_key,
    number_arg,
    offset_label,
    parse_date,
    rounded,
    show,
    text_arg,
)
from joy_env.domains.general.tables import AIRLINES, TZ_OFFSETS, WEEKDAYS, City, Currency, Ticker


def forecast(city: City, day: dt.date) -> dict[str, Any]:
    lat = abs(city.lat)
    mean = 27.0 - 0.2 * lat - 0.0033 * lat * lat
    peak = 200 if city.lat >= 0 else 17
    seasonal = 0.2 * lat * math.cos(2 * math.pi * (day.timetuple().tm_yday - peak) / 365.25)
    hk = h("weather", city.name, day.isoformat())
    high = int(round(mean + seasonal + 4.0 + (hk % 901) / 100.0 - 4.5))
    low = high - (5 + (hk >> 12) % 7)
    r = (hk >> 20) % 100
    wet = 25 + (15 if lat < 23 else 0) + (hk >> 28) % 20
    if r < wet * 0.6:
        if high <= 1:
            condition = "snow"
        elif high >= 25 and r % 3 == 0:
            condition = "thunderstorms"
        else:
            condition = ("light rain", "rain")[r % 2]
        precip = 60 + (hk >> 36) % 40
    else:
        condition = ("sunny", "partly cloudy", "cloudy", "sunny", "partly cloudy", "fog", "windy")[(hk >> 40) % 7]
        precip = (hk >> 36) % 30
    wind = 5 + (hk >> 44) % 25 + (25 if condition == "windy" else 0)
    return {
        "city": city.name,
        "country": city.country,
        "date": day.isoformat(),
        "condition": condition,
        "high_c": high,
        "low_c": low,
        "precipitation_chance": precip,
        "humidity": 35 + (hk >> 50) % 55,
        "wind_kph": wind,
    }


def get_weather(ctx: ToolContext | None, city: str, date: str) -> dict[str, Any]:
    """Simulated daily forecast for a city and ISO date (years 2000-2099)."""
    c = find_city(city)
    day = parse_date(date, "date", 2000, 2099)
    return forecast(c, day)


def _to_kelvin(x: Fraction, code: str) -> Fraction:
    if code == "C":
        return x + Fraction("273.15")
    if code == "F":
        return (x - 32) * Fraction(5, 9) + Fraction("273.15")
    return x


def _from_kelvin(k: Fraction, code: str) -> Fraction:
    if code == "C":
        return k - Fraction("273.15")
    if code == "F":
        return (k - Fraction("273.15")) * Fraction(9, 5) + 32
    return k


def convert_units(ctx: ToolContext | None, value: float, from_unit: str, to_unit: str) -> dict[str, Any]:
    """Convert a length, mass, volume or temperature with exact factors (result to 4 decimals)."""
    x = number_arg(value, "value", -1e12, 1e12)
    src = find_unit(from_unit, "from_unit")
    dst = find_unit(to_unit, "to_unit")
    if src.dimension != dst.dimension:
        raise ToolError(
            f"Cannot convert {src.code} ({src.dimension}) to {dst.code} ({dst.dimension}): "
            "both units must measure the same quantity"
        )
    exact = Fraction(repr(x))
    if src.dimension == "temperature":
        kelvin = _to_kelvin(exact, src.code)
        if kelvin < 0:
            raise ToolError(f"{fmt(rounded(x, 6))} {src.code} is below absolute zero")
        result = _from_kelvin(kelvin, dst.code)
    else:
        if x < 0:
            raise ToolError(f"value must not be negative for {src.dimension} units")
        result = exact * src.factor / dst.factor
    return {
        "value": rounded(x, 6),
        "from_unit": src.code,
        "to_unit": dst.code,
        "dimension": src.dimension,
        "result": rounded(result, 4),
    }


def _rate(src: Currency, dst: Currency) -> Fraction:
    return dst.per_usd / src.per_usd


def convert_currency(ctx: ToolContext | None, amount: float, from_currency: str, to_currency: str) -> dict:
    """Convert an amount with the fixed rate table; ``converted`` is rounded to cents."""
    x = number_arg(amount, "amount", 0, 1e12)
    src = find_currency(from_currency, "from_currency")
    dst = find_currency(to_currency, "to_currency")
    rate = _rate(src, dst)
    return {
        "amount": rounded(x, 6),
        "from_currency": src.code,
        "to_currency": dst.code,
        "rate": rounded(rate, 6),
        "converted": rounded(Fraction(repr(x)) * rate, 2),
    }


def get_exchange_rate(ctx: ToolContext | None, from_currency: str, to_currency: str) -> dict[str, Any]:
    """Units of ``to_currency`` per one unit of ``from_currency`` (and the inverse), 6 decimals."""
    src = find_currency(from_currency, "from_currency")
    dst = find_currency(to_currency, "to_currency")
    return {
        "from_currency": src.code,
        "to_currency": dst.code,
        "rate": rounded(_rate(src, dst), 6),
        "inverse_rate": rounded(_rate(dst, src), 6),
    }


def date_diff(ctx: ToolContext | None, start_date: str, end_date: str) -> dict[str, Any]:
    """Days from ``start_date`` to ``end_date`` (negative if the end is earlier)."""
    s = parse_date(start_date, "start_date")
    e = parse_date(end_date, "end_date")
    return {"start_date": s.isoformat(), "end_date": e.isoformat(), "days": (e - s).days}


def add_days(ctx: ToolContext | None, date: str, days: int) -> dict[str, Any]:
    """The date ``days`` days after ``date`` (before, if negative) and its weekday."""
    start = parse_date(date, "date")
    if isinstance(days, bool) or not isinstance(days, numbers.Integral) or abs(days) > 36500:
        raise ToolError("days must be an integer between -36500 and 36500")
    result = start + dt.timedelta(days=int(days))
    if not 1900 <= result.year <= 2100:
        raise ToolError(f"the result {result.isoformat()} is out of range: years 1900-2100 are supported")
    return {
        "date": start.isoformat(),
        "days": int(days),
        "result_date": result.isoformat(),
        "weekday": WEEKDAYS[result.weekday()],
    }


_TIME_RE = re.compile(r"(\d{1,2}):(\d{2})(?:\s*([ap])\.?\s*m\.?)?", re.I)
_UTC_RE = re.compile(r"(?:utc|gmt)\s*([+-])\s*(\d{1,2})(?::?(\d{2}))?", re.I)


def _parse_zone(value: object, what: str) -> tuple[str, int]:
    text = text_arg(value, what)
    code = text.upper()
    if code in TZ_OFFSETS:
        return code, TZ_OFFSETS[code]
    m = _UTC_RE.fullmatch(text)
    if m:
        hours, minutes = int(m.group(2)), int(m.group(3) or 0)
        offset = (hours * 60 + minutes) * (1 if m.group(1) == "+" else -1)
        if minutes >= 60 or not -720 <= offset <= 840:
            raise ToolError(f"{what} {show(text)} is not a valid UTC offset (UTC-12:00 to UTC+14:00)")
        return offset_label(offset), offset
    try:
        city = find_city(text, what)
    except ToolError:
        raise ToolError(
            f"Unknown time zone {show(text)} for {what}. Use a city from the table (e.g. Tokyo), an "
            "abbreviation (e.g. JST, CET, EST, IST) or an offset like UTC+05:30."
        ) from None
    return city.name, city.utc_offset


def convert_timezone(ctx: ToolContext | None, time: str, date: str, from_tz: str, to_tz: str) -> dict:
    """Convert a local time on a date between fixed-offset zones (no daylight saving time)."""
    text = text_arg(time, "time")
    m = _TIME_RE.fullmatch(text)
    if m is None:
        raise ToolError(f"time must look like HH:MM (24-hour), got {show(text)}")
    hour, minute = int(m.group(1)), int(m.group(2))
    if m.group(3):
        if not 1 <= hour <= 12:
            raise ToolError(f"time {show(text)}: the hour must be 1-12 with am/pm")
        hour = hour % 12 + (12 if m.group(3).lower() == "p" else 0)
    if hour > 23 or minute > 59:
        raise ToolError(f"time {show(text)} is not a valid time of day")
    day = parse_date(date, "date")
    src_label, src_off = _parse_zone(from_tz, "from_tz")
    dst_label, dst_off = _parse_zone(to_tz, "to_tz")
    moment = dt.datetime(day.year, day.month, day.day, hour, minute) + dt.timedelta(minutes=dst_off - src_off)
    return {
        "time": f"{hour:02d}:{minute:02d}",
        "date": day.isoformat(),
        "from_tz": src_label,
        "to_tz": dst_label,
        "from_utc_offset": offset_label(src_off),
        "to_utc_offset": offset_label(dst_off),
        "converted_time": moment.strftime("%H:%M"),
        "converted_date": moment.date().isoformat(),
        "day_shift": (moment.date() - day).days,
    }


def quote(t: Ticker, day: dt.date) -> dict[str, Any]:
    n = day.toordinal()
    ht = h("ticker", t.symbol)
    period = 160 + ht % 200
    phase = (ht >> 16) % 1000 / 1000 * 2 * math.pi
    hq = h("quote", t.symbol, day.isoformat())
    noise = ((hq % 2001) - 1000) / 1000 * 0.02
    f = 0.22 * math.sin(2 * math.pi * n / period + phase) + 0.06 * math.sin(2 * math.pi * n / 29 + 3 * phase)
    close = round(t.base * math.exp(f + noise), 2)
    open_ = round(close * (1 + (((hq >> 12) % 2001) - 1000) / 1000 * 0.015), 2)
    high = round(max(open_, close) * (1 + ((hq >> 24) % 1000) / 1000 * 0.012), 2)
    low = round(min(open_, close) * (1 - ((hq >> 34) % 1000) / 1000 * 0.012), 2)
    return {
        "symbol": t.symbol,
        "company": t.company,
        "date": day.isoformat(),
        "currency": "USD",
        "open": rounded(open_, 2),
        "high": rounded(high, 2),
        "low": rounded(low, 2),
        "close": rounded(close, 2),
        "volume": 100000 + h("volume", t.symbol, day.isoformat()) % 4900000,
    }


def get_stock_quote(ctx: ToolContext | None, symbol: str, date: str) -> dict[str, Any]:
    """Simulated end-of-day quote of a fictional company on a weekday (years 2000-2099)."""
    t = find_ticker(symbol)
    day = parse_date(date, "date", 2000, 2099)
    if day.weekday() >= 5:
        raise ToolError(
            f"No quote for {t.symbol} on {day.isoformat()}: it is a {WEEKDAYS[day.weekday()]} and the "
            "market is closed on weekends. Use a weekday."
        )
    return quote(t, day)


def hhmm_text(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def flights_between(o: City, d: City, day: dt.date) -> list[dict[str, Any]]:
    dist = haversine_km(o, d)
    iso = day.isoformat()
    count = 3 + h("flights", o.name, d.name, iso) % 3
    out: list[dict[str, Any]] = []
    numbers_used: set[str] = set()
    prices_used: set[int] = set()
    for i in range(count):
        hi = h("flight", o.name, d.name, iso, i)
        code, airline = AIRLINES[hi % len(AIRLINES)]
        num = 100 + (hi >> 8) % 900
        while f"{code}{num}" in numbers_used:
            num += 1
        number = f"{code}{num}"
        numbers_used.add(number)
        stops = 0 if dist < 1200 else (1 if (hi >> 20) % 3 == 0 or dist > 9000 else 0)
        depart = 5 * 60 + ((hi >> 24) % 204) * 5
        duration = int(dist / 820 * 60 + 40 + stops * (55 + (hi >> 32) % 80))
        cents = int((45 + dist * 0.075 * (0.75 + ((hi >> 40) % 60) / 100) + (35 if stops == 0 else -20)) * 100)
        cents = cents - cents % 100 + (hi >> 48) % 100
        while cents in prices_used:
            cents += 100
        prices_used.add(cents)
        arrive = depart + duration + d.utc_offset - o.utc_offset
        out.append(
            {
                "flight_number": number,
                "airline": airline,
                "depart_time": hhmm_text(depart),
                "arrive_time": hhmm_text(arrive % 1440),
                "arrive_day_offset": arrive // 1440,
                "duration_min": duration,
                "stops": stops,
                "price": rounded(cents / 100, 2),
            }
        )
    return out


FLIGHT_SORT: dict[str, Callable[[dict[str, Any]], tuple]] = {
    "price": lambda f: (f["price"], f["flight_number"]),
    "departure": lambda f: (f["depart_time"], f["flight_number"]),
    "duration": lambda f: (f["duration_min"], f["flight_number"]),
}


def search_flights(
    ctx: ToolContext | None,
    origin: str,
    destination: str,
    date: str,
    max_price: float | None = None,
    sort_by: str = "price",
) -> dict[str, Any]:
    """Simulated one-way economy flights between two cities on a date; prices in USD."""
    o = find_city(origin, "origin")
    d = find_city(destination, "destination")
    if o == d:
        raise ToolError(f"origin and destination are the same city ({o.name})")
    day = parse_date(date, "date", 2000, 2099)
    key = FLIGHT_SORT.get(str(sort_by).strip().lower()) if isinstance(sort_by, str) else None
    if key is None:
        raise ToolError(f"sort_by must be one of {', '.join(FLIGHT_SORT)}, got {show(sort_by)}")
    flights = flights_between(o, d, day)
    if max_price is not None:
        limit = number_arg(max_price, "max_price", 0, 1e9)
        flights = [f for f in flights if f["price"] <= limit]
    flights.sort(key=key)
    return {
        "origin": o.name,
        "destination": d.name,
        "date": day.isoformat(),
        "currency": "USD",
        "count": len(flights),
        "flights": flights[:10],
    }


def define_word(ctx: ToolContext | None, word: str) -> dict[str, Any]:
    """Part of speech and definition of an English word from the built-in dictionary."""
    w = find_word(word)
    return {"word": w.word, "part_of_speech": w.pos, "definition": w.definition}


def get_population(ctx: ToolContext | None, city: str) -> dict[str, Any]:
    """Population of a city (not of its country)."""
    c = find_city(city)
    return {"city": c.name, "country": c.country, "population": c.population}


def get_country_info(ctx: ToolContext | None, country: str) -> dict[str, Any]:
    """Capital, continent, population, currency, languages and calling code of a country."""
    c = find_country(country)
    return {
        "country": c.name,
        "capital": c.capital,
        "continent": c.continent,
        "population": c.population,
        "currency": c.currency,
        "languages": list(c.languages),
        "calling_code": c.calling_code,
    }


def get_distance(ctx: ToolContext | None, city_a: str, city_b: str, unit: str = "km") -> dict[str, Any]:
    """Great-circle distance between two cities in whole kilometres or miles."""
    a = find_city(city_a, "city_a")
    b = find_city(city_b, "city_b")
    u = lookup_key(unit) if isinstance(unit, str) else ""
    unit_code = {"km": "km", "kilometers": "km", "kilometres": "km", "mi": "mi", "miles": "mi"}.get(u)
    if unit_code is None:
        raise ToolError(f"unit must be 'km' or 'mi', got {show(unit)}")
    km = haversine_km(a, b)
    value = km if unit_code == "km" else km / 1.609344
    return {"city_a": a.name, "city_b": b.name, "distance": int(round(value)), "unit": unit_code}
