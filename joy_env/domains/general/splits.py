"""Entity splits: deterministic partitions of the tables into train, validation and test."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from joy_env.core import SPLITS, check_split
from joy_env.domains.general.lookups import h, world_tables
from joy_env.domains.general.tables import CURRENCY_ROWS, City, Country, Ticker, Word

_VALIDATION_STEPS = frozenset({7, 38, 16, 29})
_TEST_STEPS = frozenset({11, 34, 20, 25})


def _partition(names: Sequence[str], salt: str) -> dict[str, tuple[str, ...]]:
    """10% validation, 10% test, the rest train, by the hash order of the names (seed independent)."""
    order = sorted(names, key=lambda n: (h("split", salt, n), n))
    k = max(1, round(len(order) * 0.1))
    return {"validation": tuple(order[:k]), "test": tuple(order[k : 2 * k]), "train": tuple(order[2 * k :])}


def _currency_split(a: str, b: str) -> str:
    """Split of the ordered pair (a, b): cyclic difference design over the currency table order."""
    codes = [row[0] for row in CURRENCY_ROWS]
    step = (codes.index(b) - codes.index(a)) % len(codes)
    if step in _VALIDATION_STEPS:
        return "validation"
    if step in _TEST_STEPS:
        return "test"
    return "train"


@dataclass(frozen=True)
class Pool:
    cities: tuple[City, ...]
    countries: tuple[Country, ...]
    tickers: tuple[Ticker, ...]
    words: tuple[Word, ...]
    dates: tuple[dt.date, ...]
    weekdays: tuple[dt.date, ...]
    unit_pairs: tuple[tuple[str, str], ...]
    partners: Mapping[str, tuple[str, ...]]  # currency -> currencies it is paired with in this split


@functools.cache
def split_pools() -> dict[str, Pool]:
    t = world_tables()
    first = dt.date(2025, 1, 1)
    all_dates = [first + dt.timedelta(days=i) for i in range((dt.date(2026, 12, 31) - first).days + 1)]
    parts = {
        "cities": _partition([c.name for c in t["cities"]], "city"),
        "countries": _partition([c.name for c in t["countries"]], "country"),
        "tickers": _partition([x.symbol for x in t["tickers"]], "ticker"),
        "words": _partition([w.word for w in t["words"]], "word"),
        "dates": _partition([d.isoformat() for d in all_dates], "date"),
        "units": _partition(
            [f"{a.code}>{b.code}" for a in t["units"] for b in t["units"] if a != b and a.dimension == b.dimension],
            "unit",
        ),
    }
    codes = [row[0] for row in CURRENCY_ROWS]
    pools = {}
    for split in SPLITS:
        names = {k: set(v[split]) for k, v in parts.items()}
        dates = tuple(d for d in all_dates if d.isoformat() in names["dates"])
        pools[split] = Pool(
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
    p = split_pools()[split]
    return {
        "cities": [c.name for c in p.cities],
        "countries": [c.name for c in p.countries],
        "tickers": [t.symbol for t in p.tickers],
        "words": [w.word for w in p.words],
        "dates": [d.isoformat() for d in p.dates],
        "unit_pairs": [f"{a}>{b}" for a, b in p.unit_pairs],
        "currency_pairs": [f"{a}>{b}" for a, bs in p.partners.items() for b in bs],
    }
