"""General function-calling domain: everyday APIs on deterministic simulated backends.

The ``general`` sub-agent owns thirteen general-purpose tools and no database. Every backend is a pure
function of its arguments (tables embedded in this module, values derived from a SHA-256 hash of the
arguments): no network, no clock, no randomness at call time, so a call returns the same result in every
episode and on every machine. Prices, forecasts and quotes are simulated; populations and exchange rates
are rounded, fixed figures.

Tools
=====

| Tool                | Arguments                            | Result                                       |
|---------------------|--------------------------------------|----------------------------------------------|
| `get_weather`       | `city`, `date` (YYYY-MM-DD)          | simulated forecast: condition, `high_c`,     |
|                     |                                      | `low_c`, precipitation, humidity, wind       |
| `convert_units`     | `value`, `from_unit`, `to_unit`      | length, mass, volume, temperature; exact     |
|                     |                                      | factors, `result` rounded to 4 decimals      |
| `convert_currency`  | `amount`, `from_currency`,           | fixed rates (45 ISO codes); `converted` to   |
|                     | `to_currency`                        | cents, `rate` to 6 decimals                  |
| `get_exchange_rate` | `from_currency`, `to_currency`       | the rate and its inverse                     |
| `date_diff`         | `start_date`, `end_date`             | days from start to end (negative if earlier) |
| `add_days`          | `date`, `days`                       | the resulting date and its weekday           |
| `convert_timezone`  | `time` (HH:MM), `date`, `from_tz`,   | fixed UTC offsets, no DST; a zone is a city, |
|                     | `to_tz`                              | an abbreviation (JST, CET...) or `UTC+05:30` |
| `get_stock_quote`   | `symbol`, `date`                     | simulated daily quote of 40 fictional        |
|                     |                                      | companies (open, high, low, close, volume)   |
| `search_flights`    | `origin`, `destination`, `date`,     | 3-5 simulated flights: number, airline,      |
|                     | `max_price`?, `sort_by`? (price,     | local times, duration, stops, USD price      |
|                     | departure or duration)               |                                              |
| `define_word`       | `word`                               | part of speech and definition (175 words)    |
| `get_population`    | `city`                               | population and country (123 cities)          |
| `get_country_info`  | `country`                            | capital, continent, population, currency,    |
|                     |                                      | languages, calling code (55 countries)       |
| `get_distance`      | `city_a`, `city_b`, `unit`? (km, mi) | great-circle distance in whole units         |

Unknown cities, countries, currencies, units, tickers and words raise a tool error that lists close
matches and a few valid examples. Errors are plain English and ASCII. There is no calculator here (the
``math`` agent owns it). Weekend dates have no stock quote (a tool error says so).

Generated tasks
===============

Tasks are scored at call level (BFCL style): every gold call is listed in ``SubTask.required_calls`` with
its acceptable values (a city in its usual spellings, dates as ISO strings, numbers as numbers, ``""`` for
an optional argument that may be omitted), and ``answer_type="facts"`` with 1-3 short facts taken from the
tool results (numbers as the tools render them, names, conditions), so the final answer must also be
right. The sub-query is the user's query; the last number of every answer is a fact.

| Template               | Calls (turns)     | Idea                                                        |
|------------------------|-------------------|-------------------------------------------------------------|
| `weather`              | 1 (1)             | forecast for a city and date (ISO or written dates)         |
| `weather_compare`      | 2 (1, parallel)   | which of two cities is warmer / colder on a date            |
| `flight_convert`       | 2 (2, chain)      | cheapest flight (maybe under a budget), fare in a currency  |
| `date_plan`            | 2 (2, chain)      | days between two dates, then that many days later + weekday |
| `meeting_weather`      | 2 (2, chain)      | meeting time in another city's zone, then its weather       |
| `units`                | 1-2 (1, parallel) | one or two unit conversions, often inside a story           |
| `stock_compare`        | 2 (1, parallel)   | two tickers on one date, or one ticker on two dates         |
| `define`               | 1-2 (1, parallel) | definitions of one or two words                             |
| `lookup`               | 1-2 (1)           | similar tools: city population, country info, exchange rate |
| `country_money`        | 2 (2, chain)      | a country's currency, then cash converted into it           |
| `distance`             | 1-2 (1)           | distance in km or miles; or which of two cities is farther  |
| `trip_budget` *        | 3 (2)             | flight + weather in parallel, then the fare converted       |
| `stock_in_currency` *  | 2 (2, chain)      | a closing price converted to another currency               |
| `weather_fahrenheit` * | 2 (2, chain)      | forecast, then the high converted to Fahrenheit             |

\\* test split only (``meta["test_only_template"] = True``; about 21% of test tasks). About a third of the
queries carry a distractor sentence (another city, an irrelevant number). ``meta`` also holds ``calls``
and ``parallel`` (whether a turn has several calls).

Splits
======

Each entity table is partitioned deterministically (sorted by a SHA-256 hash of the name; 10% validation,
10% test, the rest train), independent of the seed: cities (99/12/12), countries, tickers (32/4/4), words,
unit pairs, and the dates of 2025-2026 used in queries. Currency pairs are split by a cyclic design over
the 45 currencies, so that every currency has 36 train, 4 validation and 4 test partners and a pair and
its reverse share a split. Sizes: 20000 train, 2000 validation, 2000 test. :func:`split_entities` lists
the entities of a split.

Parts for collaborative tasks
=============================

:func:`currency_part` (convert an amount to another currency of the split) and :func:`weather_part` (a
forecast for a city and date of the split) return a ``general`` :class:`~joy_env.core.SubTask` plus the
values a caller needs to build its facts.
"""

from __future__ import annotations

import datetime as dt
import difflib
import functools
import hashlib
import math
import numbers
import random
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from joy_env.core import SPLITS, Domain, SubTask, Task, Tool, ToolContext, ToolError, check_index, check_split

__all__ = [
    "SIZES",
    "SYSTEM_PROMPT",
    "TEMPLATES",
    "TEST_ONLY_TEMPLATES",
    "TOOLS",
    "GeneralTaskSource",
    "add_days",
    "convert_currency",
    "convert_timezone",
    "convert_units",
    "currency_part",
    "date_diff",
    "define_word",
    "domain",
    "get_country_info",
    "get_distance",
    "get_exchange_rate",
    "get_population",
    "get_stock_quote",
    "get_weather",
    "search_flights",
    "split_entities",
    "task_source",
    "weather_part",
]

SIZES = {"train": 20000, "validation": 2000, "test": 2000}

# ------------------------------------------------------------------------------------------------ tables


@dataclass(frozen=True)
class City:
    name: str
    country: str
    lat: float
    lon: float
    population: int
    utc_offset: int  # minutes, fixed (no DST)
    tz: str  # abbreviation of the zone ("" if none fits)
    aliases: tuple[str, ...] = ()


# name, country, lat, lon, population, UTC offset (minutes), zone abbreviation, aliases
_CITY_ROWS: tuple[tuple[Any, ...], ...] = (
    ("Amsterdam", "Netherlands", 52.37, 4.90, 921000, 60, "CET", ()),
    ("Athens", "Greece", 37.98, 23.73, 643000, 120, "EET", ()),
    ("Auckland", "New Zealand", -36.85, 174.76, 1657000, 720, "NZST", ()),
    ("Bangkok", "Thailand", 13.76, 100.50, 10539000, 420, "ICT", ()),
    ("Barcelona", "Spain", 41.39, 2.17, 1636000, 60, "CET", ()),
    ("Beijing", "China", 39.90, 116.41, 21540000, 480, "", ("Peking",)),
    ("Berlin", "Germany", 52.52, 13.40, 3645000, 60, "CET", ()),
    ("Bogota", "Colombia", 4.71, -74.07, 7181000, -300, "COT", ()),
    ("Boston", "United States", 42.36, -71.06, 675000, -300, "EST", ()),
    ("Brussels", "Belgium", 50.85, 4.35, 1209000, 60, "CET", ()),
    ("Budapest", "Hungary", 47.50, 19.04, 1752000, 60, "CET", ()),
    ("Buenos Aires", "Argentina", -34.60, -58.38, 3075000, -180, "ART", ()),
    ("Cairo", "Egypt", 30.04, 31.24, 9540000, 120, "EET", ()),
    ("Cape Town", "South Africa", -33.92, 18.42, 4618000, 120, "SAST", ()),
    ("Chicago", "United States", 41.88, -87.63, 2746000, -360, "CST", ()),
    ("Copenhagen", "Denmark", 55.68, 12.57, 644000, 60, "CET", ()),
    ("Dallas", "United States", 32.78, -96.80, 1304000, -360, "CST", ()),
    ("Delhi", "India", 28.70, 77.10, 16787000, 330, "IST", ("New Delhi",)),
    ("Denver", "United States", 39.74, -104.99, 715000, -420, "MST", ()),
    ("Dubai", "United Arab Emirates", 25.20, 55.27, 3331000, 240, "GST", ()),
    ("Dublin", "Ireland", 53.35, -6.26, 592000, 0, "GMT", ()),
    ("Edinburgh", "United Kingdom", 55.95, -3.19, 527000, 0, "GMT", ()),
    ("Frankfurt", "Germany", 50.11, 8.68, 773000, 60, "CET", ()),
    ("Geneva", "Switzerland", 46.20, 6.14, 203000, 60, "CET", ()),
    ("Hamburg", "Germany", 53.55, 9.99, 1841000, 60, "CET", ()),
    ("Hanoi", "Vietnam", 21.03, 105.85, 8054000, 420, "ICT", ()),
    ("Helsinki", "Finland", 60.17, 24.94, 656000, 120, "EET", ()),
    ("Ho Chi Minh City", "Vietnam", 10.82, 106.63, 8993000, 420, "ICT", ("Saigon",)),
    ("Honolulu", "United States", 21.31, -157.86, 350000, -600, "HST", ()),
    ("Istanbul", "Turkey", 41.01, 28.98, 15460000, 180, "TRT", ()),
    ("Jakarta", "Indonesia", -6.21, 106.85, 10562000, 420, "WIB", ()),
    ("Johannesburg", "South Africa", -26.20, 28.05, 5635000, 120, "SAST", ()),
    ("Karachi", "Pakistan", 24.86, 67.01, 14910000, 300, "PKT", ()),
    ("Kathmandu", "Nepal", 27.72, 85.32, 1442000, 345, "NPT", ()),
    ("Kuala Lumpur", "Malaysia", 3.14, 101.69, 1982000, 480, "MYT", ()),
    ("Lagos", "Nigeria", 6.52, 3.38, 15388000, 60, "WAT", ()),
    ("Lima", "Peru", -12.05, -77.04, 9751000, -300, "PET", ()),
    ("Lisbon", "Portugal", 38.72, -9.14, 545000, 0, "WET", ()),
    ("London", "United Kingdom", 51.51, -0.13, 8982000, 0, "GMT", ()),
    ("Los Angeles", "United States", 34.05, -118.24, 3898000, -480, "PST", ("LA",)),
    ("Madrid", "Spain", 40.42, -3.70, 3223000, 60, "CET", ()),
    ("Manila", "Philippines", 14.60, 120.98, 1846000, 480, "PHT", ()),
    ("Marrakesh", "Morocco", 31.63, -7.99, 929000, 60, "", ("Marrakech",)),
    ("Melbourne", "Australia", -37.81, 144.96, 5078000, 600, "AEST", ()),
    ("Mexico City", "Mexico", 19.43, -99.13, 9209000, -360, "CST", ()),
    ("Miami", "United States", 25.76, -80.19, 442000, -300, "EST", ()),
    ("Milan", "Italy", 45.46, 9.19, 1352000, 60, "CET", ()),
    ("Montreal", "Canada", 45.50, -73.57, 1762000, -300, "EST", ()),
    ("Moscow", "Russia", 55.76, 37.62, 12655000, 180, "MSK", ()),
    ("Mumbai", "India", 19.08, 72.88, 12442000, 330, "IST", ("Bombay",)),
    ("Munich", "Germany", 48.14, 11.58, 1488000, 60, "CET", ()),
    ("Nairobi", "Kenya", -1.29, 36.82, 4397000, 180, "EAT", ()),
    ("New York", "United States", 40.71, -74.01, 8336000, -300, "EST", ("New York City", "NYC")),
    ("Osaka", "Japan", 34.69, 135.50, 2753000, 540, "JST", ()),
    ("Oslo", "Norway", 59.91, 10.75, 697000, 60, "CET", ()),
    ("Paris", "France", 48.86, 2.35, 2161000, 60, "CET", ()),
    ("Perth", "Australia", -31.95, 115.86, 2085000, 480, "AWST", ()),
    ("Prague", "Czech Republic", 50.08, 14.44, 1309000, 60, "CET", ()),
    ("Quito", "Ecuador", -0.18, -78.47, 2011000, -300, "", ()),
    ("Reykjavik", "Iceland", 64.15, -21.94, 131000, 0, "GMT", ()),
    ("Rio de Janeiro", "Brazil", -22.91, -43.17, 6748000, -180, "BRT", ("Rio",)),
    ("Rome", "Italy", 41.90, 12.50, 2873000, 60, "CET", ()),
    ("San Francisco", "United States", 37.77, -122.42, 815000, -480, "PST", ("SF",)),
    ("Santiago", "Chile", -33.45, -70.67, 6310000, -240, "CLT", ("Santiago de Chile",)),
    ("Sao Paulo", "Brazil", -23.55, -46.63, 12325000, -180, "BRT", ()),
    ("Seattle", "United States", 47.61, -122.33, 737000, -480, "PST", ()),
    ("Seoul", "South Korea", 37.57, 126.98, 9776000, 540, "KST", ()),
    ("Shanghai", "China", 31.23, 121.47, 24870000, 480, "", ()),
    ("Singapore", "Singapore", 1.35, 103.82, 5454000, 480, "SGT", ()),
    ("St. John's", "Canada", 47.56, -52.71, 110000, -210, "NST", ("St Johns", "Saint John's")),
    ("Stockholm", "Sweden", 59.33, 18.07, 975000, 60, "CET", ()),
    ("Sydney", "Australia", -33.87, 151.21, 5312000, 600, "AEST", ()),
    ("Adelaide", "Australia", -34.93, 138.60, 1376000, 570, "ACST", ()),
    ("Tokyo", "Japan", 35.68, 139.69, 13960000, 540, "JST", ()),
    ("Toronto", "Canada", 43.65, -79.38, 2794000, -300, "EST", ()),
    ("Vancouver", "Canada", 49.28, -123.12, 675000, -480, "PST", ()),
    ("Vienna", "Austria", 48.21, 16.37, 1897000, 60, "CET", ()),
    ("Warsaw", "Poland", 52.23, 21.01, 1794000, 60, "CET", ()),
    ("Zurich", "Switzerland", 47.38, 8.54, 421000, 60, "CET", ()),
    ("Krakow", "Poland", 50.06, 19.94, 780000, 60, "CET", ("Cracow",)),
    ("Lyon", "France", 45.76, 4.84, 522000, 60, "CET", ()),
    ("Manchester", "United Kingdom", 53.48, -2.24, 553000, 0, "GMT", ()),
    ("Porto", "Portugal", 41.15, -8.61, 232000, 0, "WET", ()),
    ("Seville", "Spain", 37.39, -5.98, 688000, 60, "CET", ("Sevilla",)),
    ("Kyoto", "Japan", 35.01, 135.77, 1464000, 540, "JST", ()),
    ("Busan", "South Korea", 35.18, 129.08, 3429000, 540, "KST", ("Pusan",)),
    ("Chennai", "India", 13.08, 80.27, 7088000, 330, "IST", ("Madras",)),
    ("Bangalore", "India", 12.97, 77.59, 8443000, 330, "IST", ("Bengaluru",)),
    ("Lahore", "Pakistan", 31.55, 74.34, 11126000, 300, "PKT", ()),
    ("Alexandria", "Egypt", 31.20, 29.92, 5200000, 120, "EET", ()),
    ("Casablanca", "Morocco", 33.57, -7.59, 3359000, 60, "", ()),
    ("Accra", "Ghana", 5.60, -0.19, 2291000, 0, "GMT", ()),
    ("Addis Ababa", "Ethiopia", 9.03, 38.74, 3384000, 180, "EAT", ()),
    ("Medellin", "Colombia", 6.24, -75.58, 2529000, -300, "COT", ()),
    ("Guadalajara", "Mexico", 20.66, -103.35, 1495000, -360, "CST", ()),
    ("Wellington", "New Zealand", -41.29, 174.78, 215000, 720, "NZST", ()),
    ("Brisbane", "Australia", -27.47, 153.03, 2560000, 600, "AEST", ()),
    ("Anchorage", "United States", 61.22, -149.90, 291000, -540, "AKST", ()),
    ("Phoenix", "United States", 33.45, -112.07, 1608000, -420, "MST", ()),
    ("Ottawa", "Canada", 45.42, -75.70, 1017000, -300, "EST", ()),
    ("Calgary", "Canada", 51.05, -114.07, 1336000, -420, "MST", ()),
    ("Valencia", "Spain", 39.47, -0.38, 792000, 60, "CET", ()),
    ("Naples", "Italy", 40.85, 14.27, 909000, 60, "CET", ("Napoli",)),
    ("Gothenburg", "Sweden", 57.71, 11.97, 583000, 60, "CET", ()),
    ("Bergen", "Norway", 60.39, 5.32, 285000, 60, "CET", ()),
    ("Antwerp", "Belgium", 51.22, 4.40, 529000, 60, "CET", ()),
    ("Rotterdam", "Netherlands", 51.92, 4.48, 651000, 60, "CET", ()),
    ("Salzburg", "Austria", 47.81, 13.06, 155000, 60, "CET", ()),
    ("Cordoba", "Argentina", -31.42, -64.18, 1391000, -180, "ART", ()),
    ("Valparaiso", "Chile", -33.05, -71.62, 296000, -240, "CLT", ()),
    ("Cusco", "Peru", -13.53, -71.97, 428000, -300, "PET", ("Cuzco",)),
    ("Cebu", "Philippines", 10.32, 123.89, 964000, 480, "PHT", ("Cebu City",)),
    ("Chiang Mai", "Thailand", 18.79, 98.98, 131000, 420, "ICT", ()),
    ("Surabaya", "Indonesia", -7.25, 112.75, 2874000, 420, "WIB", ()),
    ("Durban", "South Africa", -29.86, 31.02, 3720000, 120, "SAST", ()),
    ("Mombasa", "Kenya", -4.04, 39.67, 1208000, 180, "EAT", ()),
    ("Izmir", "Turkey", 38.42, 27.14, 4367000, 180, "TRT", ()),
    ("Ankara", "Turkey", 39.93, 32.86, 5663000, 180, "TRT", ()),
    ("Abu Dhabi", "United Arab Emirates", 24.45, 54.38, 1483000, 240, "GST", ()),
    ("Riyadh", "Saudi Arabia", 24.71, 46.68, 7676000, 180, "AST", ()),
    ("Jeddah", "Saudi Arabia", 21.49, 39.19, 4697000, 180, "AST", ("Jidda",)),
    ("Tel Aviv", "Israel", 32.09, 34.78, 460000, 120, "", ()),
    ("Saint Petersburg", "Russia", 59.93, 30.34, 5384000, 180, "MSK", ("St. Petersburg", "St Petersburg")),
)


@dataclass(frozen=True)
class Country:
    name: str
    capital: str
    continent: str
    population: int
    currency: str
    languages: tuple[str, ...]
    calling_code: str
    aliases: tuple[str, ...] = ()


_COUNTRY_ROWS: tuple[tuple[Any, ...], ...] = (
    (
        "United States",
        "Washington DC",
        "North America",
        333300000,
        "USD",
        ("English",),
        "+1",
        ("USA", "US", "United States of America", "America"),
    ),
    ("Canada", "Ottawa", "North America", 39000000, "CAD", ("English", "French"), "+1", ()),
    ("Mexico", "Mexico City", "North America", 128000000, "MXN", ("Spanish",), "+52", ()),
    ("Brazil", "Brasilia", "South America", 216000000, "BRL", ("Portuguese",), "+55", ()),
    ("Argentina", "Buenos Aires", "South America", 46000000, "ARS", ("Spanish",), "+54", ()),
    ("Chile", "Santiago", "South America", 19600000, "CLP", ("Spanish",), "+56", ()),
    ("Colombia", "Bogota", "South America", 52000000, "COP", ("Spanish",), "+57", ()),
    ("Peru", "Lima", "South America", 34000000, "PEN", ("Spanish", "Quechua"), "+51", ()),
    ("Ecuador", "Quito", "South America", 18000000, "USD", ("Spanish",), "+593", ()),
    (
        "United Kingdom",
        "London",
        "Europe",
        67700000,
        "GBP",
        ("English",),
        "+44",
        ("UK", "Great Britain", "Britain"),
    ),
    ("Ireland", "Dublin", "Europe", 5200000, "EUR", ("English", "Irish"), "+353", ()),
    ("France", "Paris", "Europe", 68000000, "EUR", ("French",), "+33", ()),
    ("Germany", "Berlin", "Europe", 84000000, "EUR", ("German",), "+49", ()),
    ("Spain", "Madrid", "Europe", 48000000, "EUR", ("Spanish",), "+34", ()),
    ("Portugal", "Lisbon", "Europe", 10400000, "EUR", ("Portuguese",), "+351", ()),
    ("Italy", "Rome", "Europe", 59000000, "EUR", ("Italian",), "+39", ()),
    ("Netherlands", "Amsterdam", "Europe", 17800000, "EUR", ("Dutch",), "+31", ("Holland",)),
    ("Belgium", "Brussels", "Europe", 11700000, "EUR", ("Dutch", "French", "German"), "+32", ()),
    ("Austria", "Vienna", "Europe", 9100000, "EUR", ("German",), "+43", ()),
    ("Switzerland", "Bern", "Europe", 8800000, "CHF", ("German", "French", "Italian", "Romansh"), "+41", ()),
    ("Greece", "Athens", "Europe", 10400000, "EUR", ("Greek",), "+30", ()),
    ("Finland", "Helsinki", "Europe", 5600000, "EUR", ("Finnish", "Swedish"), "+358", ()),
    ("Sweden", "Stockholm", "Europe", 10500000, "SEK", ("Swedish",), "+46", ()),
    ("Norway", "Oslo", "Europe", 5500000, "NOK", ("Norwegian",), "+47", ()),
    ("Denmark", "Copenhagen", "Europe", 5900000, "DKK", ("Danish",), "+45", ()),
    ("Iceland", "Reykjavik", "Europe", 390000, "ISK", ("Icelandic",), "+354", ()),
    ("Poland", "Warsaw", "Europe", 37600000, "PLN", ("Polish",), "+48", ()),
    ("Czech Republic", "Prague", "Europe", 10900000, "CZK", ("Czech",), "+420", ("Czechia",)),
    ("Hungary", "Budapest", "Europe", 9600000, "HUF", ("Hungarian",), "+36", ()),
    ("Turkey", "Ankara", "Asia", 85000000, "TRY", ("Turkish",), "+90", ("Turkiye",)),
    ("Russia", "Moscow", "Europe", 146000000, "RUB", ("Russian",), "+7", ("Russian Federation",)),
    ("Egypt", "Cairo", "Africa", 112000000, "EGP", ("Arabic",), "+20", ()),
    ("Morocco", "Rabat", "Africa", 37000000, "MAD", ("Arabic", "Berber"), "+212", ()),
    ("Nigeria", "Abuja", "Africa", 223000000, "NGN", ("English",), "+234", ()),
    ("Ghana", "Accra", "Africa", 34000000, "GHS", ("English",), "+233", ()),
    ("Kenya", "Nairobi", "Africa", 55000000, "KES", ("English", "Swahili"), "+254", ()),
    ("Ethiopia", "Addis Ababa", "Africa", 126000000, "ETB", ("Amharic",), "+251", ()),
    (
        "South Africa",
        "Pretoria",
        "Africa",
        62000000,
        "ZAR",
        ("Zulu", "Xhosa", "Afrikaans", "English"),
        "+27",
        (),
    ),
    ("United Arab Emirates", "Abu Dhabi", "Asia", 9500000, "AED", ("Arabic",), "+971", ("UAE",)),
    ("Saudi Arabia", "Riyadh", "Asia", 36900000, "SAR", ("Arabic",), "+966", ()),
    ("Israel", "Jerusalem", "Asia", 9800000, "ILS", ("Hebrew", "Arabic"), "+972", ()),
    ("India", "New Delhi", "Asia", 1430000000, "INR", ("Hindi", "English"), "+91", ()),
    ("Pakistan", "Islamabad", "Asia", 240000000, "PKR", ("Urdu", "English"), "+92", ()),
    ("Nepal", "Kathmandu", "Asia", 30900000, "NPR", ("Nepali",), "+977", ()),
    ("China", "Beijing", "Asia", 1410000000, "CNY", ("Mandarin",), "+86", ("PRC",)),
    ("Japan", "Tokyo", "Asia", 124000000, "JPY", ("Japanese",), "+81", ()),
    ("South Korea", "Seoul", "Asia", 51700000, "KRW", ("Korean",), "+82", ("Republic of Korea",)),
    ("Vietnam", "Hanoi", "Asia", 99000000, "VND", ("Vietnamese",), "+84", ("Viet Nam",)),
    ("Thailand", "Bangkok", "Asia", 71800000, "THB", ("Thai",), "+66", ()),
    ("Malaysia", "Kuala Lumpur", "Asia", 34300000, "MYR", ("Malay",), "+60", ()),
    ("Singapore", "Singapore", "Asia", 5900000, "SGD", ("English", "Malay", "Mandarin", "Tamil"), "+65", ()),
    ("Indonesia", "Jakarta", "Asia", 277000000, "IDR", ("Indonesian",), "+62", ()),
    ("Philippines", "Manila", "Asia", 117000000, "PHP", ("Filipino", "English"), "+63", ()),
    ("Australia", "Canberra", "Oceania", 26600000, "AUD", ("English",), "+61", ()),
    ("New Zealand", "Wellington", "Oceania", 5200000, "NZD", ("English", "Maori"), "+64", ()),
)

# ISO code -> (name, plural name used in queries, units per US dollar). The order matters: it defines the
# cyclic split of currency pairs (see _currency_split).
_CURRENCY_ROWS: tuple[tuple[str, str, str, str], ...] = (
    ("USD", "US dollar", "US dollars", "1"),
    ("EUR", "euro", "euros", "0.92"),
    ("GBP", "British pound", "British pounds", "0.79"),
    ("JPY", "Japanese yen", "Japanese yen", "151.2"),
    ("CNY", "Chinese yuan", "Chinese yuan", "7.24"),
    ("INR", "Indian rupee", "Indian rupees", "83.3"),
    ("CAD", "Canadian dollar", "Canadian dollars", "1.36"),
    ("AUD", "Australian dollar", "Australian dollars", "1.52"),
    ("CHF", "Swiss franc", "Swiss francs", "0.9"),
    ("SEK", "Swedish krona", "Swedish kronor", "10.6"),
    ("NOK", "Norwegian krone", "Norwegian kroner", "10.8"),
    ("DKK", "Danish krone", "Danish kroner", "6.87"),
    ("ISK", "Icelandic krona", "Icelandic kronur", "138.5"),
    ("PLN", "Polish zloty", "Polish zloty", "3.98"),
    ("CZK", "Czech koruna", "Czech koruna", "23.3"),
    ("HUF", "Hungarian forint", "Hungarian forint", "362"),
    ("TRY", "Turkish lira", "Turkish lira", "32.2"),
    ("RUB", "Russian ruble", "Russian rubles", "92.5"),
    ("BRL", "Brazilian real", "Brazilian reais", "5.05"),
    ("MXN", "Mexican peso", "Mexican pesos", "16.9"),
    ("ARS", "Argentine peso", "Argentine pesos", "870"),
    ("CLP", "Chilean peso", "Chilean pesos", "945"),
    ("COP", "Colombian peso", "Colombian pesos", "3900"),
    ("PEN", "Peruvian sol", "Peruvian soles", "3.72"),
    ("EGP", "Egyptian pound", "Egyptian pounds", "47.5"),
    ("MAD", "Moroccan dirham", "Moroccan dirhams", "10.05"),
    ("NGN", "Nigerian naira", "Nigerian naira", "1450"),
    ("GHS", "Ghanaian cedi", "Ghanaian cedis", "13.4"),
    ("KES", "Kenyan shilling", "Kenyan shillings", "132"),
    ("ETB", "Ethiopian birr", "Ethiopian birr", "57"),
    ("ZAR", "South African rand", "South African rand", "18.7"),
    ("AED", "UAE dirham", "UAE dirhams", "3.6725"),
    ("SAR", "Saudi riyal", "Saudi riyals", "3.75"),
    ("ILS", "Israeli shekel", "Israeli shekels", "3.7"),
    ("PKR", "Pakistani rupee", "Pakistani rupees", "278"),
    ("NPR", "Nepalese rupee", "Nepalese rupees", "133.3"),
    ("KRW", "South Korean won", "South Korean won", "1350"),
    ("VND", "Vietnamese dong", "Vietnamese dong", "25000"),
    ("THB", "Thai baht", "Thai baht", "36.5"),
    ("MYR", "Malaysian ringgit", "Malaysian ringgit", "4.75"),
    ("SGD", "Singapore dollar", "Singapore dollars", "1.35"),
    ("IDR", "Indonesian rupiah", "Indonesian rupiah", "15900"),
    ("PHP", "Philippine peso", "Philippine pesos", "57"),
    ("NZD", "New Zealand dollar", "New Zealand dollars", "1.66"),
    ("HKD", "Hong Kong dollar", "Hong Kong dollars", "7.82"),
)

# Fictional companies: symbol, name, base price in USD.
_TICKER_ROWS: tuple[tuple[str, str, float], ...] = (
    ("AQNX", "Aquanex Systems", 142.5),
    ("BRVL", "Brightvale Foods", 38.2),
    ("CDRL", "Cedarline Logistics", 76.9),
    ("DYNQ", "Dynaquest Energy", 58.4),
    ("ELMW", "Elmwood Pharma", 211.3),
    ("FLRX", "Flarex Robotics", 95.1),
    ("GLDF", "Goldfield Mining", 24.7),
    ("HVNS", "Havenstone Bank", 47.8),
    ("IRDX", "Iridex Optics", 133.6),
    ("JTWV", "Jetwave Airlines", 19.4),
    ("KSTL", "Keystone Steel", 31.2),
    ("LUMS", "Luminara Solar", 64.0),
    ("MRDN", "Meridian Health", 88.5),
    ("NBLA", "Nebula Cloud", 302.4),
    ("OKGR", "Oakgrove Timber", 27.3),
    ("PLRS", "Polaris Shipping", 53.9),
    ("QNTL", "Quantleaf Software", 176.2),
    ("RVRS", "Riverside Utilities", 41.6),
    ("SLTN", "Saltana Chemicals", 69.7),
    ("TRNX", "Trinex Semiconductors", 248.9),
    ("UMBR", "Umbra Security", 112.4),
    ("VRDA", "Verdana Farms", 15.8),
    ("WDSR", "Windsor Retail", 36.1),
    ("XLRT", "Xelerate Motors", 187.3),
    ("YRLW", "Yarrow Telecom", 22.6),
    ("ZPHR", "Zephyr Aerospace", 134.0),
    ("ACRN", "Acorn Insurance", 58.1),
    ("BLZT", "Blazetrail Outdoor", 29.9),
    ("CRSC", "Crescent Media", 44.4),
    ("DVLN", "Dovelane Textiles", 12.3),
    ("EMBR", "Emberly Games", 71.2),
    ("FRSP", "Frostpeak Beverages", 33.5),
    ("GRNP", "Granite Peak Construction", 49.6),
    ("HLXA", "Helixa Biotech", 157.8),
    ("INDG", "Indigo Fashion", 26.4),
    ("JSPW", "Jasper Water", 39.1),
    ("KNTC", "Kinetica Rail", 83.7),
    ("LYRA", "Lyra Audio", 61.3),
    ("MSTW", "Mistral Wind Power", 45.2),
    ("NRWF", "Northwind Foods", 52.8),
)

# word, part of speech, definition (lowercase letters and spaces only, so it survives answer normalisation)
_WORD_ROWS: tuple[tuple[str, str, str], ...] = (
    ("abandon", "verb", "leave behind and never return"),
    ("abundant", "adjective", "existing in large quantities"),
    ("accurate", "adjective", "correct in every detail"),
    ("adapt", "verb", "change to suit new conditions"),
    ("admire", "verb", "regard with respect and warm approval"),
    ("ambiguous", "adjective", "open to more than one interpretation"),
    ("ancient", "adjective", "belonging to the very distant past"),
    ("anxious", "adjective", "feeling worried or uneasy"),
    ("archive", "noun", "a collection of historical records"),
    ("arrogant", "adjective", "having an exaggerated sense of importance"),
    ("assemble", "verb", "fit together the parts of something"),
    ("audible", "adjective", "loud enough to be heard"),
    ("banquet", "noun", "a large formal meal for many people"),
    ("barren", "adjective", "too poor to produce much vegetation"),
    ("benevolent", "adjective", "well meaning and kindly"),
    ("blizzard", "noun", "a severe snowstorm with strong winds"),
    ("bold", "adjective", "willing to take risks"),
    ("boulder", "noun", "a very large rock"),
    ("brisk", "adjective", "active and energetic"),
    ("brittle", "adjective", "hard but easily broken"),
    ("candid", "adjective", "truthful and straightforward"),
    ("canyon", "noun", "a deep gorge with a river flowing through it"),
    ("cautious", "adjective", "careful to avoid danger or mistakes"),
    ("chronic", "adjective", "persisting for a long time"),
    ("clarify", "verb", "make something easier to understand"),
    ("coherent", "adjective", "logical and consistent"),
    ("collapse", "verb", "fall down suddenly"),
    ("compass", "noun", "an instrument that shows the direction of magnetic north"),
    ("concise", "adjective", "giving much information in few words"),
    ("conquer", "verb", "take control of by force"),
    ("courage", "noun", "the ability to do something that frightens you"),
    ("crucial", "adjective", "of great importance"),
    ("curious", "adjective", "eager to know or learn something"),
    ("debris", "noun", "scattered pieces of waste or remains"),
    ("decay", "verb", "rot through the action of bacteria"),
    ("delicate", "adjective", "easily broken or damaged"),
    ("diligent", "adjective", "showing care and effort in work"),
    ("dismal", "adjective", "depressing or gloomy"),
    ("dormant", "adjective", "temporarily inactive"),
    ("drought", "noun", "a long period without rain"),
    ("durable", "adjective", "able to withstand wear and damage"),
    ("eager", "adjective", "strongly wanting to do something"),
    ("eclipse", "noun", "the blocking of light from one celestial body by another"),
    ("elated", "adjective", "extremely happy and excited"),
    ("eloquent", "adjective", "fluent and persuasive in speaking"),
    ("embark", "verb", "go on board a ship or aircraft"),
    ("endure", "verb", "suffer something painful patiently"),
    ("enormous", "adjective", "very large in size"),
    ("erode", "verb", "gradually wear away"),
    ("estimate", "verb", "roughly calculate a value"),
    ("evacuate", "verb", "move people from a place of danger"),
    ("exhausted", "adjective", "extremely tired"),
    ("expand", "verb", "become larger"),
    ("fable", "noun", "a short story with a moral"),
    ("feasible", "adjective", "possible to do easily"),
    ("ferocious", "adjective", "savagely fierce"),
    ("fertile", "adjective", "able to produce abundant crops"),
    ("flourish", "verb", "grow in a healthy way"),
    ("fragile", "adjective", "easily broken"),
    ("frugal", "adjective", "sparing with money or food"),
    ("furnace", "noun", "an enclosed chamber for intense heating"),
    ("gallant", "adjective", "brave and heroic"),
    ("generous", "adjective", "willing to give more than expected"),
    ("glacier", "noun", "a slowly moving mass of ice"),
    ("gloomy", "adjective", "dark or poorly lit"),
    ("graceful", "adjective", "having elegance of movement"),
    ("gratitude", "noun", "the quality of being thankful"),
    ("habitat", "noun", "the natural home of an animal or plant"),
    ("harbor", "noun", "a sheltered place where ships can stay"),
    ("harvest", "noun", "the gathering of crops"),
    ("hesitate", "verb", "pause before saying or doing something"),
    ("hollow", "adjective", "having an empty space inside"),
    ("horizon", "noun", "the line where earth and sky appear to meet"),
    ("humble", "adjective", "not proud or arrogant"),
    ("hypothesis", "noun", "a proposed explanation used as a starting point"),
    ("idle", "adjective", "not active or in use"),
    ("illuminate", "verb", "light up"),
    ("immense", "adjective", "extremely large"),
    ("impartial", "adjective", "treating all sides equally"),
    ("inevitable", "adjective", "certain to happen"),
    ("inhabit", "verb", "live in a place"),
    ("innovate", "verb", "introduce new methods or ideas"),
    ("intricate", "adjective", "very complicated or detailed"),
    ("jovial", "adjective", "cheerful and friendly"),
    ("jubilant", "adjective", "feeling great happiness and triumph"),
    ("keen", "adjective", "having eagerness or enthusiasm"),
    ("kindle", "verb", "light a fire"),
    ("lament", "verb", "express grief passionately"),
    ("lantern", "noun", "a lamp with a protective case"),
    ("lavish", "adjective", "rich and elaborate"),
    ("legible", "adjective", "clear enough to read"),
    ("lenient", "adjective", "more merciful than expected"),
    ("linger", "verb", "stay in a place longer than necessary"),
    ("lucid", "adjective", "expressed clearly"),
    ("luminous", "adjective", "giving off light"),
    ("magnify", "verb", "make something appear larger"),
    ("meadow", "noun", "a field of grass and wildflowers"),
    ("meager", "adjective", "lacking in quantity"),
    ("melancholy", "noun", "a deep and lasting sadness"),
    ("migrate", "verb", "move from one region to another"),
    ("modest", "adjective", "not boastful about abilities"),
    ("monotonous", "adjective", "dull and lacking variety"),
    ("mundane", "adjective", "lacking interest or excitement"),
    ("narrate", "verb", "give a spoken account of events"),
    ("nimble", "adjective", "quick and light in movement"),
    ("nocturnal", "adjective", "active at night"),
    ("novice", "noun", "a person new to an activity"),
    ("nurture", "verb", "care for and encourage the growth of"),
    ("oasis", "noun", "a fertile spot in a desert"),
    ("obscure", "adjective", "not well known"),
    ("obsolete", "adjective", "no longer in use"),
    ("omen", "noun", "a sign of future good or evil"),
    ("opaque", "adjective", "not able to be seen through"),
    ("orchard", "noun", "a piece of land planted with fruit trees"),
    ("ornate", "adjective", "elaborately decorated"),
    ("outspoken", "adjective", "frank in stating opinions"),
    ("paradox", "noun", "a statement that seems to contradict itself"),
    ("peculiar", "adjective", "strange or odd"),
    ("persevere", "verb", "continue despite difficulty"),
    ("placid", "adjective", "calm and peaceful"),
    ("plateau", "noun", "an area of high level ground"),
    ("plausible", "adjective", "seeming reasonable or probable"),
    ("ponder", "verb", "think about carefully"),
    ("precise", "adjective", "exact and accurate"),
    ("prosper", "verb", "succeed financially"),
    ("prudent", "adjective", "acting with care for the future"),
    ("quaint", "adjective", "attractively unusual or old fashioned"),
    ("quarrel", "noun", "an angry argument"),
    ("radiant", "adjective", "shining brightly"),
    ("ravine", "noun", "a deep narrow gorge"),
    ("reluctant", "adjective", "unwilling and hesitant"),
    ("remedy", "noun", "a treatment for a disease or problem"),
    ("resilient", "adjective", "able to recover quickly from difficulty"),
    ("reverence", "noun", "deep respect for someone or something"),
    ("rigid", "adjective", "unable to bend"),
    ("robust", "adjective", "strong and healthy"),
    ("rustic", "adjective", "typical of the countryside"),
    ("scarce", "adjective", "insufficient for the demand"),
    ("serene", "adjective", "calm and untroubled"),
    ("shrewd", "adjective", "having sharp powers of judgment"),
    ("solitary", "adjective", "done or existing alone"),
    ("sparse", "adjective", "thinly scattered"),
    ("stagnant", "adjective", "having no current or flow"),
    ("sturdy", "adjective", "strongly built"),
    ("summit", "noun", "the highest point of a hill or mountain"),
    ("swift", "adjective", "happening quickly"),
    ("tedious", "adjective", "too long and boring"),
    ("temperate", "adjective", "having mild temperatures"),
    ("tranquil", "adjective", "free from disturbance"),
    ("tremor", "noun", "an involuntary shaking movement"),
    ("trivial", "adjective", "of little value or importance"),
    ("turbulent", "adjective", "full of conflict or disorder"),
    ("unanimous", "adjective", "fully in agreement"),
    ("vague", "adjective", "of uncertain or unclear meaning"),
    ("valiant", "adjective", "showing courage"),
    ("verdict", "noun", "a decision on an issue of fact in a court case"),
    ("vibrant", "adjective", "full of energy and life"),
    ("vigilant", "adjective", "keeping careful watch for danger"),
    ("vivid", "adjective", "producing powerful feelings or clear images"),
    ("wander", "verb", "walk slowly without a fixed route"),
    ("wary", "adjective", "feeling cautious about possible dangers"),
    ("whimsical", "adjective", "playfully quaint or fanciful"),
    ("wilderness", "noun", "an uncultivated and uninhabited region"),
    ("wither", "verb", "become dry and shrivelled"),
    ("yearn", "verb", "have an intense longing for something"),
    ("zealous", "adjective", "having great energy for a cause"),
    ("zenith", "noun", "the time at which something is most powerful"),
    ("abridge", "verb", "shorten a text without losing the sense"),
    ("beacon", "noun", "a fire or light set up as a signal"),
    ("cascade", "noun", "a small waterfall"),
    ("abroad", "adverb", "in or to a foreign country"),
    ("seldom", "adverb", "not often"),
    ("hence", "adverb", "as a consequence"),
    ("beneath", "preposition", "extending or directly underneath"),
    ("alas", "interjection", "an expression of grief or pity"),
)

# unit code -> (dimension, factor to the base unit as an exact decimal string, names accepted)
_UNIT_ROWS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("m", "length", "1", ("meters", "meter", "metres", "metre")),
    ("km", "length", "1000", ("kilometers", "kilometer", "kilometres", "kilometre")),
    ("cm", "length", "0.01", ("centimeters", "centimeter", "centimetres", "centimetre")),
    ("mm", "length", "0.001", ("millimeters", "millimeter", "millimetres", "millimetre")),
    ("mi", "length", "1609.344", ("miles", "mile")),
    ("yd", "length", "0.9144", ("yards", "yard")),
    ("ft", "length", "0.3048", ("feet", "foot")),
    ("in", "length", "0.0254", ("inches", "inch")),
    ("kg", "mass", "1", ("kilograms", "kilogram", "kilos", "kilo")),
    ("g", "mass", "0.001", ("grams", "gram")),
    ("mg", "mass", "0.000001", ("milligrams", "milligram")),
    ("lb", "mass", "0.45359237", ("pounds", "pound", "lbs")),
    ("oz", "mass", "0.028349523125", ("ounces", "ounce")),
    ("t", "mass", "1000", ("tonnes", "tonne", "metric tons", "metric ton")),
    ("L", "volume", "1", ("liters", "liter", "litres", "litre")),
    ("mL", "volume", "0.001", ("milliliters", "milliliter", "millilitres", "millilitre")),
    ("gal", "volume", "3.785411784", ("US gallons", "gallons", "gallon", "US gallon")),
    ("qt", "volume", "0.946352946", ("US quarts", "quarts", "quart")),
    ("pt", "volume", "0.473176473", ("US pints", "pints", "pint")),
    ("cup", "volume", "0.2365882365", ("US cups", "cups")),
    ("fl_oz", "volume", "0.0295735295625", ("US fluid ounces", "fluid ounces", "fluid ounce", "fl oz")),
    ("m3", "volume", "1000", ("cubic meters", "cubic meter", "cubic metres", "cubic metre")),
    ("C", "temperature", "", ("degrees Celsius", "celsius", "centigrade", "degC")),
    ("F", "temperature", "", ("degrees Fahrenheit", "fahrenheit", "degF")),
    ("K", "temperature", "", ("kelvins", "kelvin")),
)

# Fixed zone abbreviations (no DST): abbreviation -> minutes east of UTC. Ambiguous abbreviations take the
# meaning given here: CST = US Central, IST = India, AST = Arabia.
_TZ_OFFSETS: dict[str, int] = {
    "UTC": 0,
    "GMT": 0,
    "WET": 0,
    "CET": 60,
    "WAT": 60,
    "EET": 120,
    "SAST": 120,
    "CAT": 120,
    "MSK": 180,
    "EAT": 180,
    "TRT": 180,
    "AST": 180,
    "GST": 240,
    "PKT": 300,
    "IST": 330,
    "NPT": 345,
    "ICT": 420,
    "WIB": 420,
    "SGT": 480,
    "HKT": 480,
    "PHT": 480,
    "MYT": 480,
    "AWST": 480,
    "JST": 540,
    "KST": 540,
    "ACST": 570,
    "AEST": 600,
    "NZST": 720,
    "NST": -210,
    "BRT": -180,
    "ART": -180,
    "CLT": -240,
    "EST": -300,
    "COT": -300,
    "PET": -300,
    "CST": -360,
    "MST": -420,
    "PST": -480,
    "AKST": -540,
    "HST": -600,
}

_AIRLINES: tuple[tuple[str, str], ...] = (
    ("SW", "Skyward Airways"),
    ("BH", "Blue Heron Air"),
    ("PJ", "Polar Jet"),
    ("SL", "Sunline"),
    ("MD", "Meridian Air"),
    ("KX", "Kestrel Express"),
    ("OV", "Overland Air"),
    ("TQ", "Turquoise Airlines"),
)

_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


@dataclass(frozen=True)
class Ticker:
    symbol: str
    company: str
    base: float


@dataclass(frozen=True)
class Word:
    word: str
    pos: str
    definition: str


@dataclass(frozen=True)
class Unit:
    code: str
    dimension: str
    factor: Fraction
    names: tuple[str, ...]


@dataclass(frozen=True)
class Currency:
    code: str
    name: str
    plural: str
    per_usd: Fraction


# ------------------------------------------------------------------------------------------- lookups


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


def _unknown(
    kind: str, value: str, names: Sequence[str], examples: Sequence[str], hint: str = ""
) -> ToolError:
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
        raise ToolError(
            f"{what} must be a finite number between {_fmt(lo)} and {_fmt(hi)}, got {_show(value)}"
        )
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


# ------------------------------------------------------------------------------------------------ tools


def _forecast(city: City, day: dt.date) -> dict[str, Any]:
    lat = abs(city.lat)
    mean = 27.0 - 0.2 * lat - 0.0033 * lat * lat
    peak = 200 if city.lat >= 0 else 17
    seasonal = 0.2 * lat * math.cos(2 * math.pi * (day.timetuple().tm_yday - peak) / 365.25)
    hk = _h("weather", city.name, day.isoformat())
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
        condition = ("sunny", "partly cloudy", "cloudy", "sunny", "partly cloudy", "fog", "windy")[
            (hk >> 40) % 7
        ]
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
    c = _find_city(city)
    day = _parse_date(date, "date", 2000, 2099)
    return _forecast(c, day)


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
    x = _number(value, "value", -1e12, 1e12)
    src = _find_unit(from_unit, "from_unit")
    dst = _find_unit(to_unit, "to_unit")
    if src.dimension != dst.dimension:
        raise ToolError(
            f"Cannot convert {src.code} ({src.dimension}) to {dst.code} ({dst.dimension}): "
            "both units must measure the same quantity"
        )
    exact = Fraction(repr(x))
    if src.dimension == "temperature":
        kelvin = _to_kelvin(exact, src.code)
        if kelvin < 0:
            raise ToolError(f"{_fmt(_num(x, 6))} {src.code} is below absolute zero")
        result = _from_kelvin(kelvin, dst.code)
    else:
        if x < 0:
            raise ToolError(f"value must not be negative for {src.dimension} units")
        result = exact * src.factor / dst.factor
    return {
        "value": _num(x, 6),
        "from_unit": src.code,
        "to_unit": dst.code,
        "dimension": src.dimension,
        "result": _num(result, 4),
    }


def _rate(src: Currency, dst: Currency) -> Fraction:
    return dst.per_usd / src.per_usd


def convert_currency(ctx: ToolContext | None, amount: float, from_currency: str, to_currency: str) -> dict:
    """Convert an amount with the fixed rate table; ``converted`` is rounded to cents."""
    x = _number(amount, "amount", 0, 1e12)
    src = _find_currency(from_currency, "from_currency")
    dst = _find_currency(to_currency, "to_currency")
    rate = _rate(src, dst)
    return {
        "amount": _num(x, 6),
        "from_currency": src.code,
        "to_currency": dst.code,
        "rate": _num(rate, 6),
        "converted": _num(Fraction(repr(x)) * rate, 2),
    }


def get_exchange_rate(ctx: ToolContext | None, from_currency: str, to_currency: str) -> dict[str, Any]:
    """Units of ``to_currency`` per one unit of ``from_currency`` (and the inverse), 6 decimals."""
    src = _find_currency(from_currency, "from_currency")
    dst = _find_currency(to_currency, "to_currency")
    return {
        "from_currency": src.code,
        "to_currency": dst.code,
        "rate": _num(_rate(src, dst), 6),
        "inverse_rate": _num(_rate(dst, src), 6),
    }


def date_diff(ctx: ToolContext | None, start_date: str, end_date: str) -> dict[str, Any]:
    """Days from ``start_date`` to ``end_date`` (negative if the end is earlier)."""
    s = _parse_date(start_date, "start_date")
    e = _parse_date(end_date, "end_date")
    return {"start_date": s.isoformat(), "end_date": e.isoformat(), "days": (e - s).days}


def add_days(ctx: ToolContext | None, date: str, days: int) -> dict[str, Any]:
    """The date ``days`` days after ``date`` (before, if negative) and its weekday."""
    start = _parse_date(date, "date")
    if isinstance(days, bool) or not isinstance(days, numbers.Integral) or abs(days) > 36500:
        raise ToolError("days must be an integer between -36500 and 36500")
    result = start + dt.timedelta(days=int(days))
    if not 1900 <= result.year <= 2100:
        raise ToolError(f"the result {result.isoformat()} is out of range: years 1900-2100 are supported")
    return {
        "date": start.isoformat(),
        "days": int(days),
        "result_date": result.isoformat(),
        "weekday": _WEEKDAYS[result.weekday()],
    }


_TIME_RE = re.compile(r"(\d{1,2}):(\d{2})(?:\s*([ap])\.?\s*m\.?)?", re.I)
_UTC_RE = re.compile(r"(?:utc|gmt)\s*([+-])\s*(\d{1,2})(?::?(\d{2}))?", re.I)


def _parse_zone(value: object, what: str) -> tuple[str, int]:
    text = _text(value, what)
    code = text.upper()
    if code in _TZ_OFFSETS:
        return code, _TZ_OFFSETS[code]
    m = _UTC_RE.fullmatch(text)
    if m:
        hours, minutes = int(m.group(2)), int(m.group(3) or 0)
        offset = (hours * 60 + minutes) * (1 if m.group(1) == "+" else -1)
        if minutes >= 60 or not -720 <= offset <= 840:
            raise ToolError(f"{what} {_show(text)} is not a valid UTC offset (UTC-12:00 to UTC+14:00)")
        return _offset_label(offset), offset
    try:
        city = _find_city(text, what)
    except ToolError:
        raise ToolError(
            f"Unknown time zone {_show(text)} for {what}. Use a city from the table (e.g. Tokyo), an "
            "abbreviation (e.g. JST, CET, EST, IST) or an offset like UTC+05:30."
        ) from None
    return city.name, city.utc_offset


def convert_timezone(ctx: ToolContext | None, time: str, date: str, from_tz: str, to_tz: str) -> dict:
    """Convert a local time on a date between fixed-offset zones (no daylight saving time)."""
    text = _text(time, "time")
    m = _TIME_RE.fullmatch(text)
    if m is None:
        raise ToolError(f"time must look like HH:MM (24-hour), got {_show(text)}")
    hour, minute = int(m.group(1)), int(m.group(2))
    if m.group(3):
        if not 1 <= hour <= 12:
            raise ToolError(f"time {_show(text)}: the hour must be 1-12 with am/pm")
        hour = hour % 12 + (12 if m.group(3).lower() == "p" else 0)
    if hour > 23 or minute > 59:
        raise ToolError(f"time {_show(text)} is not a valid time of day")
    day = _parse_date(date, "date")
    src_label, src_off = _parse_zone(from_tz, "from_tz")
    dst_label, dst_off = _parse_zone(to_tz, "to_tz")
    moment = dt.datetime(day.year, day.month, day.day, hour, minute) + dt.timedelta(minutes=dst_off - src_off)
    return {
        "time": f"{hour:02d}:{minute:02d}",
        "date": day.isoformat(),
        "from_tz": src_label,
        "to_tz": dst_label,
        "from_utc_offset": _offset_label(src_off),
        "to_utc_offset": _offset_label(dst_off),
        "converted_time": moment.strftime("%H:%M"),
        "converted_date": moment.date().isoformat(),
        "day_shift": (moment.date() - day).days,
    }


def _quote(t: Ticker, day: dt.date) -> dict[str, Any]:
    n = day.toordinal()
    ht = _h("ticker", t.symbol)
    period = 160 + ht % 200
    phase = (ht >> 16) % 1000 / 1000 * 2 * math.pi
    hq = _h("quote", t.symbol, day.isoformat())
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
        "open": _num(open_, 2),
        "high": _num(high, 2),
        "low": _num(low, 2),
        "close": _num(close, 2),
        "volume": 100000 + _h("volume", t.symbol, day.isoformat()) % 4900000,
    }


def get_stock_quote(ctx: ToolContext | None, symbol: str, date: str) -> dict[str, Any]:
    """Simulated end-of-day quote of a fictional company on a weekday (years 2000-2099)."""
    t = _find_ticker(symbol)
    day = _parse_date(date, "date", 2000, 2099)
    if day.weekday() >= 5:
        raise ToolError(
            f"No quote for {t.symbol} on {day.isoformat()}: it is a {_WEEKDAYS[day.weekday()]} and the "
            "market is closed on weekends. Use a weekday."
        )
    return _quote(t, day)


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _flights(o: City, d: City, day: dt.date) -> list[dict[str, Any]]:
    dist = _haversine_km(o, d)
    iso = day.isoformat()
    count = 3 + _h("flights", o.name, d.name, iso) % 3
    out: list[dict[str, Any]] = []
    numbers_used: set[str] = set()
    prices_used: set[int] = set()
    for i in range(count):
        hi = _h("flight", o.name, d.name, iso, i)
        code, airline = _AIRLINES[hi % len(_AIRLINES)]
        num = 100 + (hi >> 8) % 900
        while f"{code}{num}" in numbers_used:
            num += 1
        number = f"{code}{num}"
        numbers_used.add(number)
        stops = 0 if dist < 1200 else (1 if (hi >> 20) % 3 == 0 or dist > 9000 else 0)
        depart = 5 * 60 + ((hi >> 24) % 204) * 5
        duration = int(dist / 820 * 60 + 40 + stops * (55 + (hi >> 32) % 80))
        cents = int(
            (45 + dist * 0.075 * (0.75 + ((hi >> 40) % 60) / 100) + (35 if stops == 0 else -20)) * 100
        )
        cents = cents - cents % 100 + (hi >> 48) % 100
        while cents in prices_used:
            cents += 100
        prices_used.add(cents)
        arrive = depart + duration + d.utc_offset - o.utc_offset
        out.append(
            {
                "flight_number": number,
                "airline": airline,
                "depart_time": _hhmm(depart),
                "arrive_time": _hhmm(arrive % 1440),
                "arrive_day_offset": arrive // 1440,
                "duration_min": duration,
                "stops": stops,
                "price": _num(cents / 100, 2),
            }
        )
    return out


_FLIGHT_SORT: dict[str, Callable[[dict[str, Any]], tuple]] = {
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
    o = _find_city(origin, "origin")
    d = _find_city(destination, "destination")
    if o == d:
        raise ToolError(f"origin and destination are the same city ({o.name})")
    day = _parse_date(date, "date", 2000, 2099)
    key = _FLIGHT_SORT.get(str(sort_by).strip().lower()) if isinstance(sort_by, str) else None
    if key is None:
        raise ToolError(f"sort_by must be one of {', '.join(_FLIGHT_SORT)}, got {_show(sort_by)}")
    flights = _flights(o, d, day)
    if max_price is not None:
        limit = _number(max_price, "max_price", 0, 1e9)
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
    w = _find_word(word)
    return {"word": w.word, "part_of_speech": w.pos, "definition": w.definition}


def get_population(ctx: ToolContext | None, city: str) -> dict[str, Any]:
    """Population of a city (not of its country)."""
    c = _find_city(city)
    return {"city": c.name, "country": c.country, "population": c.population}


def get_country_info(ctx: ToolContext | None, country: str) -> dict[str, Any]:
    """Capital, continent, population, currency, languages and calling code of a country."""
    c = _find_country(country)
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
    a = _find_city(city_a, "city_a")
    b = _find_city(city_b, "city_b")
    u = _key(unit) if isinstance(unit, str) else ""
    unit_code = {"km": "km", "kilometers": "km", "kilometres": "km", "mi": "mi", "miles": "mi"}.get(u)
    if unit_code is None:
        raise ToolError(f"unit must be 'km' or 'mi', got {_show(unit)}")
    km = _haversine_km(a, b)
    value = km if unit_code == "km" else km / 1.609344
    return {"city_a": a.name, "city_b": b.name, "distance": int(round(value)), "unit": unit_code}


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
        _schema(
            {"city": _s("City name in English, e.g. 'Lisbon'"), "date": _s(_DATE_S, 32)}, ["city", "date"]
        ),
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
        _schema(
            {"symbol": _s("Ticker symbol, e.g. 'AQNX'", 40), "date": _s(_DATE_S, 32)}, ["symbol", "date"]
        ),
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

_TOOL_FNS: dict[str, Callable[..., Any]] = {t.name: t.fn for t in TOOLS}

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


# ------------------------------------------------------------------------------------------------ splits

_VALIDATION_STEPS = frozenset({7, 38, 16, 29})
_TEST_STEPS = frozenset({11, 34, 20, 25})


def _partition(names: Sequence[str], salt: str) -> dict[str, tuple[str, ...]]:
    """10% validation, 10% test, the rest train, by the hash order of the names (seed independent)."""
    order = sorted(names, key=lambda n: (_h("split", salt, n), n))
    k = max(1, round(len(order) * 0.1))
    return {"validation": tuple(order[:k]), "test": tuple(order[k : 2 * k]), "train": tuple(order[2 * k :])}


def _currency_split(a: str, b: str) -> str:
    """Split of the ordered pair (a, b): cyclic difference design over the currency table order."""
    codes = [row[0] for row in _CURRENCY_ROWS]
    step = (codes.index(b) - codes.index(a)) % len(codes)
    if step in _VALIDATION_STEPS:
        return "validation"
    if step in _TEST_STEPS:
        return "test"
    return "train"


@dataclass(frozen=True)
class _Pool:
    cities: tuple[City, ...]
    countries: tuple[Country, ...]
    tickers: tuple[Ticker, ...]
    words: tuple[Word, ...]
    dates: tuple[dt.date, ...]
    weekdays: tuple[dt.date, ...]
    unit_pairs: tuple[tuple[str, str], ...]
    partners: Mapping[str, tuple[str, ...]]  # currency -> currencies it is paired with in this split


@functools.cache
def _pools() -> dict[str, _Pool]:
    t = _tables()
    first = dt.date(2025, 1, 1)
    all_dates = [first + dt.timedelta(days=i) for i in range((dt.date(2026, 12, 31) - first).days + 1)]
    parts = {
        "cities": _partition([c.name for c in t["cities"]], "city"),
        "countries": _partition([c.name for c in t["countries"]], "country"),
        "tickers": _partition([x.symbol for x in t["tickers"]], "ticker"),
        "words": _partition([w.word for w in t["words"]], "word"),
        "dates": _partition([d.isoformat() for d in all_dates], "date"),
        "units": _partition(
            [
                f"{a.code}>{b.code}"
                for a in t["units"]
                for b in t["units"]
                if a != b and a.dimension == b.dimension
            ],
            "unit",
        ),
    }
    codes = [row[0] for row in _CURRENCY_ROWS]
    pools = {}
    for split in SPLITS:
        names = {k: set(v[split]) for k, v in parts.items()}
        dates = tuple(d for d in all_dates if d.isoformat() in names["dates"])
        pools[split] = _Pool(
            cities=tuple(c for c in t["cities"] if c.name in names["cities"]),
            countries=tuple(c for c in t["countries"] if c.name in names["countries"]),
            tickers=tuple(x for x in t["tickers"] if x.symbol in names["tickers"]),
            words=tuple(w for w in t["words"] if w.word in names["words"]),
            dates=dates,
            weekdays=tuple(d for d in dates if d.weekday() < 5),
            unit_pairs=tuple(tuple(p.split(">")) for p in sorted(names["units"])),
            partners={a: tuple(b for b in codes if b != a and _currency_split(a, b) == split) for a in codes},
        )
    return pools


def split_entities(split: str) -> dict[str, list[str]]:
    """The entities reserved for ``split`` (for tests and analysis): cities, countries, tickers, words,
    dates (ISO), unit pairs (``"mi>km"``) and currency pairs (``"USD>EUR"``)."""
    check_split(split)
    p = _pools()[split]
    return {
        "cities": [c.name for c in p.cities],
        "countries": [c.name for c in p.countries],
        "tickers": [t.symbol for t in p.tickers],
        "words": [w.word for w in p.words],
        "dates": [d.isoformat() for d in p.dates],
        "unit_pairs": [f"{a}>{b}" for a, b in p.unit_pairs],
        "currency_pairs": [f"{a}>{b}" for a, bs in p.partners.items() for b in bs],
    }


# ---------------------------------------------------------------------------------------- task pieces


def _acc_city(c: City) -> list[str]:
    return list(dict.fromkeys([c.name, *c.aliases, f"{c.name}, {c.country}"]))


def _acc_zone(c: City) -> list[str]:
    out = _acc_city(c)
    if c.tz:
        out.append(c.tz)
    sign = "+" if c.utc_offset >= 0 else "-"
    h, m = divmod(abs(c.utc_offset), 60)
    out += [_offset_label(c.utc_offset), f"UTC{sign}{h:02d}{m:02d}"]
    if m == 0:
        out += [f"UTC{sign}{h}", f"UTC{sign}{h:02d}"]
    if c.utc_offset == 0:
        out += ["UTC", "GMT"]
    return list(dict.fromkeys(out))


def _acc_unit(code: str) -> list[str]:
    return [code, *_tables()["unit_by_code"][code].names]


def _acc_time(hhmm: str) -> list[str]:
    return [hhmm, hhmm[1:]] if hhmm.startswith("0") else [hhmm]


def _acc_ticker(t: Ticker) -> list[str]:
    return [t.symbol, t.company]


def _date_text(rng: random.Random, d: dt.date) -> str:
    form = rng.randrange(4)
    if form == 0:
        return f"{_MONTHS[d.month - 1]} {d.day}, {d.year}"
    if form == 1:
        return f"{d.day} {_MONTHS[d.month - 1]} {d.year}"
    return d.isoformat()


def _city_text(rng: random.Random, c: City) -> str:
    r = rng.random()
    if r < 0.12 and c.aliases:
        return c.aliases[0]
    if r < 0.22:
        return f"{c.name}, {c.country}"
    return c.name


def _currency_text(rng: random.Random, code: str, plural: bool = True) -> str:
    cur = _tables()["currency_by_code"][code]
    name = cur.plural if plural else cur.name
    return rng.choice((code, name, f"{name} ({code})"))


def _ticker_text(rng: random.Random, t: Ticker) -> str:
    return rng.choice((t.symbol, f"{t.company} ({t.symbol})", t.symbol, t.company))


def _unit_text(code: str) -> str:
    return _tables()["unit_by_code"][code].names[0]


class _Plan:
    """Gold turns being built: each call is executed at once so later steps can use its result."""

    def __init__(self) -> None:
        self.turns: list[tuple[dict[str, Any], ...]] = []
        self.required: list[dict[str, Any]] = []

    def turn(self, *calls: tuple[str, dict[str, Any], dict[str, list[Any]]]) -> list[dict[str, Any]]:
        results = []
        batch = []
        for name, args, acceptable in calls:
            results.append(_TOOL_FNS[name](None, **args))
            batch.append({"name": name, "arguments": dict(args)})
            self.required.append({name: acceptable})
        self.turns.append(tuple(batch))
        return results

    def one(self, name: str, args: dict[str, Any], acceptable: dict[str, list[Any]]) -> dict[str, Any]:
        return self.turn((name, args, acceptable))[0]


class _Retry(Exception):
    """The drawn entities do not fit the template (e.g. a tie); draw again."""


def _fact(x: Any) -> str | None:
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, (int, float)):
        return _fmt(x)
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


def _distract(rng: random.Random, pool: _Pool, text: str, exclude: Sequence[City] = ()) -> str:
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


def _weather_call(c: City, d: dt.date) -> tuple[str, dict[str, Any], dict[str, list[Any]]]:
    return (
        "get_weather",
        {"city": c.name, "date": d.isoformat()},
        {"city": _acc_city(c), "date": [d.isoformat()]},
    )


def _t_weather(rng: random.Random, pool: _Pool, plan: _Plan) -> _Result:
    c, d = rng.choice(pool.cities), rng.choice(pool.dates)
    w = plan.one(*_weather_call(c, d))
    ct, dtx = _city_text(rng, c), _date_text(rng, d)
    query = rng.choice(
        (
            f"What's the weather forecast for {ct} on {dtx}?",
            f"I'm heading to {ct} on {dtx}. What weather should I expect, and how warm will it get?",
            f"Give me the forecast (condition, high and low) for {ct} on {dtx}.",
        )
    )
    answer = (
        f"The forecast for {c.name} is {w['condition']}, with a high of {w['high_c']} C and a low of "
        f"{w['low_c']} C."
    )
    return _distract(rng, pool, query, [c]), answer, _facts(w["condition"], w["high_c"], w["low_c"])


def _t_weather_compare(rng: random.Random, pool: _Pool, plan: _Plan) -> _Result:
    a, b = _two(rng, pool.cities)
    d = rng.choice(pool.dates)
    wa, wb = _forecast(a, d), _forecast(b, d)
    if abs(wa["high_c"]) == abs(wb["high_c"]):  # a tie, or "3" found inside "-3"
        raise _Retry
    wa, wb = plan.turn(_weather_call(a, d), _weather_call(b, d))
    colder = rng.random() < 0.35
    pick = (a if wa["high_c"] < wb["high_c"] else b) if colder else (a if wa["high_c"] > wb["high_c"] else b)
    word = "colder" if colder else "warmer"
    at, bt, dtx = _city_text(rng, a), _city_text(rng, b), _date_text(rng, d)
    query = rng.choice(
        (
            f"Which will be {word} on {dtx}, {at} or {bt}? Tell me both daytime highs.",
            f"I can't decide between {at} and {bt} for a trip on {dtx}. Which one will be {word}? Include "
            f"the highs.",
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
    flights = sorted(_flights(o, d, day), key=_FLIGHT_SORT["price"])
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
        args["max_price"] = _num(max_price, 2)
        acceptable["max_price"] = [_num(max_price, 2), ""]
    else:
        acceptable["max_price"] = [""]
    return ("search_flights", args, acceptable), cheapest, max_price


def _convert_call(amount: float, src: str, dst: str) -> tuple[str, dict[str, Any], dict[str, list[Any]]]:
    return (
        "convert_currency",
        {"amount": amount, "from_currency": src, "to_currency": dst},
        {"amount": [amount], "from_currency": [src], "to_currency": [dst]},
    )


def _t_flight_convert(rng: random.Random, pool: _Pool, plan: _Plan) -> _Result:
    o, d = _two(rng, pool.cities)
    day = rng.choice(pool.dates)
    cur = rng.choice(pool.partners["USD"])
    call, cheapest, max_price = _flight_search(rng, o, d, day, rng.random() < 0.3)
    result = plan.one(*call)
    assert result["flights"][0]["flight_number"] == cheapest["flight_number"]
    conv = plan.one(*_convert_call(cheapest["price"], "USD", cur))
    ot, dtt, dtx, ct = _city_text(rng, o), _city_text(rng, d), _date_text(rng, day), _currency_text(rng, cur)
    query = rng.choice(
        (
            f"Find the cheapest flight from {ot} to {dtt} on {dtx} and tell me the fare in {ct}.",
            f"I need to fly {ot} to {dtt} on {dtx}. What's the cheapest option, and what does it cost in "
            f"{ct}?",
        )
    )
    if max_price is not None:
        query += f" I don't want to pay more than ${_fmt(max_price)}."
    answer = (
        f"The cheapest flight from {o.name} to {d.name} on {day.isoformat()} is {cheapest['flight_number']} "
        f"({cheapest['airline']}) at {_fmt(cheapest['price'])} USD, which is {_fmt(conv['converted'])} {cur}."
    )
    return _distract(rng, pool, query, [o, d]), answer, _facts(cheapest["flight_number"], conv["converted"])


def _t_date_plan(rng: random.Random, pool: _Pool, plan: _Plan) -> _Result:
    s, e = sorted(rng.sample(list(pool.dates), 2))
    if (e - s).days < 7:
        raise _Retry
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


def _t_meeting_weather(rng: random.Random, pool: _Pool, plan: _Plan) -> _Result:
    a, b = _two(rng, pool.cities)
    if a.utc_offset == b.utc_offset:
        raise _Retry
    d = rng.choice(pool.dates)
    hhmm = _hhmm(rng.randrange(96) * 15)
    conv = plan.one(
        "convert_timezone",
        {"time": hhmm, "date": d.isoformat(), "from_tz": a.name, "to_tz": b.name},
        {"time": _acc_time(hhmm), "date": [d.isoformat()], "from_tz": _acc_zone(a), "to_tz": _acc_zone(b)},
    )
    local = dt.date.fromisoformat(conv["converted_date"])
    w = plan.one(*_weather_call(b, local))
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
    dim = _tables()["unit_by_code"][src].dimension
    if dim == "temperature":
        v: float | int = {"C": rng.randint(5, 250), "F": rng.randint(45, 480), "K": rng.randint(280, 520)}[
            src
        ]
    else:
        v = rng.choice((rng.randint(1, 500), _num(rng.randint(10, 2000) / 10, 1), rng.randint(1, 20)))
    res = convert_units(None, v, src, dst)
    if not 0.01 <= res["result"] <= 1e7:
        raise _Retry
    return v, res


def _t_units(rng: random.Random, pool: _Pool, plan: _Plan) -> _Result:
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
    texts = [(_fmt(v), _unit_text(s), _unit_text(t)) for v, (s, t) in zip(values, pairs, strict=True)]
    if n == 1:
        v, f, t = texts[0]
        dim = _tables()["unit_by_code"][pairs[0][0]].dimension
        story = rng.choice((*_UNIT_STORIES[dim], "Convert {v} {f} to {t}."))
        query = story.format(v=v, f=f, t=t)
    else:
        query = (
            f"Please convert {texts[0][0]} {texts[0][1]} to {texts[0][2]}, and also {texts[1][0]} "
            f"{texts[1][1]} to {texts[1][2]}."
        )
    answer = " ".join(
        f"{v} {f} is {_fmt(r['result'])} {t}." for (v, f, t), r in zip(texts, results, strict=True)
    )
    return _distract(rng, pool, query), answer, _facts(*(r["result"] for r in results))


def _t_stock_compare(rng: random.Random, pool: _Pool, plan: _Plan) -> _Result:
    if rng.random() < 0.6:
        a, b = _two(rng, pool.tickers)
        d = rng.choice(pool.weekdays)
        if _quote(a, d)["close"] == _quote(b, d)["close"]:
            raise _Retry
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
            f"On {d.isoformat()}, {a.symbol} closed at {_fmt(qa['close'])} USD and {b.symbol} at "
            f"{_fmt(qb['close'])} USD, so {top.symbol} closed higher."
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
        f"On {d1.isoformat()} {t.symbol} closed at {_fmt(q1['close'])} USD, and on {d2.isoformat()} at "
        f"{_fmt(q2['close'])} USD."
    )
    return _distract(rng, pool, query), answer, _facts(q1["close"], q2["close"])


def _t_define(rng: random.Random, pool: _Pool, plan: _Plan) -> _Result:
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


def _t_lookup(rng: random.Random, pool: _Pool, plan: _Plan) -> _Result:
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
        answer = (
            f"{a.name} has {ra['population']} people and {b.name} has {rb['population']}, so {big.name} is "
            "larger."
        )
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
    answer = f"1 {a} = {_fmt(r['rate'])} {b}."
    return _distract(rng, pool, query), answer, _facts(r["rate"])


def _nice_amount(rng: random.Random, code: str) -> int | float:
    usd = rng.choice((50, 80, 100, 150, 200, 250, 300, 400, 500, 750, 1000, 1200, 1500, 2000))
    x = float(usd * _tables()["currency_by_code"][code].per_usd)
    magnitude = 10 ** max(0, int(math.floor(math.log10(x))) - 1)
    return _num(round(x / magnitude) * magnitude, 2)


def _t_country_money(rng: random.Random, pool: _Pool, plan: _Plan) -> _Result:
    c = rng.choice(pool.countries)
    src = rng.choice(pool.partners[c.currency])
    amount = _nice_amount(rng, src)
    info = plan.one("get_country_info", {"country": c.name}, {"country": [c.name, *c.aliases]})
    conv = plan.one(*_convert_call(amount, src, info["currency"]))
    st = _currency_text(rng, src)
    query = rng.choice(
        (
            f"I'm visiting {c.name} next month with {_fmt(amount)} {st}. Which currency do they use, and "
            f"how much "
            "local money is that?",
            f"How much is {_fmt(amount)} {st} worth in the local currency of {c.name}? Tell me the currency "
            f"too.",
        )
    )
    answer = (
        f"{c.name} uses {info['currency']}; {_fmt(amount)} {src} is {_fmt(conv['converted'])} "
        f"{info['currency']}."
    )
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


def _t_distance(rng: random.Random, pool: _Pool, plan: _Plan) -> _Result:
    unit = rng.choice(("km", "mi"))
    unit_name = "kilometers" if unit == "km" else "miles"
    if rng.random() < 0.6:
        a, b = _two(rng, pool.cities)
        r = plan.one(*_distance_call(a, b, unit))
        query = rng.choice(
            (
                f"How far is it from {_city_text(rng, a)} to {_city_text(rng, b)} in {unit_name}, as the "
                f"crow flies?",
                f"What's the straight-line distance between {_city_text(rng, a)} and {_city_text(rng, b)} "
                f"in {unit_name}?",
            )
        )
        answer = f"{a.name} and {b.name} are {r['distance']} {unit} apart."
        return _distract(rng, pool, query, [a, b]), answer, _facts(r["distance"])
    a, b, c = rng.sample(list(pool.cities), 3)
    if _haversine_km(a, b) == _haversine_km(a, c):
        raise _Retry
    rb, rc = plan.turn(_distance_call(a, b, unit), _distance_call(a, c, unit))
    if rb["distance"] == rc["distance"]:
        raise _Retry
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


def _t_trip_budget(rng: random.Random, pool: _Pool, plan: _Plan) -> _Result:
    o, d = _two(rng, pool.cities)
    day = rng.choice(pool.dates)
    cur = rng.choice(pool.partners["USD"])
    call, cheapest, _ = _flight_search(rng, o, d, day, False)
    _, w = plan.turn(call, _weather_call(d, day))
    conv = plan.one(*_convert_call(cheapest["price"], "USD", cur))
    dtx = _date_text(rng, day)
    query = (
        f"I'm planning a trip from {_city_text(rng, o)} to {_city_text(rng, d)} on {dtx}. Find the cheapest "
        f"flight, tell me its fare in {_currency_text(rng, cur)}, and what the weather will be like in "
        f"{d.name} that day."
    )
    answer = (
        f"The forecast for {d.name} on {day.isoformat()} is {w['condition']} with a high of {w['high_c']} C; "
        f"the cheapest flight is {cheapest['flight_number']} at {_fmt(cheapest['price'])} USD, which is "
        f"{_fmt(conv['converted'])} {cur}."
    )
    facts = _facts(cheapest["flight_number"], conv["converted"], w["condition"])
    return _distract(rng, pool, query, [o, d]), answer, facts


def _t_stock_in_currency(rng: random.Random, pool: _Pool, plan: _Plan) -> _Result:
    t = rng.choice(pool.tickers)
    d = rng.choice(pool.weekdays)
    cur = rng.choice(pool.partners["USD"])
    q = plan.one(
        "get_stock_quote",
        {"symbol": t.symbol, "date": d.isoformat()},
        {"symbol": _acc_ticker(t), "date": [d.isoformat()]},
    )
    conv = plan.one(*_convert_call(q["close"], "USD", cur))
    query = (
        f"What was the closing price of {_ticker_text(rng, t)} on {_date_text(rng, d)}, and what is that "
        f"in {_currency_text(rng, cur)}?"
    )
    answer = (
        f"{t.symbol} closed at {_fmt(q['close'])} USD on {d.isoformat()}, which is "
        f"{_fmt(conv['converted'])} {cur}."
    )
    return _distract(rng, pool, query), answer, _facts(q["close"], conv["converted"])


def _t_weather_fahrenheit(rng: random.Random, pool: _Pool, plan: _Plan) -> _Result:
    c, d = rng.choice(pool.cities), rng.choice(pool.dates)
    w = _forecast(c, d)
    f = convert_units(None, w["high_c"], "C", "F")["result"]
    plan.one(*_weather_call(c, d))
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
        f"which is {_fmt(f)} F."
    )
    return _distract(rng, pool, query, [c]), answer, _facts(f, w["condition"])


TEMPLATES: dict[str, Callable[[random.Random, _Pool, _Plan], _Result]] = {
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


class GeneralTaskSource:
    """Generated general tasks (see the module docstring); deterministic in (seed, split, index)."""

    def __init__(self, seed: int = 0, sizes: Mapping[str, int] | None = None) -> None:
        self.seed = seed
        self.sizes = dict(SIZES if sizes is None else sizes)

    def size(self, split: str) -> int:
        check_split(split)
        return self.sizes[split]

    def task(self, split: str, index: int) -> Task:
        size = self.size(split)
        index = check_index(split, index, size)
        rng = random.Random(f"{self.seed}/general/{split}/{index}")
        pool = _pools()[split]
        names = [n for n in TEMPLATES if split == "test" or n not in TEST_ONLY_TEMPLATES]
        template = rng.choice(names)
        for _ in range(50):
            plan = _Plan()
            try:
                query, answer, facts = TEMPLATES[template](rng, pool, plan)
                break
            except _Retry:
                continue
        else:  # pragma: no cover - every template fits within a few draws
            raise RuntimeError(f"template {template} found no fitting entities for {split}/{index}")
        sub = SubTask(
            agent="general",
            query=query,
            turns=tuple(plan.turns),
            answer=answer,
            required_calls=tuple(plan.required),
        )
        return Task(
            task_id=f"general/{split}/{int(index)}",
            domain="general",
            query=query,
            answer=answer,
            answer_type="facts",
            route=(sub,),
            facts=facts,
            template=template,
            meta={
                "test_only_template": template in TEST_ONLY_TEMPLATES,
                "calls": len(plan.required),
                "parallel": any(len(t) > 1 for t in plan.turns),
            },
        )


def task_source(seed: int, db: Any = None) -> GeneralTaskSource:
    """The generated general tasks for ``seed`` (``db`` is unused: the domain has no database)."""
    return GeneralTaskSource(seed)


# ------------------------------------------------------------------------- parts for collaborative tasks


def currency_part(rng: random.Random, split: str, amount: float, from_currency: str) -> tuple[SubTask, dict]:
    """A general sub-task converting ``amount`` of ``from_currency`` to another currency of ``split``.

    The target currency is paired with ``from_currency`` in ``split`` (see the split design). Returns
    ``(SubTask, {"amount", "from_currency", "to_currency", "converted", "rate"})`` where ``converted`` is
    rounded to 2 decimals and ``rate`` to 6, exactly as the tool returns them.
    """
    check_split(split)
    code = str(from_currency).strip().upper()
    pool = _pools()[split]
    if code not in pool.partners:
        raise ValueError(f"unknown currency {from_currency!r}; expected one of {sorted(pool.partners)}")
    x = float(amount)
    if not math.isfinite(x) or not 0 <= x <= 1e12:
        raise ValueError(f"amount must be a finite number between 0 and 1e12, got {amount!r}")
    value = _num(x, 2)
    to = rng.choice(pool.partners[code])
    plan = _Plan()
    conv = plan.one(*_convert_call(value, code, to))
    name = _tables()["currency_by_code"][to].plural
    sub = SubTask(
        agent="general",
        query=f"Convert {_fmt(value)} {code} to {name} ({to}).",
        turns=tuple(plan.turns),
        answer=f"{_fmt(value)} {code} is {_fmt(conv['converted'])} {to} (rate {_fmt(conv['rate'])}).",
        required_calls=tuple(plan.required),
    )
    return sub, {
        "amount": value,
        "from_currency": code,
        "to_currency": to,
        "converted": float(conv["converted"]),
        "rate": float(conv["rate"]),
    }


def weather_part(rng: random.Random, split: str) -> tuple[SubTask, dict]:
    """A general sub-task asking the forecast for a city and date of ``split``.

    Returns ``(SubTask, {"city", "date", "condition", "high_c", "low_c"})`` (``date`` ISO; temperatures
    are ints and may be negative).
    """
    check_split(split)
    pool = _pools()[split]
    c, d = rng.choice(pool.cities), rng.choice(pool.dates)
    plan = _Plan()
    w = plan.one(*_weather_call(c, d))
    sub = SubTask(
        agent="general",
        query=f"What is the weather forecast for {c.name} on {d.isoformat()}?",
        turns=tuple(plan.turns),
        answer=(
            f"The forecast for {c.name} on {d.isoformat()} is {w['condition']}, with a high of "
            f"{w['high_c']} C and a low of {w['low_c']} C."
        ),
        required_calls=tuple(plan.required),
    )
    return sub, {
        "city": c.name,
        "date": d.isoformat(),
        "condition": w["condition"],
        "high_c": w["high_c"],
        "low_c": w["low_c"],
    }
