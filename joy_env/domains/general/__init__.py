"""General function-calling domain: everyday APIs on deterministic simulated backends.

The ``general`` sub-agent owns thirteen general-purpose tools and no database. Every backend is a pure
function of its arguments (tables embedded in the package, values derived from a SHA-256 hash of the
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

Package layout
==============

``tables`` (data tables), ``lookups`` (finding entities, parsing arguments), ``tools`` (implementations),
``schemas`` (``TOOLS``, prompt, :func:`domain`), ``splits``, ``templates``, ``tasks`` (the task source) and
``parts``. Everything listed in ``__all__`` is importable from ``joy_env.domains.general``.
"""

from joy_env.domains.general.lookups import fmt as fmt
from joy_env.domains.general.lookups import world_tables as world_tables
from joy_env.domains.general.parts import currency_part, weather_part
from joy_env.domains.general.schemas import SYSTEM_PROMPT, TOOLS, domain
from joy_env.domains.general.splits import split_entities
from joy_env.domains.general.tables import CURRENCY_ROWS as CURRENCY_ROWS
from joy_env.domains.general.tasks import SIZES, GeneralTaskSource, task_source
from joy_env.domains.general.templates import TEMPLATES, TEST_ONLY_TEMPLATES
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
