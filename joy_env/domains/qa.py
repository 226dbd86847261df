"""QA domain: shop-policy and open-domain questions answered from a generated knowledge base.

The ``qa`` sub-agent owns one tool, ``search_kb``, a deterministic BM25 search over a knowledge base (KB)
generated from the seed, and answers with a short phrase. Answers are scored by normalised exact match /
token F1 (``answer_type="qa"``); gold answers have 1-6 words, so tasks list no ``required_calls``.

Tools
=====

| Tool        | Arguments                                        | What it does                            |
|-------------|--------------------------------------------------|-----------------------------------------|
| `search_kb` | `query` (str, <= 300), `top_k` (int 1-10, def. 3)| BM25 over the KB passages; returns a    |
|             |                                                  | list of `{"id", "title", "text"}`, best |
|             |                                                  | first (empty list when nothing matches) |

Knowledge base
==============

:func:`kb` returns the passages for a seed (built once per seed and cached). Nothing is copied from real
sources; every name is assembled from syllables by a seeded RNG.

* **Shop policies** (about 150 facts): return window and restocking fee per category, warranty per
  category, exchanges per category (look-alike distractors), manufacturer warranty per brand, shipping
  options (fee, business days), the free-shipping threshold, membership tiers (annual fee, discount, points
  per dollar, extra return days), accepted and refused payment methods, installments, gift cards,
  price matching. Categories are :data:`CATEGORIES` (the shop's seven catalog categories come first).
* **Open-domain facts** (about 5000 facts over 1380 fictional entities): countries (capital, currency,
  official language, independence year), companies (founding year, founder, headquarters), devices
  (inventor, year, maker), mountains (height, country, first ascent), rivers (length, country, sea). Some
  companies are named after countries, and every passage type repeats the same sentence patterns with
  other numbers, so look-alike passages compete in retrieval.

The database of the domain (``build_db``) holds only the table ``kb_info(seed)``; the tool reads the seed
there and searches the cached KB of that seed (seed 0 when the tool runs without a database).

Tasks
=====

:func:`task_source` builds questions from templates; the gold solution is one ``search_kb`` call per hop
(the query names the entity and relation) and the short answer.

| Family           | Templates                                                                       |
|------------------|---------------------------------------------------------------------------------|
| open domain      | `country_capital`, `country_currency`, `country_language`, `country_independence`,|
|                  | `company_founded`, `company_founder`, `company_hq`, `device_inventor`,           |
|                  | `device_year`, `device_maker`, `mountain_height`, `mountain_country`,            |
|                  | `river_length`, `river_sea`                                                      |
| policy           | `return_window`, `restocking_fee`, `warranty`, `brand_warranty`, `shipping_fee`, |
|                  | `shipping_time`, `free_shipping`, `membership_fee`, `membership_discount`,      |
|                  | `membership_points`, `membership_returns`, `payment_accepted`, `installments`,  |
|                  | `gift_card`, `price_match`                                                       |
| multi-hop (test) | `maker_founded` (device -> maker -> founding year), `maker_founder`,             |
|                  | `mountain_capital` (mountain -> country -> capital)                              |

Each question comes in 3-6 phrasings.

Splits
======

Open-domain entities are partitioned by position (index mod 10: 0-7 train, 8 validation, 9 test), and a
multi-hop chain stays inside one split. Policy questions are partitioned by category / brand (same rule)
and by phrasing: train uses the first phrasings of a template, validation and test one held-out phrasing
each. The multi-hop templates appear in test only (``meta["test_only_template"]``, about 15% of test).
Sizes: 20000 train, 2000 validation, 2000 test (about 1000 distinct questions come up per held-out split, so
those splits repeat questions).

Parts for collaborative tasks
=============================

:func:`policy_part` returns a ``qa`` :class:`~joy_env.core.SubTask` asking one policy fact (return window
or warranty of a category, a shipping, membership or payment fact) plus ``{"answer", "question", ...}``.
"""

from __future__ import annotations

import functools
import math
import numbers
import random
import re
import sqlite3
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from joy_env.core import SPLITS, Domain, SubTask, Task, Tool, ToolContext, ToolError, check_index, check_split

__all__ = [
    "CATEGORIES",
    "MULTI_HOP_TEMPLATES",
    "SIZES",
    "SYSTEM_PROMPT",
    "TOOLS",
    "QATaskSource",
    "build_db",
    "domain",
    "kb",
    "policy_facts",
    "policy_part",
    "search",
    "search_kb",
    "task_source",
]

SIZES = {"train": 20000, "validation": 2000, "test": 2000}
DEFAULT_SEED = 0
MAX_TOP_K = 10

# The shop's catalog categories first (kept in step with the e-commerce domain), then more.
CATEGORIES = (
    "electronics", "clothing", "shoes", "home", "sports", "books", "beauty",
    "toys", "furniture", "kitchen", "jewelry", "watches", "groceries", "pet supplies", "office supplies",
    "garden", "automotive", "baby products", "video games", "musical instruments", "health", "outdoor gear",
    "bedding", "luggage", "tools", "cameras", "laptops", "phones", "appliances", "art supplies",
)
# How a category reads inside a sentence ("items from the home category" would be clumsy).
_NOUNS = {
    "home": "home goods", "sports": "sports gear", "beauty": "beauty products", "kitchen": "kitchenware",
    "groceries": "groceries", "garden": "garden supplies", "automotive": "car parts",
    "health": "health products",
    "outdoor gear": "outdoor gear", "bedding": "bedding", "appliances": "home appliances",
}
TOPICS = ("returns", "shipping", "warranty", "membership", "payment")
MULTI_HOP_TEMPLATES = ("maker_founded", "maker_founder", "mountain_capital")

# ------------------------------------------------------------------------------------------- retrieval

_STOPWORDS = frozenset(
    "a an the of in on at to for is are was were be been by and or what which who whom whose how when where "
    "does do did i my me can could much many it its that this with as from there their they if name "
    "please tell you your we our us will would should any about after into s".split()
)
_TOKEN = re.compile(r"[a-z0-9]+")


def _stem(token: str) -> str:
    if len(token) > 4 and token.endswith("ies"):
        return token[:-3] + "y"
    if len(token) > 3 and token.endswith("s") and not token.endswith(("ss", "us", "is")):
        return token[:-1]
    return token


def tokenize(text: str) -> list[str]:
    """Lowercase alphanumeric tokens without stopwords, with a light plural stemmer."""
    return [_stem(t) for t in _TOKEN.findall(text.lower()) if t not in _STOPWORDS]


class BM25:
    """Okapi BM25 over passages (title tokens count twice); ties break by passage order."""

    def __init__(self, passages: Sequence[dict[str, str]], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.lengths: list[int] = []
        self.postings: dict[str, list[tuple[int, int]]] = {}
        for i, p in enumerate(passages):
            tokens = tokenize(p["title"]) * 2 + tokenize(p["text"])
            self.lengths.append(len(tokens))
            for tok, tf in Counter(tokens).items():
                self.postings.setdefault(tok, []).append((i, tf))
        n = len(self.lengths)
        self.avgdl = sum(self.lengths) / max(n, 1)
        self.idf = {t: math.log(1 + (n - len(ps) + 0.5) / (len(ps) + 0.5)) for t, ps in self.postings.items()}
        # each posting's score contribution, computed once: a search only adds arrays
        self.weights: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for tok, ps in self.postings.items():
            docs = np.array([d for d, _ in ps], dtype=np.int64)
            tfs = np.array([tf for _, tf in ps], dtype=np.float64)
            lengths = np.array([self.lengths[d] for d in docs], dtype=np.float64)
            weight = self.idf[tok] * tfs * (k1 + 1) / (tfs + k1 * (1 - b + b * lengths / self.avgdl))
            self.weights[tok] = (docs, weight)

    def search(self, query: str, top_k: int) -> list[int]:
        scores = np.zeros(len(self.lengths))
        hit = False
        for tok in dict.fromkeys(tokenize(query)):
            posting = self.weights.get(tok)
            if posting is not None:
                scores[posting[0]] += posting[1]  # a token lists each passage once
                hit = True
        if not hit:
            return []
        candidates = np.flatnonzero(scores > 0)
        order = np.lexsort((candidates, -scores[candidates]))  # best score first, ties by passage order
        return candidates[order[:top_k]].tolist()


# ------------------------------------------------------------------------------------- world generation

_ONSETS = (
    "b", "br", "c", "d", "dr", "f", "g", "gr", "h", "k", "kr", "l", "m", "n", "p", "r", "s", "st", "t",
    "tr", "v", "z", "th", "sh", "qu", "y", "j", "w", "bl", "fl",
)
_NUCLEI = ("a", "e", "i", "o", "u", "ai", "ei", "ou", "ia", "ae", "y")
_CODAS = ("", "", "n", "r", "l", "m", "th", "nd", "rt", "x", "v")
_INDUSTRIES = (
    "shipbuilding", "textile", "optics", "clockmaking", "railway", "printing", "aviation", "mining",
    "software", "glassware", "instrument", "chemical", "engineering", "telegraph", "pharmaceutical",
)
_COMPANY_SUFFIXES = (
    "Dynamics", "Works", "Labs", "Industries", "Systems", "Instruments", "Foundry", "Mechanics", "Company",
    "Manufacturing",
)
_DEVICE_KINDS = (
    ("Loom", "weaving"), ("Compass", "navigation"), ("Engine", "power"), ("Lantern", "lighting"),
    ("Press", "printing"), ("Scope", "viewing"), ("Telegraph", "signalling"), ("Kiln", "firing"),
    ("Pump", "water"), ("Clock", "timekeeping"), ("Sextant", "surveying"), ("Phonograph", "recording"),
)
_REGIONS = ("north", "south", "east", "west", "center")
_SHIPPING = (  # option, min fee cents, max fee cents, min days, max days
    ("Standard", 399, 799, 4, 7),
    ("Economy", 199, 399, 7, 12),
    ("Express", 999, 1699, 2, 3),
    ("Next-Day", 1999, 2999, 1, 1),
    ("Freight", 4999, 8999, 8, 14),
)
_TIERS = ("Silver", "Gold", "Platinum", "Diamond")
_PAYMENT_ALWAYS = ("Visa", "Mastercard", "JoyPay wallet", "gift cards")
_PAYMENT_MAYBE = (
    "American Express", "Discover", "PayPal", "Apple Pay", "Google Pay", "bank transfer", "cash on delivery",
    "personal checks", "cryptocurrency", "money orders", "UnionPay", "Diners Club",
)
_BRAND_SUFFIXES = ("tek", "ware", "ly", "on", "io", "ex", "ora", "ix")


@dataclass
class _Entity:
    kind: str
    name: str
    split: str
    facts: dict[str, Any]
    passage: str = ""


@dataclass
class _World:
    seed: int
    passages: list[dict[str, str]] = field(default_factory=list)
    entities: dict[str, list[_Entity]] = field(default_factory=dict)
    policy: dict[str, Any] = field(default_factory=dict)
    index: BM25 | None = None
    by_id: dict[str, int] = field(default_factory=dict)
    by_split: dict[tuple[str, str], list[_Entity]] = field(default_factory=dict)


def _split_of(i: int) -> str:
    return "train" if i % 10 < 8 else ("validation" if i % 10 == 8 else "test")


def _partition(pool: Sequence[Any], split: str) -> list[Any]:
    return [x for i, x in enumerate(pool) if _split_of(i) == split]


class _Namer:
    """Unique invented words (unique after tokenisation, never a word of the templates)."""

    def __init__(self, rng: random.Random, reserved: set[str]) -> None:
        self.rng = rng
        self.used = set(reserved)

    def word(self, syllables: tuple[int, ...] = (2, 3)) -> str:
        for _ in range(1000):
            n = self.rng.choice(syllables)
            parts = [self.rng.choice(_ONSETS) + self.rng.choice(_NUCLEI) for _ in range(n)]
            w = "".join(parts) + self.rng.choice(_CODAS)
            key = _stem(w)
            if 4 <= len(w) <= 11 and key not in self.used and w not in _STOPWORDS:
                self.used.add(key)
                return w.capitalize()
        raise RuntimeError("name space exhausted")  # pragma: no cover


def _noun(category: str) -> str:
    return _NOUNS.get(category, category)


def _plural_title(category: str) -> str:
    return category[:1].upper() + category[1:]


def _duration(months: int) -> str:
    if months % 12 == 0:
        years = months // 12
        return "1 year" if years == 1 else f"{years} years"
    return f"{months} months"


def _money(cents: int) -> str:
    return f"${cents // 100}" if cents % 100 == 0 else f"${cents // 100}.{cents % 100:02d}"


def _add(world: _World, pid: str, title: str, text: str) -> str:
    world.by_id[pid] = len(world.passages)
    world.passages.append({"id": pid, "title": title, "text": text})
    return pid


def _build_policy(world: _World, rng: random.Random, namer: _Namer) -> None:
    pol: dict[str, Any] = {"returns": {}, "restocking": {}, "warranty": {}, "exchange": {}, "passage": {}}
    for i, category in enumerate(CATEGORIES):
        cat = _noun(category)
        days = rng.choice((7, 14, 15, 30, 45, 60, 90))
        fee = rng.choice((5, 10, 15, 20, 25))
        months = rng.choice((3, 6, 12, 18, 24, 36))
        pol["returns"][category], pol["restocking"][category], pol["warranty"][category] = days, fee, months
        title = _plural_title(category)
        opener = rng.choice(
            (
                f"{_plural_title(cat)} can be returned within {days} days of delivery for a full refund.",
                f"The return window for {cat} is {days} days from the delivery date.",
                f"You may return {cat} up to {days} days after delivery.",
            )
        )
        text = (
            f"{opener} The return window for {cat} starts on the day the parcel is delivered. "
            f"A restocking fee of {fee}% is charged on returns of opened {cat}. "
            f"Returns of {cat} must include all original packaging and accessories."
        )
        pid = _add(world, f"policy-returns-{i:02d}", f"Returns: {title}", text)
        pol["passage"][("returns", category)] = pid
        text = rng.choice(
            (
                f"Every purchase of {cat} from the shop comes with a warranty of {_duration(months)} "
                f"against manufacturing defects. The warranty on {cat} does not cover accidental damage or "
                "normal wear.",
                f"The shop warranty for {cat} lasts {_duration(months)} from the date of delivery and covers "
                f"manufacturing defects only. Accidental damage to {cat} is not covered.",
            )
        )
        pid = _add(world, f"policy-warranty-{i:02d}", f"Warranty: {title}", text)
        pol["passage"][("warranty", category)] = pid
        if i % 2 == 0:  # look-alike distractor with another number of days
            ex_days = rng.choice([d for d in (10, 20, 21, 40, 50, 75) if d != days])
            pol["exchange"][category] = ex_days
            text = (
                f"{_plural_title(cat)} can be exchanged for a different size, color or model within "
                f"{ex_days} days of delivery. Exchanges of {cat} are free of charge and ship with standard "
                "shipping."
            )
            _add(world, f"policy-exchange-{i:02d}", f"Exchanges: {title}", text)
    brands = []
    for _ in range(20):
        root = namer.word((2,))
        brands.append(root + rng.choice(_BRAND_SUFFIXES))
    pol["brands"] = {}
    for i, brand in enumerate(brands):
        months = rng.choice((12, 24, 36, 48, 60))
        pol["brands"][brand] = months
        text = (
            f"Products made by {brand} carry a manufacturer warranty of {_duration(months)} in addition to "
            f"the shop warranty. Warranty claims for {brand} products are handled by {brand} directly."
        )
        pol["passage"][("brand", brand)] = _add(
            world, f"policy-brand-{i:02d}", f"Manufacturer warranty: {brand}", text
        )
    pol["shipping"] = {}
    for i, (option, lo, hi, dlo, dhi) in enumerate(_SHIPPING):
        fee = rng.randint(lo // 100, hi // 100) * 100 + 99
        days = rng.randint(dlo, dhi)
        pol["shipping"][option] = (fee, days)
        day_word = "1 business day" if days == 1 else f"{days} business days"
        text = (
            f"{option} shipping costs {_money(fee)} per order and arrives in {day_word} after the order "
            f"ships. {option} shipping is available for most items."
        )
        if option == "Freight":
            text += " Freight is used for furniture and other large items."
        pid = _add(world, f"policy-shipping-{i:02d}", f"Shipping: {option}", text)
        pol["passage"][("shipping", option)] = pid
    threshold = rng.choice((25, 35, 49, 50, 59, 75))
    pol["free_shipping"] = threshold
    pol["passage"][("free_shipping", None)] = _add(
        world,
        "policy-free-shipping",
        "Free shipping",
        f"Orders of ${threshold} or more qualify for free standard shipping. Express and next-day shipping "
        "are never free, and the threshold is checked after discounts.",
    )
    pol["tiers"] = {}
    fees = sorted(rng.sample(range(19, 200, 10), len(_TIERS)))
    for i, tier in enumerate(_TIERS):
        fee, disc = fees[i], 2 * (i + 1) + rng.choice((0, 1, 3))
        points, extra = i + 1 + rng.choice((0, 1)), rng.choice((5, 10, 15, 20, 30))
        pol["tiers"][tier] = {"fee": fee, "discount": disc, "points": points, "extra_days": extra}
        text = (
            f"{tier} membership costs ${fee} per year. {tier} members get {disc}% off eligible orders, earn "
            f"{points} points per dollar spent and get {extra} extra days for returns."
        )
        pol["passage"][("membership", tier)] = _add(
            world, f"policy-membership-{i:02d}", f"{tier} membership", text
        )
    maybe = list(_PAYMENT_MAYBE)
    rng.shuffle(maybe)
    accepted = list(_PAYMENT_ALWAYS) + sorted(maybe[:6])
    refused = sorted(maybe[6:])
    pol["accepted"], pol["refused"] = accepted, refused
    pol["passage"][("payment", True)] = _add(
        world,
        "policy-payment-accepted",
        "Accepted payment methods",
        "The shop accepts the following payment methods: " + ", ".join(accepted) + ".",
    )
    pol["passage"][("payment", False)] = _add(
        world,
        "policy-payment-refused",
        "Payment methods not accepted",
        "The shop does not accept the following payment methods: " + ", ".join(refused) + ".",
    )
    inst_min, inst_n = rng.choice((100, 150, 200, 250)), rng.choice((3, 4, 6))
    pol["installments"] = (inst_min, inst_n)
    pol["passage"][("installments", None)] = _add(
        world,
        "policy-installments",
        "Installment payments",
        f"Orders of ${inst_min} or more can be paid in {inst_n} installments, free of interest. "
        "Installment payments need a credit card.",
    )
    gift_years = rng.choice((2, 3, 5, 10))
    pol["gift_years"] = gift_years
    pol["passage"][("gift", None)] = _add(
        world,
        "policy-gift-cards",
        "Gift cards",
        f"Gift cards are valid for {gift_years} years from the date of purchase and cannot be exchanged for "
        "cash.",
    )
    pm_days = rng.choice((7, 10, 14, 21, 30))
    pol["price_match"] = pm_days
    pol["passage"][("price_match", None)] = _add(
        world,
        "policy-price-match",
        "Price match",
        f"The shop matches a lower price from a major retailer within {pm_days} days of purchase. "
        "Marketplace sellers and clearance sales are excluded from price matching.",
    )
    world.policy = pol


def _person(namer: _Namer, rng: random.Random, firsts: list[str]) -> str:
    return f"{rng.choice(firsts)} {namer.word((2, 3))}"


def _build_open(world: _World, rng: random.Random, namer: _Namer) -> None:
    firsts = [namer.word((2,)) for _ in range(60)]
    seas = [f"{namer.word((2,))} Sea" for _ in range(20)]
    continents = [namer.word((3,)) for _ in range(6)]
    countries: list[_Entity] = []
    for i in range(240):
        name = namer.word()
        facts = {
            "capital": namer.word(),
            "currency": namer.word((2,)).lower(),
            "language": namer.word((2,)) + rng.choice(("ic", "ese", "ian", "i")),
            "independence": rng.randint(1200, 1960),
        }
        countries.append(_Entity("country", name, _split_of(i), facts))
    companies: list[_Entity] = []
    by_split_countries = {s: [c for c in countries if c.split == s] for s in SPLITS}
    for i in range(360):
        split = _split_of(i)
        if rng.random() < 0.15:  # named after a country of the same split: a look-alike distractor
            root = rng.choice(by_split_countries[split]).name
        else:
            root = namer.word()
        name = f"{root} {rng.choice(_COMPANY_SUFFIXES)}"
        if any(c.name == name for c in companies):
            name = f"{namer.word()} {rng.choice(_COMPANY_SUFFIXES)}"
        hq_country = rng.choice(by_split_countries[split])
        facts = {
            "founded": rng.randint(1820, 2010),
            "founder": _person(namer, rng, firsts),
            "hq": hq_country.facts["capital"],
            "industry": rng.choice(_INDUSTRIES),
            "employees": rng.randrange(200, 90000, 50),
        }
        companies.append(_Entity("company", name, split, facts))
    by_split_companies = {s: [c for c in companies if c.split == s] for s in SPLITS}
    devices: list[_Entity] = []
    for i in range(360):
        split = _split_of(i)
        kind, purpose = rng.choice(_DEVICE_KINDS)
        maker = rng.choice(by_split_companies[split])
        inventor = maker.facts["founder"] if rng.random() < 0.2 else _person(namer, rng, firsts)
        facts = {
            "inventor": inventor,
            "year": rng.randint(maker.facts["founded"] + 1, 2022),
            "maker": maker.name,
            "purpose": purpose,
        }
        devices.append(_Entity("device", f"{namer.word()} {kind}", split, facts))
    mountains: list[_Entity] = []
    for i in range(240):
        split = _split_of(i)
        country = rng.choice(by_split_countries[split])
        facts = {
            "height": rng.randint(1200, 8800),
            "country": country.name,
            "first_ascent": rng.randint(1780, 1990),
        }
        mountains.append(_Entity("mountain", f"Mount {namer.word()}", split, facts))
    rivers: list[_Entity] = []
    for i in range(180):
        split = _split_of(i)
        country = rng.choice(by_split_countries[split])
        facts = {"length": rng.randint(40, 4200), "country": country.name, "sea": rng.choice(seas)}
        rivers.append(_Entity("river", f"{namer.word()} River", split, facts))

    for i, c in enumerate(countries):
        f = c.facts
        where = f"in the {rng.choice(_REGIONS)} of {rng.choice(continents)}"
        text = rng.choice(
            (
                f"{c.name} is a country {where}. Its capital is {f['capital']}. {c.name} gained independence "
                f"in {f['independence']}. The official language of {c.name} is {f['language']}, and its "
                f"currency is the {f['currency']}.",
                f"{c.name}, a country {where}, gained independence in {f['independence']}. The capital of "
                f"{c.name} is {f['capital']}. People there pay with the {f['currency']} (its currency) and "
                f"speak {f['language']}, the official language.",
            )
        )
        c.passage = _add(world, f"country-{i:03d}", c.name, text)
    for i, c in enumerate(companies):
        f = c.facts
        text = rng.choice(
            (
                f"{c.name} is a {f['industry']} company founded in {f['founded']} by {f['founder']}. It is "
                f"headquartered in {f['hq']} and employs about {f['employees']} people.",
                f"Founded by {f['founder']} in {f['founded']}, {c.name} is a {f['industry']} company with "
                f"about {f['employees']} employees. Its headquarters are in {f['hq']}.",
            )
        )
        c.passage = _add(world, f"company-{i:03d}", c.name, text)
    for i, c in enumerate(devices):
        f = c.facts
        text = rng.choice(
            (
                f"The {c.name} is a {f['purpose']} device invented by {f['inventor']} in {f['year']}. "
                f"It is made by {f['maker']}.",
                f"{f['inventor']} invented the {c.name}, a {f['purpose']} device, in {f['year']}. Today "
                f"the {c.name} is made by the company {f['maker']}.",
            )
        )
        c.passage = _add(world, f"device-{i:03d}", c.name, text)
    for i, c in enumerate(mountains):
        f = c.facts
        text = (
            f"{c.name} is a mountain in {f['country']}. It is {f['height']} meters tall and was first "
            f"climbed in {f['first_ascent']}."
        )
        c.passage = _add(world, f"mountain-{i:03d}", c.name, text)
    for i, c in enumerate(rivers):
        f = c.facts
        text = (
            f"The {c.name} flows through {f['country']} and is {f['length']} kilometers long. It empties "
            f"into the {f['sea']}."
        )
        c.passage = _add(world, f"river-{i:03d}", c.name, text)
    world.entities = {
        "country": countries,
        "company": companies,
        "device": devices,
        "mountain": mountains,
        "river": rivers,
    }


# Words used by the passage and question templates: invented names must not collide with them.
_RESERVED_TEXT = (
    "country capital independence official language currency people pay speak company founded founder "
    "headquartered headquarters employs employees device invented inventor made maker today mountain meters "
    "tall climbed river flows kilometers long empties sea returns return window delivery refund restocking "
    "fee opened packaging accessories warranty manufacturing defects accidental damage wear exchanges "
    "exchange size color model charge standard shipping products manufacturer claims handled directly "
    "costs order arrives business days available items freight furniture large orders free express next "
    "day never threshold discounts membership year members eligible points dollar extra payment methods "
    "accepts following accept installment installments interest credit card gift cards valid purchase "
    "cash price match lower major retailer marketplace sellers clearance sales excluded matching mount "
    "north south east west center parcel covered lasts date only full up after"
)


@functools.lru_cache(maxsize=8)
def _world(seed: int) -> _World:
    rng = random.Random(f"{seed}/qa/kb")
    words = [_RESERVED_TEXT, *CATEGORIES, *_INDUSTRIES, *_COMPANY_SUFFIXES, *_TIERS, *_PAYMENT_ALWAYS]
    words += [*_PAYMENT_MAYBE, *(k for k, _ in _DEVICE_KINDS), *(p for _, p in _DEVICE_KINDS)]
    words += [o for o, *_ in _SHIPPING]
    reserved = set(tokenize(" ".join(words)))
    namer = _Namer(rng, reserved)
    world = _World(seed)
    _build_policy(world, rng, namer)
    _build_open(world, rng, namer)
    world.index = BM25(world.passages)
    world.by_split = {
        (kind, split): [e for e in entities if e.split == split]
        for kind, entities in world.entities.items()
        for split in SPLITS
    }
    return world


def kb(seed: int) -> list[dict[str, str]]:
    """The knowledge-base passages ``{"id", "title", "text"}`` of ``seed`` (a fresh copy of the cache)."""
    return [dict(p) for p in _world(seed).passages]


def policy_facts(seed: int) -> dict[str, Any]:
    """The structured shop policies behind the KB of ``seed`` (for other domains that must agree with it).

    Keys: ``returns`` / ``restocking`` / ``warranty`` (``{category: days / percent / months}``),
    ``shipping`` (``{option: (fee_cents, business_days)}``), ``free_shipping`` (dollars), ``tiers``,
    ``accepted``, ``refused``, ``installments`` (``(min dollars, count)``), ``gift_years``, ``price_match``.
    """
    pol = _world(seed).policy
    return {k: v for k, v in pol.items() if k != "passage"}


def search(seed: int, query: str, top_k: int = 3) -> list[dict[str, str]]:
    """BM25 search of the KB of ``seed`` (what ``search_kb`` runs)."""
    world = _world(seed)
    assert world.index is not None
    return [dict(world.passages[i]) for i in world.index.search(query, top_k)]


# ------------------------------------------------------------------------------------------------ tool


def _seed_of(ctx: ToolContext | None) -> int:
    db = getattr(ctx, "db", None)
    if db is None:
        return DEFAULT_SEED
    try:
        row = db.execute("SELECT seed FROM kb_info").fetchone()
    except sqlite3.Error:
        return DEFAULT_SEED
    return int(row[0]) if row and isinstance(row[0], int) else DEFAULT_SEED


def search_kb(ctx: ToolContext, query: str, top_k: int = 3) -> list[dict[str, str]]:
    """Search the shop's knowledge base; the ``top_k`` best passages ``{"id", "title", "text"}``."""
    if not isinstance(query, str) or not query.strip():
        raise ToolError("search_kb: query must be a non-empty string, e.g. 'return window for shoes'")
    if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or not 1 <= top_k <= MAX_TOP_K:
        raise ToolError(f"search_kb: top_k must be an integer from 1 to {MAX_TOP_K}, got {top_k!r}")
    return search(_seed_of(ctx), query[:300], int(top_k))


TOOLS: tuple[Tool, ...] = (
    Tool(
        name="search_kb",
        description=(
            "Search the knowledge base (shop policies: returns, shipping, warranty, membership, payment; and "
            "general facts). Returns the best matching passages with id, title and text."
        ),
        parameters={
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "maxLength": 300,
                    "description": "keywords naming the entity and what you want to know",
                },
                "top_k": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_TOP_K,
                    "default": 3,
                    "description": "number of passages to return",
                },
            },
            "required": ["query"],
        },
        fn=search_kb,
    ),
)

SYSTEM_PROMPT = (
    "You are the QA agent of an online shop. You answer questions about the shop's policies (returns, "
    "shipping, warranty, membership, payment) and general knowledge questions, using only the knowledge "
    "base: call search_kb with keywords that name the entity and what is asked. If the question needs a "
    "fact about an entity found in a first passage, search again for that entity. Passages about similar "
    "things look alike: read them carefully. Answer with the shortest exact phrase, e.g. "
    "<answer>30 days</answer>."
)


def build_db(seed: int) -> sqlite3.Connection:
    """The domain's database: just ``kb_info(seed)``, which tells ``search_kb`` which KB to search."""
    conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    conn.execute("CREATE TABLE kb_info (seed INTEGER NOT NULL)")
    conn.execute("INSERT INTO kb_info (seed) VALUES (?)", (int(seed),))
    return conn


def domain() -> Domain:
    """The QA sub-agent's tool, database (the KB seed) and prompt."""
    return Domain(agent="qa", tools=TOOLS, build_db=build_db, system_prompt=SYSTEM_PROMPT)


# ------------------------------------------------------------------------------------------------ tasks


@dataclass(frozen=True)
class _Q:
    """One generated question: phrasing, short answer, the gold search queries and passages."""

    question: str
    answer: str
    queries: tuple[str, ...]
    passages: tuple[str, ...]
    meta: dict[str, Any] = field(default_factory=dict)


def _phrase(rng: random.Random, split: str, phrasings: Sequence[str], by_split: bool) -> str:
    """Pick a phrasing; for policy questions the last two are held out for validation and test."""
    if by_split and len(phrasings) >= 3:
        pool = {"train": phrasings[:-2], "validation": phrasings[-2:-1], "test": phrasings[-1:]}[split]
    else:
        pool = list(phrasings)
    return rng.choice(pool)


def _entity(world: _World, rng: random.Random, split: str, kind: str) -> _Entity:
    return rng.choice(world.by_split[(kind, split)])


_OPEN: dict[str, tuple[str, str, tuple[str, ...], str]] = {
    # template: (entity kind, fact key, phrasings with {e}, gold query with {e})
    "country_capital": (
        "country", "capital",
        ("What is the capital of {e}?", "Which city is the capital of {e}?", "Name the capital city of {e}.",
         "{e} has which city as its capital?", "Tell me the capital of {e}.",
         "What city serves as the capital of {e}?"),
        "capital of {e}",
    ),
    "country_currency": (
        "country", "currency",
        ("What currency is used in {e}?", "What is the currency of {e}?",
         "Which currency do people in {e} pay with?", "Name the currency of {e}.",
         "What money is used in {e}?", "If I travel to {e}, which currency do I need?"),
        "{e} currency",
    ),
    "country_language": (
        "country", "language",
        ("What is the official language of {e}?", "Which language is official in {e}?",
         "What language do people in {e} officially speak?", "Name the official language of {e}.",
         "In {e}, what is the official language?"),
        "{e} official language",
    ),
    "country_independence": (
        "country", "independence",
        ("In what year did {e} gain independence?", "When did {e} become independent?",
         "Which year did {e} gain its independence?", "{e} became independent in which year?",
         "What is the year of independence of {e}?"),
        "{e} independence year",
    ),
    "company_founded": (
        "company", "founded",
        ("When was {e} founded?", "In what year was {e} founded?", "What year did {e} start?",
         "{e} was founded in which year?", "What is the founding year of {e}?",
         "How far back does {e} go? Give the founding year."),
        "{e} founded year",
    ),
    "company_founder": (
        "company", "founder",
        ("Who founded {e}?", "Who is the founder of {e}?", "Name the person who founded {e}.",
         "Who started the company {e}?", "{e} was founded by whom?"),
        "{e} founder",
    ),
    "company_hq": (
        "company", "hq",
        ("Where is {e} headquartered?", "In which city are the headquarters of {e}?",
         "Which city is {e} based in?", "Where are the headquarters of {e}?",
         "Name the city where {e} has its headquarters."),
        "{e} headquarters",
    ),
    "device_inventor": (
        "device", "inventor",
        ("Who invented the {e}?", "Who is the inventor of the {e}?", "Name the inventor of the {e}.",
         "The {e} was invented by whom?", "Which person invented the {e}?"),
        "{e} inventor",
    ),
    "device_year": (
        "device", "year",
        ("In what year was the {e} invented?", "When was the {e} invented?",
         "The {e} was invented in which year?", "What year did the {e} first appear?",
         "Give the year the {e} was invented."),
        "{e} invented year",
    ),
    "device_maker": (
        "device", "maker",
        ("Which company makes the {e}?", "Who makes the {e} today?", "What company manufactures the {e}?",
         "The {e} is made by which company?", "Name the maker of the {e}."),
        "{e} made by company",
    ),
    "mountain_height": (
        "mountain", "height",
        ("How tall is {e}?", "What is the height of {e}?", "How high is {e} in meters?",
         "How many meters tall is {e}?", "Give the height of {e}."),
        "{e} height meters",
    ),
    "mountain_country": (
        "mountain", "country",
        ("In which country is {e}?", "Which country is {e} located in?", "Where is {e}? Name the country.",
         "{e} lies in which country?", "Name the country that {e} is in."),
        "{e} country",
    ),
    "river_length": (
        "river", "length",
        ("How long is the {e}?", "What is the length of the {e}?", "How many kilometers long is the {e}?",
         "Give the length of the {e}.", "The {e} is how long?"),
        "{e} length kilometers",
    ),
    "river_sea": (
        "river", "sea",
        ("Into which sea does the {e} flow?", "Where does the {e} empty into?",
         "Which sea does the {e} empty into?", "The {e} ends in which sea?",
         "Name the sea at the mouth of the {e}."),
        "{e} empties into sea",
    ),
}


def _open_answer(key: str, value: Any) -> str:
    if key == "height":
        return f"{value} meters"
    if key == "length":
        return f"{value} kilometers"
    return str(value)


def _open_question(template: str) -> Callable[[_World, random.Random, str], _Q]:
    kind, key, phrasings, query = _OPEN[template]

    def build(world: _World, rng: random.Random, split: str) -> _Q:
        e = _entity(world, rng, split, kind)
        return _Q(
            question=_phrase(rng, split, phrasings, False).format(e=e.name),
            answer=_open_answer(key, e.facts[key]),
            queries=(query.format(e=e.name),),
            passages=(e.passage,),
        )

    return build


def _by_name(world: _World, kind: str, name: str) -> _Entity:
    return next(e for e in world.entities[kind] if e.name == name)


def _q_maker_founded(world: _World, rng: random.Random, split: str) -> _Q:
    d = _entity(world, rng, split, "device")
    c = _by_name(world, "company", d.facts["maker"])
    phrasings = (
        "In which year was the company that makes the {e} founded?",
        "When was the maker of the {e} founded?",
        "The company that manufactures the {e} was founded in what year?",
    )
    return _Q(
        _phrase(rng, split, phrasings, False).format(e=d.name),
        str(c.facts["founded"]),
        (f"{d.name} made by company", f"{c.name} founded year"),
        (d.passage, c.passage),
        {"bridge": c.name},
    )


def _q_maker_founder(world: _World, rng: random.Random, split: str) -> _Q:
    d = _entity(world, rng, split, "device")
    c = _by_name(world, "company", d.facts["maker"])
    phrasings = (
        "Who founded the company that makes the {e}?",
        "Name the founder of the company that manufactures the {e}.",
        "Who is the founder of the maker of the {e}?",
    )
    return _Q(
        _phrase(rng, split, phrasings, False).format(e=d.name),
        c.facts["founder"],
        (f"{d.name} made by company", f"{c.name} founder"),
        (d.passage, c.passage),
        {"bridge": c.name},
    )


def _q_mountain_capital(world: _World, rng: random.Random, split: str) -> _Q:
    m = _entity(world, rng, split, "mountain")
    c = _by_name(world, "country", m.facts["country"])
    phrasings = (
        "What is the capital of the country where {e} is located?",
        "{e} stands in a country. What is that country's capital?",
        "Name the capital city of the country that {e} is in.",
    )
    return _Q(
        _phrase(rng, split, phrasings, False).format(e=m.name),
        c.facts["capital"],
        (f"{m.name} country", f"capital of {c.name}"),
        (m.passage, c.passage),
        {"bridge": c.name},
    )


# ----- policy questions


def _categories(split: str) -> list[str]:
    return _partition(CATEGORIES, split)


_RETURN_PHRASES = (
    "How many days do I have to return {c}?",
    "What is the return window for {c}?",
    "Within how many days can {c} be returned?",
    "How long do I have to send back {c} for a refund?",
    "If I buy {c}, how many days do I have for a return?",
)
_WARRANTY_PHRASES = (
    "How long is the warranty on {c}?",
    "What is the warranty period for {c}?",
    "How long does the shop warranty for {c} last?",
    "For how long does the shop warranty cover {c}?",
    "How long am I covered against manufacturing defects on {c}?",
)


def _return_window(world: _World, rng: random.Random, split: str, category: str | None = None) -> _Q:
    c = category or rng.choice(_categories(split))
    days = world.policy["returns"][c]
    return _Q(
        _phrase(rng, split, _RETURN_PHRASES, True).format(c=_noun(c)),
        f"{days} days",
        (f"return window {_noun(c)}",),
        (world.policy["passage"][("returns", c)],),
        {"category": c, "value": days, "unit": "days"},
    )


def _restocking_fee(world: _World, rng: random.Random, split: str) -> _Q:
    c = rng.choice(_categories(split))
    fee = world.policy["restocking"][c]
    phrasings = (
        "What is the restocking fee for returned {c}?",
        "How much is the restocking fee when I return opened {c}?",
        "What percent restocking fee applies to opened {c}?",
        "If I return opened {c}, what restocking fee is charged?",
        "What restocking fee does the shop charge on {c}?",
    )
    return _Q(
        _phrase(rng, split, phrasings, True).format(c=_noun(c)),
        f"{fee}%",
        (f"restocking fee {_noun(c)}",),
        (world.policy["passage"][("returns", c)],),
        {"category": c, "value": fee, "unit": "percent"},
    )


def _warranty(world: _World, rng: random.Random, split: str, category: str | None = None) -> _Q:
    c = category or rng.choice(_categories(split))
    months = world.policy["warranty"][c]
    return _Q(
        _phrase(rng, split, _WARRANTY_PHRASES, True).format(c=_noun(c)),
        _duration(months),
        (f"warranty {_noun(c)}",),
        (world.policy["passage"][("warranty", c)],),
        {"category": c, "value": months, "unit": "months"},
    )


def _brand_warranty(world: _World, rng: random.Random, split: str) -> _Q:
    brand = rng.choice(_partition(list(world.policy["brands"]), split))
    months = world.policy["brands"][brand]
    phrasings = (
        "How long is the manufacturer warranty for {b} products?",
        "What manufacturer warranty do {b} products carry?",
        "How many years of manufacturer warranty does {b} give?",
        "For how long does {b} cover its products?",
        "What is the length of the {b} manufacturer warranty?",
    )
    return _Q(
        _phrase(rng, split, phrasings, True).format(b=brand),
        _duration(months),
        (f"{brand} manufacturer warranty",),
        (world.policy["passage"][("brand", brand)],),
        {"brand": brand, "value": months, "unit": "months"},
    )


def _shipping_fee(world: _World, rng: random.Random, split: str, option: str | None = None) -> _Q:
    option = option or rng.choice([o for o, *_ in _SHIPPING])
    fee, _ = world.policy["shipping"][option]
    name = option.lower()
    phrasings = (
        "How much does {o} shipping cost?",
        "What is the fee for {o} shipping?",
        "What does the shop charge for {o} shipping?",
        "How much will {o} shipping add to my order?",
        "What is the price of {o} shipping per order?",
    )
    return _Q(
        _phrase(rng, split, phrasings, True).format(o=name),
        _money(fee),
        (f"{name} shipping cost",),
        (world.policy["passage"][("shipping", option)],),
        {"option": option, "value": fee / 100, "unit": "dollars"},
    )


def _shipping_time(world: _World, rng: random.Random, split: str, option: str | None = None) -> _Q:
    option = option or rng.choice([o for o, *_ in _SHIPPING])
    _, days = world.policy["shipping"][option]
    name = option.lower()
    phrasings = (
        "How many business days does {o} shipping take?",
        "How long does {o} shipping take to arrive?",
        "How fast is {o} shipping?",
        "With {o} shipping, how many business days until my order arrives?",
        "What is the delivery time of {o} shipping?",
    )
    return _Q(
        _phrase(rng, split, phrasings, True).format(o=name),
        "1 business day" if days == 1 else f"{days} business days",
        (f"{name} shipping business days",),
        (world.policy["passage"][("shipping", option)],),
        {"option": option, "value": days, "unit": "business days"},
    )


def _free_shipping(world: _World, rng: random.Random, split: str) -> _Q:
    phrasings = (
        "What is the minimum order for free shipping?",
        "How much do I need to spend to get free standard shipping?",
        "From what order amount is standard shipping free?",
        "What order total qualifies for free shipping?",
        "Above which amount do orders ship for free?",
    )
    t = world.policy["free_shipping"]
    return _Q(
        _phrase(rng, split, phrasings, True),
        f"${t}",
        ("free shipping minimum order",),
        (world.policy["passage"][("free_shipping", None)],),
        {"value": t, "unit": "dollars"},
    )


_MEMBERSHIP: dict[str, tuple[tuple[str, ...], str, Callable[[dict], str]]] = {
    "membership_fee": (
        ("How much does {t} membership cost per year?", "What is the annual fee for {t} membership?",
         "What does a {t} membership cost each year?", "How much is the yearly {t} membership fee?",
         "What is the price of {t} membership per year?"),
        "{t} membership cost per year",
        lambda f: f"${f['fee']}",
    ),
    "membership_discount": (
        ("What discount do {t} members get?", "How much off do {t} members get on eligible orders?",
         "What percent discount comes with {t} membership?", "What is the {t} member discount?",
         "How big is the discount for {t} members?"),
        "{t} members discount",
        lambda f: f"{f['discount']}%",
    ),
    "membership_points": (
        ("How many points per dollar do {t} members earn?", "What is the points rate for {t} members?",
         "How many reward points does a {t} member earn per dollar?", "Points per dollar for {t} members?",
         "At {t} level, how many points do I get for each dollar?"),
        "{t} members points per dollar",
        lambda f: f"{f['points']} point" + ("s" if f["points"] != 1 else ""),
    ),
    "membership_returns": (
        ("How many extra days for returns do {t} members get?", "How much longer can {t} members return "
         "items?", "What return extension comes with {t} membership?", "How many more days do {t} members "
         "have to return things?", "What is the extra return time for {t} members?"),
        "{t} members extra days returns",
        lambda f: f"{f['extra_days']} extra days",
    ),
}


_MEMBERSHIP_KEYS = {
    "membership_fee": ("fee", "dollars"),
    "membership_discount": ("discount", "percent"),
    "membership_points": ("points", "points"),
    "membership_returns": ("extra_days", "days"),
}


def _membership(template: str) -> Callable[..., _Q]:
    phrasings, query, answer = _MEMBERSHIP[template]
    key, unit = _MEMBERSHIP_KEYS[template]

    def build(world: _World, rng: random.Random, split: str, tier: str | None = None) -> _Q:
        tier = tier or rng.choice(_TIERS)
        facts = world.policy["tiers"][tier]
        return _Q(
            _phrase(rng, split, phrasings, True).format(t=tier),
            answer(facts),
            (query.format(t=tier),),
            (world.policy["passage"][("membership", tier)],),
            {"tier": tier, "value": facts[key], "unit": unit},
        )

    return build


def _payment_accepted(world: _World, rng: random.Random, split: str) -> _Q:
    accepted = rng.random() < 0.5
    method = rng.choice(world.policy["accepted"] if accepted else world.policy["refused"])
    phrasings = (
        "Does the shop accept {m}? Answer yes or no.",
        "Can I pay with {m}? Answer yes or no.",
        "Is {m} an accepted payment method? Answer yes or no.",
        "Will the shop take {m} as payment? Answer yes or no.",
        "Are payments by {m} accepted? Answer yes or no.",
    )
    return _Q(
        _phrase(rng, split, phrasings, True).format(m=method),
        "yes" if accepted else "no",
        (f"payment methods accept {method}",),
        (world.policy["passage"][("payment", accepted)],),
        {"method": method},
    )


def _installments(world: _World, rng: random.Random, split: str) -> _Q:
    minimum, count = world.policy["installments"]
    if rng.random() < 0.5:
        phrasings = (
            "What is the minimum order for installment payments?",
            "How much must an order be to pay in installments?",
            "From what order amount can I pay in installments?",
            "What order total lets me split the payment into installments?",
            "Above what amount are interest-free installments offered?",
        )
        answer = f"${minimum}"
    else:
        phrasings = (
            "Into how many installments can I split a payment?",
            "How many interest-free installments does the shop offer?",
            "How many installments can an order be paid in?",
            "In how many parts can I pay with installments?",
            "What number of installments is allowed?",
        )
        answer = f"{count} installments"
    return _Q(
        _phrase(rng, split, phrasings, True),
        answer,
        ("installment payments order",),
        (world.policy["passage"][("installments", None)],),
    )


def _gift_card(world: _World, rng: random.Random, split: str) -> _Q:
    phrasings = (
        "How long are gift cards valid?",
        "For how many years can a gift card be used?",
        "When does a gift card expire after purchase?",
        "How many years is a shop gift card good for?",
        "What is the validity period of gift cards?",
    )
    return _Q(
        _phrase(rng, split, phrasings, True),
        f"{world.policy['gift_years']} years",
        ("gift cards valid years",),
        (world.policy["passage"][("gift", None)],),
    )


def _price_match(world: _World, rng: random.Random, split: str) -> _Q:
    phrasings = (
        "Within how many days of purchase can I ask for a price match?",
        "How long after buying can I request a price match?",
        "What is the price match period?",
        "How many days do I have to get a lower price matched?",
        "For how many days after purchase does the shop match prices?",
    )
    return _Q(
        _phrase(rng, split, phrasings, True),
        f"{world.policy['price_match']} days",
        ("price match days purchase",),
        (world.policy["passage"][("price_match", None)],),
    )


_TEMPLATES: dict[str, Callable[[_World, random.Random, str], _Q]] = {
    **{name: _open_question(name) for name in _OPEN},
    "return_window": _return_window,
    "restocking_fee": _restocking_fee,
    "warranty": _warranty,
    "brand_warranty": _brand_warranty,
    "shipping_fee": _shipping_fee,
    "shipping_time": _shipping_time,
    "free_shipping": _free_shipping,
    **{name: _membership(name) for name in _MEMBERSHIP},
    "payment_accepted": _payment_accepted,
    "installments": _installments,
    "gift_card": _gift_card,
    "price_match": _price_match,
    "maker_founded": _q_maker_founded,
    "maker_founder": _q_maker_founder,
    "mountain_capital": _q_mountain_capital,
}
# Sampling weights: open-domain single hop, frequent policy facts, rare single-fact policies, multi-hop.
_WEIGHTS = {name: 4.0 for name in _OPEN}
_WEIGHTS.update(
    {"return_window": 5.0, "restocking_fee": 3.0, "warranty": 4.0, "brand_warranty": 3.0, "shipping_fee": 2.0,
     "shipping_time": 2.0, "free_shipping": 1.0, "membership_fee": 1.0, "membership_discount": 1.0,
     "membership_points": 1.0, "membership_returns": 1.0, "payment_accepted": 2.0, "installments": 1.0,
     "gift_card": 0.5, "price_match": 0.5}
)
_WEIGHTS.update({name: 5.0 for name in MULTI_HOP_TEMPLATES})


def _search_call(query: str) -> dict[str, Any]:
    return {"name": "search_kb", "arguments": {"query": query}}


class QATaskSource:
    """Generated knowledge-base questions (see the module docstring); deterministic in (seed, split,
    index)."""

    def __init__(self, seed: int = 0, sizes: dict[str, int] | None = None) -> None:
        self.seed = seed
        self.sizes = dict(SIZES if sizes is None else sizes)
        self._names = {
            s: [n for n in _TEMPLATES if s == "test" or n not in MULTI_HOP_TEMPLATES] for s in SPLITS
        }

    def size(self, split: str) -> int:
        check_split(split)
        return self.sizes[split]

    def task(self, split: str, index: int) -> Task:
        check_index(split, index, self.size(split))
        world = _world(self.seed)
        rng = random.Random(f"{self.seed}/qa/{split}/{index}")
        names = self._names[split]
        template = rng.choices(names, weights=[_WEIGHTS[n] for n in names])[0]
        q = _TEMPLATES[template](world, rng, split)
        sub = SubTask(
            agent="qa",
            query=q.question,
            turns=tuple((_search_call(query),) for query in q.queries),
            answer=q.answer,
        )
        meta = {
            "hops": len(q.queries),
            "passages": q.passages,
            "test_only_template": template in MULTI_HOP_TEMPLATES,
            **q.meta,
        }
        return Task(
            task_id=f"qa/{split}/{index}",
            domain="qa",
            query=q.question,
            answer=q.answer,
            answer_type="qa",
            route=(sub,),
            template=template,
            meta=meta,
        )


def task_source(seed: int, db: Any = None) -> QATaskSource:
    """The generated QA tasks for ``seed`` (``db`` is unused: the KB is rebuilt from the seed)."""
    return QATaskSource(seed)


# ------------------------------------------------------------------------- parts for collaborative tasks


def _normal_category(category: str) -> str:
    key = " ".join(category.lower().replace("&", "and").split())
    for c in CATEGORIES:
        if key in (c, _stem(c), c + "s") or _stem(key) == _stem(c):
            return c
    raise ValueError(f"unknown category {category!r}; known categories: {', '.join(CATEGORIES)}")


def policy_part(
    rng: random.Random, split: str, topic: str, category: str | None = None, seed: int = DEFAULT_SEED
) -> tuple[SubTask, dict]:
    """A ``qa`` sub-task asking one shop-policy fact, with its gold search and short answer.

    ``topic`` is one of :data:`TOPICS`: ``returns`` (return window of ``category``), ``warranty`` (shop
    warranty of ``category``), ``shipping`` (fee or delivery time of an option, or the free-shipping
    threshold), ``membership`` (a tier's fee, discount, points or extra return days) or ``payment``
    (accepted method, installments, gift cards). ``category`` is needed for returns and warranty (a random
    category of ``split`` when ``None``) and ignored otherwise. ``seed`` selects the KB (the env's seed).

    Returns ``(SubTask, {"answer", "question", "topic", "category", "query", "passage_id", "value",
    "unit"})``; ``value`` is the number in the answer (days, months, dollars...) or ``None``.

    Raises:
        ValueError: unknown topic, split or category.
    """
    if topic not in TOPICS:
        raise ValueError(f"unknown topic {topic!r}; expected one of {TOPICS}")
    check_split(split)
    world = _world(seed)
    cat = _normal_category(category) if category is not None else None
    if topic == "returns":
        q = _return_window(world, rng, split, cat)
    elif topic == "warranty":
        q = _warranty(world, rng, split, cat)
    elif topic == "shipping":
        q = rng.choice((_shipping_fee, _shipping_time, _shipping_time, _free_shipping))(world, rng, split)
    elif topic == "membership":
        q = _membership(rng.choice(list(_MEMBERSHIP)))(world, rng, split)
    else:
        q = rng.choice((_payment_accepted, _installments, _gift_card))(world, rng, split)
    sub = SubTask(
        agent="qa",
        query=q.question,
        turns=tuple((_search_call(query),) for query in q.queries),
        answer=q.answer,
    )
    value = q.meta.get("value")
    if value is None:
        number = re.search(r"\d+(?:\.\d+)?", q.answer)
        value = float(number.group(0)) if number else None
    info = {
        "answer": q.answer,
        "question": q.question,
        "topic": topic,
        "category": q.meta.get("category"),
        "query": q.queries[0],
        "passage_id": q.passages[0],
        "value": value,
        "unit": q.meta.get("unit"),
    }
    return sub, info
