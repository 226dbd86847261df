"""World generation: the shop policies and the invented open-domain entities of a seed, as KB passages."""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from joy_env.core import SPLITS
from joy_env.domains.qa.retrieval import BM25, STOPWORDS, stem, tokenize

# The shop's catalog categories first (kept in step with the e-commerce domain), then more.
CATEGORIES = (
    "electronics",
    "clothing",
    "shoes",
    "home",
    "sports",
    "books",
    "beauty",
    "toys",
    "furniture",
    "kitchen",
    "jewelry",
    "watches",
    "groceries",
    "pet supplies",
    "office supplies",
    "garden",
    "automotive",
    "baby products",
    "video games",
    "musical instruments",
    "health",
    "outdoor gear",
    "bedding",
    "luggage",
    "tools",
    "cameras",
    "laptops",
    "phones",
    "appliances",
    "art supplies",
)
# How a category reads inside a sentence ("items from the home category" would be clumsy).
_NOUNS = {
    "home": "home goods",
    "sports": "sports gear",
    "beauty": "beauty products",
    "kitchen": "kitchenware",
    "groceries": "groceries",
    "garden": "garden supplies",
    "automotive": "car parts",
    "health": "health products",
    "outdoor gear": "outdoor gear",
    "bedding": "bedding",
    "appliances": "home appliances",
}
TOPICS = ("returns", "shipping", "warranty", "membership", "payment")


_ONSETS = (
    "b",
    "br",
    "c",
    "d",
    "dr",
    "f",
    "g",
    "gr",
    "h",
    "k",
    "kr",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "st",
    "t",
    "tr",
    "v",
    "z",
    "th",
    "sh",
    "qu",
    "y",
    "j",
    "w",
    "bl",
    "fl",
)
_NUCLEI = ("a", "e", "i", "o", "u", "ai", "ei", "ou", "ia", "ae", "y")
_CODAS = ("", "", "n", "r", "l", "m", "th", "nd", "rt", "x", "v")
_INDUSTRIES = (
    "shipbuilding",
    "textile",
    "optics",
    "clockmaking",
    "railway",
    "printing",
    "aviation",
    "mining",
    "software",
    "glassware",
    "instrument",
    "chemical",
    "engineering",
    "telegraph",
    "pharmaceutical",
)
_COMPANY_SUFFIXES = (
    "Dynamics",
    "Works",
    "Labs",
    "Industries",
    "Systems",
    "Instruments",
    "Foundry",
    "Mechanics",
    "Company",
    "Manufacturing",
)
_DEVICE_KINDS = (
    ("Loom", "weaving"),
    ("Compass", "navigation"),
    ("Engine", "power"),
    ("Lantern", "lighting"),
    ("Press", "printing"),
    ("Scope", "viewing"),
    ("Telegraph", "signalling"),
    ("Kiln", "firing"),
    ("Pump", "water"),
    ("Clock", "timekeeping"),
    ("Sextant", "surveying"),
    ("Phonograph", "recording"),
)
_REGIONS = ("north", "south", "east", "west", "center")
SHIPPING = (  # option, min fee cents, max fee cents, min days, max days
    ("Standard", 399, 799, 4, 7),
    ("Economy", 199, 399, 7, 12),
    ("Express", 999, 1699, 2, 3),
    ("Next-Day", 1999, 2999, 1, 1),
    ("Freight", 4999, 8999, 8, 14),
)
TIERS = ("Silver", "Gold", "Platinum", "Diamond")
_PAYMENT_ALWAYS = ("Visa", "Mastercard", "JoyPay wallet", "gift cards")
_PAYMENT_MAYBE = (
    "American Express",
    "Discover",
    "PayPal",
    "Apple Pay",
    "Google Pay",
    "bank transfer",
    "cash on delivery",
    "personal checks",
    "cryptocurrency",
    "money orders",
    "UnionPay",
    "Diners Club",
)
_BRAND_SUFFIXES = ("tek", "ware", "ly", "on", "io", "ex", "ora", "ix")


@dataclass
class Entity:
    kind: str
    name: str
    split: str
    facts: dict[str, Any]
    passage: str = ""


@dataclass
class World:
    seed: int
    passages: list[dict[str, str]] = field(default_factory=list)
    entities: dict[str, list[Entity]] = field(default_factory=dict)
    policy: dict[str, Any] = field(default_factory=dict)
    index: BM25 | None = None
    by_id: dict[str, int] = field(default_factory=dict)
    by_split: dict[tuple[str, str], list[Entity]] = field(default_factory=dict)


def _split_of(i: int) -> str:
    return "train" if i % 10 < 8 else ("validation" if i % 10 == 8 else "test")


def partition(pool: Sequence[Any], split: str) -> list[Any]:
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
            key = stem(w)
            if 4 <= len(w) <= 11 and key not in self.used and w not in STOPWORDS:
                self.used.add(key)
                return w.capitalize()
        raise RuntimeError("name space exhausted")  # pragma: no cover


def noun(category: str) -> str:
    return _NOUNS.get(category, category)


def _plural_title(category: str) -> str:
    return category[:1].upper() + category[1:]


def duration(months: int) -> str:
    if months % 12 == 0:
        years = months // 12
        return "1 year" if years == 1 else f"{years} years"
    return f"{months} months"


def money(cents: int) -> str:
    return f"${cents // 100}" if cents % 100 == 0 else f"${cents // 100}.{cents % 100:02d}"


def _add(world: World, pid: str, title: str, text: str) -> str:
    world.by_id[pid] = len(world.passages)
    world.passages.append({"id": pid, "title": title, "text": text})
    return pid


def _category_policies(world: World, rng: random.Random, pol: dict[str, Any]) -> None:
    """Returns, restocking fees and warranties per category (and exchanges, a look-alike, for every other one)."""
    for i, category in enumerate(CATEGORIES):
        cat = noun(category)
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
                f"Every purchase of {cat} from the shop comes with a warranty of {duration(months)} "
                f"against manufacturing defects. The warranty on {cat} does not cover accidental damage or "
                "normal wear.",
                f"The shop warranty for {cat} lasts {duration(months)} from the date of delivery and covers "
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


def _brand_policies(world: World, rng: random.Random, namer: _Namer, pol: dict[str, Any]) -> None:
    """20 invented brands and their manufacturer warranties."""
    brands = []
    for _ in range(20):
        root = namer.word((2,))
        brands.append(root + rng.choice(_BRAND_SUFFIXES))
    pol["brands"] = {}
    for i, brand in enumerate(brands):
        months = rng.choice((12, 24, 36, 48, 60))
        pol["brands"][brand] = months
        text = (
            f"Products made by {brand} carry a manufacturer warranty of {duration(months)} in addition to "
            f"the shop warranty. Warranty claims for {brand} products are handled by {brand} directly."
        )
        pol["passage"][("brand", brand)] = _add(world, f"policy-brand-{i:02d}", f"Manufacturer warranty: {brand}", text)


def _shipping_policies(world: World, rng: random.Random, pol: dict[str, Any]) -> None:
    """Each shipping option's fee and days, and the free-shipping threshold."""
    pol["shipping"] = {}
    for i, (option, lo, hi, dlo, dhi) in enumerate(SHIPPING):
        fee = rng.randint(lo // 100, hi // 100) * 100 + 99
        days = rng.randint(dlo, dhi)
        pol["shipping"][option] = (fee, days)
        day_word = "1 business day" if days == 1 else f"{days} business days"
        text = (
            f"{option} shipping costs {money(fee)} per order and arrives in {day_word} after the order "
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


def _membership_policies(world: World, rng: random.Random, pol: dict[str, Any]) -> None:
    """Each membership tier's fee, discount, points and extra return days."""
    pol["tiers"] = {}
    fees = sorted(rng.sample(range(19, 200, 10), len(TIERS)))
    for i, tier in enumerate(TIERS):
        fee, disc = fees[i], 2 * (i + 1) + rng.choice((0, 1, 3))
        points, extra = i + 1 + rng.choice((0, 1)), rng.choice((5, 10, 15, 20, 30))
        pol["tiers"][tier] = {"fee": fee, "discount": disc, "points": points, "extra_days": extra}
        text = (
            f"{tier} membership costs ${fee} per year. {tier} members get {disc}% off eligible orders, earn "
            f"{points} points per dollar spent and get {extra} extra days for returns."
        )
        pol["passage"][("membership", tier)] = _add(world, f"policy-membership-{i:02d}", f"{tier} membership", text)


def _payment_policies(world: World, rng: random.Random, pol: dict[str, Any]) -> None:
    """Accepted and refused payment methods, installments, gift cards and price matching."""
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
        f"Gift cards are valid for {gift_years} years from the date of purchase and cannot be exchanged for cash.",
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


def _build_policy(world: World, rng: random.Random, namer: _Namer) -> None:
    pol: dict[str, Any] = {"returns": {}, "restocking": {}, "warranty": {}, "exchange": {}, "passage": {}}
    _category_policies(world, rng, pol)
    _brand_policies(world, rng, namer, pol)
    _shipping_policies(world, rng, pol)
    _membership_policies(world, rng, pol)
    _payment_policies(world, rng, pol)
    world.policy = pol


def _person(namer: _Namer, rng: random.Random, firsts: list[str]) -> str:
    return f"{rng.choice(firsts)} {namer.word((2, 3))}"


def _open_entities(rng: random.Random, namer: _Namer) -> tuple[dict[str, list[Entity]], list[str]]:
    """The invented countries, companies, devices, mountains and rivers (by kind), and the continents."""
    firsts = [namer.word((2,)) for _ in range(60)]
    seas = [f"{namer.word((2,))} Sea" for _ in range(20)]
    continents = [namer.word((3,)) for _ in range(6)]
    countries: list[Entity] = []
    for i in range(240):
        name = namer.word()
        facts = {
            "capital": namer.word(),
            "currency": namer.word((2,)).lower(),
            "language": namer.word((2,)) + rng.choice(("ic", "ese", "ian", "i")),
            "independence": rng.randint(1200, 1960),
        }
        countries.append(Entity("country", name, _split_of(i), facts))
    companies: list[Entity] = []
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
        companies.append(Entity("company", name, split, facts))
    by_split_companies = {s: [c for c in companies if c.split == s] for s in SPLITS}
    devices: list[Entity] = []
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
        devices.append(Entity("device", f"{namer.word()} {kind}", split, facts))
    mountains: list[Entity] = []
    for i in range(240):
        split = _split_of(i)
        country = rng.choice(by_split_countries[split])
        facts = {
            "height": rng.randint(1200, 8800),
            "country": country.name,
            "first_ascent": rng.randint(1780, 1990),
        }
        mountains.append(Entity("mountain", f"Mount {namer.word()}", split, facts))
    rivers: list[Entity] = []
    for i in range(180):
        split = _split_of(i)
        country = rng.choice(by_split_countries[split])
        facts = {"length": rng.randint(40, 4200), "country": country.name, "sea": rng.choice(seas)}
        rivers.append(Entity("river", f"{namer.word()} River", split, facts))
    entities = {"country": countries, "company": companies, "device": devices, "mountain": mountains, "river": rivers}
    return entities, continents


def _open_passages(world: World, rng: random.Random, entities: dict[str, list[Entity]], continents: list[str]) -> None:
    """One KB passage per entity, in one of its kind's phrasings."""
    countries, companies, devices = entities["country"], entities["company"], entities["device"]
    mountains, rivers = entities["mountain"], entities["river"]
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


def _build_open(world: World, rng: random.Random, namer: _Namer) -> None:
    entities, continents = _open_entities(rng, namer)
    _open_passages(world, rng, entities, continents)
    world.entities = entities


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
def world_of(seed: int) -> World:
    rng = random.Random(f"{seed}/qa/kb")
    words = [_RESERVED_TEXT, *CATEGORIES, *_INDUSTRIES, *_COMPANY_SUFFIXES, *TIERS, *_PAYMENT_ALWAYS]
    words += [*_PAYMENT_MAYBE, *(k for k, _ in _DEVICE_KINDS), *(p for _, p in _DEVICE_KINDS)]
    words += [o for o, *_ in SHIPPING]
    reserved = set(tokenize(" ".join(words)))
    namer = _Namer(rng, reserved)
    world = World(seed)
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
    return [dict(p) for p in world_of(seed).passages]


def policy_facts(seed: int) -> dict[str, Any]:
    """The structured shop policies behind the KB of ``seed`` (for other domains that must agree with it).

    Keys: ``returns`` / ``restocking`` / ``warranty`` (``{category: days / percent / months}``),
    ``shipping`` (``{option: (fee_cents, business_days)}``), ``free_shipping`` (dollars), ``tiers``,
    ``accepted``, ``refused``, ``installments`` (``(min dollars, count)``), ``gift_years``, ``price_match``.
    """
    pol = world_of(seed).policy
    return {k: v for k, v in pol.items() if k != "passage"}


def search(seed: int, query: str, top_k: int = 3) -> list[dict[str, str]]:
    """BM25 search of the KB of ``seed`` (what ``search_kb`` runs)."""
    world = world_of(seed)
    assert world.index is not None
    return [dict(world.passages[i]) for i in world.index.search(query, top_k)]
