"""The generated QA task source: open-domain, policy and multi-hop question templates."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from joy_env.core import SPLITS, SubTask, Task, TaskSourceBase
from joy_env.domains.qa.world import (
    CATEGORIES,
    SHIPPING,
    TIERS,
    Entity,
    World,
    duration,
    money,
    noun,
    partition,
    world_of,
)

SIZES = {"train": 20000, "validation": 2000, "test": 2000}


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


def _entity(world: World, rng: random.Random, split: str, kind: str) -> Entity:
    return rng.choice(world.by_split[(kind, split)])


_OPEN: dict[str, tuple[str, str, tuple[str, ...], str]] = {
    # template: (entity kind, fact key, phrasings with {e}, gold query with {e})
    "country_capital": (
        "country",
        "capital",
        (
            "What is the capital of {e}?",
            "Which city is the capital of {e}?",
            "Name the capital city of {e}.",
            "{e} has which city as its capital?",
            "Tell me the capital of {e}.",
            "What city serves as the capital of {e}?",
        ),
        "capital of {e}",
    ),
    "country_currency": (
        "country",
        "currency",
        (
            "What currency is used in {e}?",
            "What is the currency of {e}?",
            "Which currency do people in {e} pay with?",
            "Name the currency of {e}.",
            "What money is used in {e}?",
            "If I travel to {e}, which currency do I need?",
        ),
        "{e} currency",
    ),
    "country_language": (
        "country",
        "language",
        (
            "What is the official language of {e}?",
            "Which language is official in {e}?",
            "What language do people in {e} officially speak?",
            "Name the official language of {e}.",
            "In {e}, what is the official language?",
        ),
        "{e} official language",
    ),
    "country_independence": (
        "country",
        "independence",
        (
            "In what year did {e} gain independence?",
            "When did {e} become independent?",
            "Which year did {e} gain its independence?",
            "{e} became independent in which year?",
            "What is the year of independence of {e}?",
        ),
        "{e} independence year",
    ),
    "company_founded": (
        "company",
        "founded",
        (
            "When was {e} founded?",
            "In what year was {e} founded?",
            "What year did {e} start?",
            "{e} was founded in which year?",
            "What is the founding year of {e}?",
            "How far back does {e} go? Give the founding year.",
        ),
        "{e} founded year",
    ),
    "company_founder": (
        "company",
        "founder",
        (
            "Who founded {e}?",
            "Who is the founder of {e}?",
            "Name the person who founded {e}.",
            "Who started the company {e}?",
            "{e} was founded by whom?",
        ),
        "{e} founder",
    ),
    "company_hq": (
        "company",
        "hq",
        (
            "Where is {e} headquartered?",
            "In which city are the headquarters of {e}?",
            "Which city is {e} based in?",
            "Where are the headquarters of {e}?",
            "Name the city where {e} has its headquarters.",
        ),
        "{e} headquarters",
    ),
    "device_inventor": (
        "device",
        "inventor",
        (
            "Who invented the {e}?",
            "Who is the inventor of the {e}?",
            "Name the inventor of the {e}.",
            "The {e} was invented by whom?",
            "Which person invented the {e}?",
        ),
        "{e} inventor",
    ),
    "device_year": (
        "device",
        "year",
        (
            "In what year was the {e} invented?",
            "When was the {e} invented?",
            "The {e} was invented in which year?",
            "What year did the {e} first appear?",
            "Give the year the {e} was invented.",
        ),
        "{e} invented year",
    ),
    "device_maker": (
        "device",
        "maker",
        (
            "Which company makes the {e}?",
            "Who makes the {e} today?",
            "What company manufactures the {e}?",
            "The {e} is made by which company?",
            "Name the maker of the {e}.",
        ),
        "{e} made by company",
    ),
    "mountain_height": (
        "mountain",
        "height",
        (
            "How tall is {e}?",
            "What is the height of {e}?",
            "How high is {e} in meters?",
            "How many meters tall is {e}?",
            "Give the height of {e}.",
        ),
        "{e} height meters",
    ),
    "mountain_country": (
        "mountain",
        "country",
        (
            "In which country is {e}?",
            "Which country is {e} located in?",
            "Where is {e}? Name the country.",
            "{e} lies in which country?",
            "Name the country that {e} is in.",
        ),
        "{e} country",
    ),
    "river_length": (
        "river",
        "length",
        (
            "How long is the {e}?",
            "What is the length of the {e}?",
            "How many kilometers long is the {e}?",
            "Give the length of the {e}.",
            "The {e} is how long?",
        ),
        "{e} length kilometers",
    ),
    "river_sea": (
        "river",
        "sea",
        (
            "Into which sea does the {e} flow?",
            "Where does the {e} empty into?",
            "Which sea does the {e} empty into?",
            "The {e} ends in which sea?",
            "Name the sea at the mouth of the {e}.",
        ),
        "{e} empties into sea",
    ),
}


def _open_answer(key: str, value: Any) -> str:
    if key == "height":
        return f"{value} meters"
    if key == "length":
        return f"{value} kilometers"
    return str(value)


def _open_question(template: str) -> Callable[[World, random.Random, str], _Q]:
    kind, key, phrasings, query = _OPEN[template]

    def build(world: World, rng: random.Random, split: str) -> _Q:
        e = _entity(world, rng, split, kind)
        return _Q(
            question=_phrase(rng, split, phrasings, False).format(e=e.name),
            answer=_open_answer(key, e.facts[key]),
            queries=(query.format(e=e.name),),
            passages=(e.passage,),
        )

    return build


def _by_name(world: World, kind: str, name: str) -> Entity:
    return next(e for e in world.entities[kind] if e.name == name)


_BRIDGES: dict[str, tuple[str, str, str, str, tuple[str, ...], tuple[str, str]]] = {
    # template: (entity kind, fact naming the bridge, bridge kind, the bridge's fact asked for, phrasings with
    # {e}, gold queries with {e} the entity and {b} the bridge)
    "maker_founded": (
        "device",
        "maker",
        "company",
        "founded",
        (
            "In which year was the company that makes the {e} founded?",
            "When was the maker of the {e} founded?",
            "The company that manufactures the {e} was founded in what year?",
        ),
        ("{e} made by company", "{b} founded year"),
    ),
    "maker_founder": (
        "device",
        "maker",
        "company",
        "founder",
        (
            "Who founded the company that makes the {e}?",
            "Name the founder of the company that manufactures the {e}.",
            "Who is the founder of the maker of the {e}?",
        ),
        ("{e} made by company", "{b} founder"),
    ),
    "mountain_capital": (
        "mountain",
        "country",
        "country",
        "capital",
        (
            "What is the capital of the country where {e} is located?",
            "{e} stands in a country. What is that country's capital?",
            "Name the capital city of the country that {e} is in.",
        ),
        ("{e} country", "capital of {b}"),
    ),
}
"""The multi-hop templates: a fact of the entity names a second entity (the bridge), whose fact is the answer."""
MULTI_HOP_TEMPLATES = tuple(_BRIDGES)
"""The multi-hop templates (test split only)."""


def _bridge_question(template: str) -> Callable[[World, random.Random, str], _Q]:
    kind, link, bridge_kind, key, phrasings, queries = _BRIDGES[template]

    def build(world: World, rng: random.Random, split: str) -> _Q:
        e = _entity(world, rng, split, kind)
        b = _by_name(world, bridge_kind, e.facts[link])
        return _Q(
            _phrase(rng, split, phrasings, False).format(e=e.name),
            str(b.facts[key]),
            tuple(q.format(e=e.name, b=b.name) for q in queries),
            (e.passage, b.passage),
            {"bridge": b.name},
        )

    return build


# ----- policy questions


def _categories(split: str) -> list[str]:
    return partition(CATEGORIES, split)


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


def return_window(world: World, rng: random.Random, split: str, category: str | None = None) -> _Q:
    c = category or rng.choice(_categories(split))
    days = world.policy["returns"][c]
    return _Q(
        _phrase(rng, split, _RETURN_PHRASES, True).format(c=noun(c)),
        f"{days} days",
        (f"return window {noun(c)}",),
        (world.policy["passage"][("returns", c)],),
        {"category": c, "value": days, "unit": "days"},
    )


def _restocking_fee(world: World, rng: random.Random, split: str) -> _Q:
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
        _phrase(rng, split, phrasings, True).format(c=noun(c)),
        f"{fee}%",
        (f"restocking fee {noun(c)}",),
        (world.policy["passage"][("returns", c)],),
        {"category": c, "value": fee, "unit": "percent"},
    )


def warranty(world: World, rng: random.Random, split: str, category: str | None = None) -> _Q:
    c = category or rng.choice(_categories(split))
    months = world.policy["warranty"][c]
    return _Q(
        _phrase(rng, split, _WARRANTY_PHRASES, True).format(c=noun(c)),
        duration(months),
        (f"warranty {noun(c)}",),
        (world.policy["passage"][("warranty", c)],),
        {"category": c, "value": months, "unit": "months"},
    )


def _brand_warranty(world: World, rng: random.Random, split: str) -> _Q:
    brand = rng.choice(partition(list(world.policy["brands"]), split))
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
        duration(months),
        (f"{brand} manufacturer warranty",),
        (world.policy["passage"][("brand", brand)],),
        {"brand": brand, "value": months, "unit": "months"},
    )


def shipping_fee(world: World, rng: random.Random, split: str, option: str | None = None) -> _Q:
    option = option or rng.choice([o for o, *_ in SHIPPING])
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
        money(fee),
        (f"{name} shipping cost",),
        (world.policy["passage"][("shipping", option)],),
        {"option": option, "value": fee / 100, "unit": "dollars"},
    )


def shipping_time(world: World, rng: random.Random, split: str, option: str | None = None) -> _Q:
    option = option or rng.choice([o for o, *_ in SHIPPING])
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


_POLICY_FACTS: dict[str, tuple[tuple[str, ...], str, str, str, tuple[str, None], str | None]] = {
    # template: (phrasings, policy key, answer with {v}, gold query, passage key, the value's unit in meta, if any)
    "free_shipping": (
        (
            "What is the minimum order for free shipping?",
            "How much do I need to spend to get free standard shipping?",
            "From what order amount is standard shipping free?",
            "What order total qualifies for free shipping?",
            "Above which amount do orders ship for free?",
        ),
        "free_shipping",
        "${v}",
        "free shipping minimum order",
        ("free_shipping", None),
        "dollars",
    ),
    "gift_card": (
        (
            "How long are gift cards valid?",
            "For how many years can a gift card be used?",
            "When does a gift card expire after purchase?",
            "How many years is a shop gift card good for?",
            "What is the validity period of gift cards?",
        ),
        "gift_years",
        "{v} years",
        "gift cards valid years",
        ("gift", None),
        None,
    ),
    "price_match": (
        (
            "Within how many days of purchase can I ask for a price match?",
            "How long after buying can I request a price match?",
            "What is the price match period?",
            "How many days do I have to get a lower price matched?",
            "For how many days after purchase does the shop match prices?",
        ),
        "price_match",
        "{v} days",
        "price match days purchase",
        ("price_match", None),
        None,
    ),
}
"""The policy questions about one shop-wide fact."""


def _policy_fact(template: str) -> Callable[[World, random.Random, str], _Q]:
    phrasings, key, answer, query, passage, unit = _POLICY_FACTS[template]

    def build(world: World, rng: random.Random, split: str) -> _Q:
        value = world.policy[key]
        return _Q(
            _phrase(rng, split, phrasings, True),
            answer.format(v=value),
            (query,),
            (world.policy["passage"][passage],),
            {"value": value, "unit": unit} if unit else {},
        )

    return build


free_shipping = _policy_fact("free_shipping")
gift_card = _policy_fact("gift_card")


MEMBERSHIP: dict[str, tuple[tuple[str, ...], str, Callable[[dict], str]]] = {
    "membership_fee": (
        (
            "How much does {t} membership cost per year?",
            "What is the annual fee for {t} membership?",
            "What does a {t} membership cost each year?",
            "How much is the yearly {t} membership fee?",
            "What is the price of {t} membership per year?",
        ),
        "{t} membership cost per year",
        lambda f: f"${f['fee']}",
    ),
    "membership_discount": (
        (
            "What discount do {t} members get?",
            "How much off do {t} members get on eligible orders?",
            "What percent discount comes with {t} membership?",
            "What is the {t} member discount?",
            "How big is the discount for {t} members?",
        ),
        "{t} members discount",
        lambda f: f"{f['discount']}%",
    ),
    "membership_points": (
        (
            "How many points per dollar do {t} members earn?",
            "What is the points rate for {t} members?",
            "How many reward points does a {t} member earn per dollar?",
            "Points per dollar for {t} members?",
            "At {t} level, how many points do I get for each dollar?",
        ),
        "{t} members points per dollar",
        lambda f: f"{f['points']} point" + ("s" if f["points"] != 1 else ""),
    ),
    "membership_returns": (
        (
            "How many extra days for returns do {t} members get?",
            "How much longer can {t} members return items?",
            "What return extension comes with {t} membership?",
            "How many more days do {t} members have to return things?",
            "What is the extra return time for {t} members?",
        ),
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


def membership(template: str) -> Callable[..., _Q]:
    phrasings, query, answer = MEMBERSHIP[template]
    key, unit = _MEMBERSHIP_KEYS[template]

    def build(world: World, rng: random.Random, split: str, tier: str | None = None) -> _Q:
        tier = tier or rng.choice(TIERS)
        facts = world.policy["tiers"][tier]
        return _Q(
            _phrase(rng, split, phrasings, True).format(t=tier),
            answer(facts),
            (query.format(t=tier),),
            (world.policy["passage"][("membership", tier)],),
            {"tier": tier, "value": facts[key], "unit": unit},
        )

    return build


def payment_accepted(world: World, rng: random.Random, split: str) -> _Q:
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


def installments(world: World, rng: random.Random, split: str) -> _Q:
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


_TEMPLATES: dict[str, Callable[[World, random.Random, str], _Q]] = {
    **{name: _open_question(name) for name in _OPEN},
    "return_window": return_window,
    "restocking_fee": _restocking_fee,
    "warranty": warranty,
    "brand_warranty": _brand_warranty,
    "shipping_fee": shipping_fee,
    "shipping_time": shipping_time,
    "free_shipping": free_shipping,
    **{name: membership(name) for name in MEMBERSHIP},
    "payment_accepted": payment_accepted,
    "installments": installments,
    "gift_card": gift_card,
    "price_match": _policy_fact("price_match"),
    **{name: _bridge_question(name) for name in _BRIDGES},
}
# Sampling weights: open-domain single hop, frequent policy facts, rare single-fact policies, multi-hop.
_WEIGHTS = {name: 4.0 for name in _OPEN}
_WEIGHTS.update(
    {
        "return_window": 5.0,
        "restocking_fee": 3.0,
        "warranty": 4.0,
        "brand_warranty": 3.0,
        "shipping_fee": 2.0,
        "shipping_time": 2.0,
        "free_shipping": 1.0,
        "membership_fee": 1.0,
        "membership_discount": 1.0,
        "membership_points": 1.0,
        "membership_returns": 1.0,
        "payment_accepted": 2.0,
        "installments": 1.0,
        "gift_card": 0.5,
        "price_match": 0.5,
    }
)
_WEIGHTS.update({name: 5.0 for name in MULTI_HOP_TEMPLATES})


def search_call(query: str) -> dict[str, Any]:
    return {"name": "search_kb", "arguments": {"query": query}}


class QATaskSource(TaskSourceBase):
    """Generated knowledge-base questions (see :mod:`joy_env.domains.qa`); deterministic in (seed, split,
    index)."""

    def __init__(self, seed: int = 0, sizes: dict[str, int] | None = None) -> None:
        self.seed = seed
        self.sizes = dict(SIZES if sizes is None else sizes)
        self._names = {s: [n for n in _TEMPLATES if s == "test" or n not in MULTI_HOP_TEMPLATES] for s in SPLITS}

    def build_task(self, split: str, index: int) -> Task:
        world = world_of(self.seed)
        rng = random.Random(f"{self.seed}/qa/{split}/{index}")
        names = self._names[split]
        template = rng.choices(names, weights=[_WEIGHTS[n] for n in names])[0]
        q = _TEMPLATES[template](world, rng, split)
        sub = SubTask(
            agent="qa",
            query=q.question,
            turns=tuple((search_call(query),) for query in q.queries),
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
