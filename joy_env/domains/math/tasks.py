"""Word-problem templates and the generated math task source."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

from joy_env.core import SubTask, Task, TaskSourceBase
from joy_env.domains.math.pools import (
    CLUBS,
    DISTRACTORS,
    EVENTS,
    FACTORY_ITEMS,
    FOODS,
    FUND_CLUBS,
    GADGETS,
    INGREDIENTS,
    JOBS,
    PLANTS,
    SCHOOLS,
    SHARE_ITEMS,
    SHOP_ITEMS,
    STORE_ITEMS,
    STORES,
    TANKS,
    Steps,
    capitalized,
    counted,
    money,
    others,
    part,
    person,
)

SIZES = {"train": 20000, "validation": 2000, "test": 2000}


# Each template: (rng, split, steps) -> problem text; the answer is the result of the last call.
Template = Callable[[random.Random, str, Steps], str]


def t_shopping_change(rng: random.Random, split: str, s: Steps) -> str:
    name, pron, _ = person(rng, split)
    (_, item1), (_, item2) = rng.sample(part(SHOP_ITEMS, split), 2)
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    p1, p2 = rng.randrange(75, 1200, 5), rng.randrange(75, 1200, 5)
    total = a * p1 + b * p2
    bill = next((v for v in (2000, 5000, 10000, 20000) if v > total), None)
    # a total of $200 or more (up to $215.10) is paid with enough $100 bills
    paid, cash = (bill, f"a ${bill // 100} bill") if bill else ((total // 10000 + 1) * 10000, "")
    cash = cash or f"{paid // 10000} $100 bills"
    c1, c2 = s.turn(f"{a} * {money(p1)}", f"{b} * {money(p2)}")
    t = s.one(f"{c1} + {c2}")
    s.one(f"{paid // 100} - {t}")
    return (
        f"{name} buys {a} {item1} at ${money(p1)} each and {b} {item2} at ${money(p2)} each. "
        f"{capitalized(pron)} pays with {cash}. How much change, in dollars, does {pron} get back?"
    )


def _t_savings_weeks(rng: random.Random, split: str, s: Steps) -> str:
    name, pron, poss = person(rng, split)
    gadget = rng.choice(part(GADGETS, split))
    job = rng.choice(part(JOBS, split))
    pct = rng.choice((10, 20, 25, 50))
    save = rng.randint(3, 40)
    wage = save * 100 // pct
    weeks = rng.randint(3, 20)
    have = rng.randint(5, 150)
    cost = have + weeks * save
    w, rest = s.turn(f"{wage} * {pct} / 100", f"{cost} - {have}")
    s.one(f"{rest} / {w}")
    return (
        f"{name} wants to buy a {gadget} that costs ${cost}. {capitalized(pron)} already has ${have} saved. "
        f"{capitalized(pron)} earns ${wage} a week {job} and saves {pct}% of {poss} earnings. "
        f"How many weeks will it take {name} to save enough for the {gadget}?"
    )


def _t_factory_defects(rng: random.Random, split: str, s: Steps) -> str:
    item = rng.choice(part(FACTORY_ITEMS, split))
    q = rng.choice((2, 4, 5, 10, 20, 25))
    unit = 100 // math.gcd(q, 100)
    rate = unit * rng.randint(max(1, 20 // unit), max(2, 300 // unit))
    hours, days = rng.randint(4, 12), rng.randint(2, 7)
    per_day = s.one(f"{rate} * {hours}")
    total = s.one(f"{per_day} * {days}")
    bad = s.one(f"{total} * {q} / 100")
    s.one(f"{total} - {bad}")
    return (
        f"A machine makes {rate} {item} per hour. It runs {hours} hours a day for {days} days. "
        f"If {q}% of the {item} are defective, how many good {item} does it make in total?"
    )


def _t_ages(rng: random.Random, split: str, s: Steps) -> str:
    name, _, _ = person(rng, split)
    n2, n3 = others(rng, split, 2, name)
    a, k = rng.randint(4, 20), rng.randint(2, 4)
    m = rng.randint(1, max(1, a * k // 2))
    b = s.one(f"{a} * {k}")
    c = s.one(f"{b} - {m}")
    text = f"{name} is {a} years old. {n2} is {k} times as old as {name}, and {n3} is {m} years younger than {n2}."
    if rng.random() < 0.5:
        total = s.one(f"{a} + {b} + {c}")
        y = rng.randint(2, 15)
        s.one(f"{total} + 3 * {y}")
        return text + f" What will the sum of their three ages be in {y} years?"
    s.one(f"{a} + {b} + {c}")
    return text + " What is the sum of their ages?"


def _t_recipe_bags(rng: random.Random, split: str, s: Steps) -> str:
    name, pron, _ = person(rng, split)
    ingredient, food = rng.choice(part(INGREDIENTS, split))
    event = rng.choice(part(EVENTS, split))
    serves, cups = rng.randint(6, 24), rng.randint(2, 6)
    mult = rng.randint(2, 8)
    bag = rng.choice((4, 5, 6, 8, 10))
    target = serves * mult
    times = s.one(f"{target} / {serves}")
    need = s.one(f"{times} * {cups}")
    s.one(f"ceil({need} / {bag})")
    return (
        f"A recipe uses {cups} cups of {ingredient} to make {serves} {food}. {name} wants to make "
        f"{target} {food} for a {event}. The {ingredient} is sold in bags of {bag} cups. "
        f"How many bags must {pron} buy?"
    )


def _t_road_trip_fuel(rng: random.Random, split: str, s: Steps) -> str:
    name, pron, poss = person(rng, split)
    for _ in range(100):
        v1, v2 = rng.randrange(40, 75, 5), rng.randrange(40, 75, 5)
        h1, h2 = rng.randint(1, 5), rng.randint(1, 5)
        mpg = rng.choice((20, 25, 30, 35, 40))
        if (v1 * h1 + v2 * h2) % mpg == 0:
            break
    else:  # pragma: no cover - practically unreachable
        v1, h1, v2, h2, mpg = 50, 2, 50, 2, 25
    gas = rng.randrange(250, 520, 1)
    d1, d2 = s.turn(f"{v1} * {h1}", f"{v2} * {h2}")
    dist = s.one(f"{d1} + {d2}")
    gallons = s.one(f"{dist} / {mpg}")
    s.one(f"{gallons} * {money(gas)}")
    return (
        f"{name} drives for {counted(h1, 'hour')} at {v1} miles per hour, then for {counted(h2, 'hour')} at "
        f"{v2} miles per hour. "
        f"{capitalized(poss)} car goes {mpg} miles on a gallon of gas, and gas costs ${money(gas)} per gallon. "
        f"How much, in dollars, does {pron} spend on gas for the trip?"
    )


def _t_school_band(rng: random.Random, split: str, s: Steps) -> str:
    school = rng.choice(part(SCHOOLS, split))
    club = rng.choice(part(CLUBS, split))
    for _ in range(100):
        p = rng.choice((10, 20, 25, 40, 50))
        k = rng.randint(2, 6)
        band = k * rng.randint(3, 30)
        if band * 100 % p == 0:
            break
    else:  # pragma: no cover - practically unreachable
        p, k, band = 20, 4, 40
    n = band * 100 // p
    members = s.one(f"{n} * {p} / 100")
    lead = s.one(f"{members} / {k}")
    s.one(f"{members} - {lead}")
    return (
        f"{school} has {n} students. {p}% of the students are in the {club}, and 1/{k} of the {club} "
        f"members are section leaders. How many {club} members are not section leaders?"
    )


def _t_orchard_sales(rng: random.Random, split: str, s: Steps) -> str:
    name, pron, _ = person(rng, split)
    plant, fruit = rng.choice(part(PLANTS, split))
    rows, per_row = rng.randint(3, 12), rng.randint(4, 15)
    dead = rng.randint(1, rows * per_row // 4)
    each = rng.randint(5, 30)
    basket = rng.choice((6, 8, 10, 12))
    price = rng.randrange(300, 1500, 25)
    total = s.one(f"{rows} * {per_row}")
    alive = s.one(f"{total} - {dead}")
    fruits = s.one(f"{alive} * {each}")
    baskets = s.one(f"floor({fruits} / {basket})")
    s.one(f"{baskets} * {money(price)}")
    return (
        f"{name} plants {rows} rows of {plant} with {per_row} in each row. {dead} of them do not survive. "
        f"Each surviving plant gives {each} {fruit}. {capitalized(pron)} packs them in baskets of {basket} and "
        f"sells only full baskets, at ${money(price)} per basket. How many dollars does {pron} make?"
    )


def _t_overtime_pay(rng: random.Random, split: str, s: Steps) -> str:
    name, pron, _ = person(rng, split)
    wage = rng.randrange(1200, 4000, 2)
    hours = rng.randint(42, 60)
    base, rate = s.turn(f"40 * {money(wage)}", f"{money(wage)} * 1.5")
    over = s.one(f"({hours} - 40) * {rate}")
    text = (
        f"{name} earns ${money(wage)} per hour for the first 40 hours of a week and 1.5 times that rate for "
        f"every hour over 40."
    )
    if rng.random() < 0.4:
        weeks = rng.randint(2, 4)
        week = s.one(f"{base} + {over}")
        s.one(f"{week} * {weeks}")
        return text + (
            f" {capitalized(pron)} works {hours} hours every week for {weeks} weeks. How much does {pron} earn?"
        )
    s.one(f"{base} + {over}")
    return text + f" Last week {pron} worked {hours} hours. How much did {pron} earn that week?"


def _t_discount_coupon(rng: random.Random, split: str, s: Steps) -> str:
    name, pron, _ = person(rng, split)
    store = rng.choice(part(STORES, split))
    _, item = rng.choice(part(STORE_ITEMS, split))
    price = rng.randint(8, 120)
    d = rng.choice((5, 10, 15, 20, 25, 30, 35, 40))
    q = rng.randint(2, 8)
    coupon = rng.randint(2, 15)
    sale = s.one(f"{price} * (100 - {d}) / 100")
    sub = s.one(f"{sale} * {q}")
    s.one(f"{sub} - {coupon}")
    return (
        f"A {store} sells {item} for ${price} each. This week everything is {d}% off, and {name} also has a "
        f"${coupon} coupon for the whole order. If {pron} buys {q} {item}, how much does {pron} pay in "
        f"dollars?"
    )


def _t_sharing(rng: random.Random, split: str, s: Steps) -> str:
    name, pron, _ = person(rng, split)
    friend1, friend2 = others(rng, split, 2, name)
    item = rng.choice(part(SHARE_ITEMS, split))
    for _ in range(200):
        k, x = rng.randint(2, 5), rng.randint(5, 40)
        m, e = rng.randint(2, 8), rng.randint(2, 12)
        g = x * (k - 1) - e * m
        if 2 <= g <= 40:
            break
    else:  # pragma: no cover - practically unreachable
        k, x, m, e, g = 4, 20, 5, 10, 10
    n = k * x
    gave = s.one(f"{n} / {k}")
    rest = s.one(f"{n} - {gave} - {g}")
    s.one(f"{rest} / {m}")
    return (
        f"{name} has {n} {item}. {capitalized(pron)} gives 1/{k} of them to {friend1} and {g} to {friend2}, then "
        f"shares the rest equally among {m} classmates. How many {item} does each classmate get?"
    )


def _t_bakery_inventory(rng: random.Random, split: str, s: Steps) -> str:
    food = rng.choice(part(FOODS, split))
    batches, size = rng.randint(3, 9), rng.randint(12, 36)
    made = batches * size
    sold = rng.randint(made // 2, made - 3)
    given = rng.randint(1, made - sold - 1)
    days = rng.randint(3, 10)
    per_day = s.one(f"{batches} * {size}")
    left = s.one(f"{per_day} - {sold} - {given}")
    s.one(f"{left} * {days}")
    return (
        f"A bakery bakes {batches} batches of {size} {food} every day. Each day it sells {sold} {food} and "
        f"gives {given} to a shelter at closing time. The rest are frozen. How many {food} are frozen over "
        f"{days} days?"
    )


def _t_tank_fill(rng: random.Random, split: str, s: Steps) -> str:
    tank = rng.choice(part(TANKS, split))
    inflow = rng.randint(6, 40)
    leak = rng.randint(1, inflow - 2)
    minutes = rng.randint(5, 90)
    have = rng.randint(10, 500)
    cap = have + minutes * (inflow - leak)
    rem, net = s.turn(f"{cap} - {have}", f"{inflow} - {leak}")
    s.one(f"{rem} / {net}")
    return (
        f"A {tank} holds {cap} liters and already contains {have} liters. Water flows in at {inflow} liters "
        f"per minute while a leak drains {leak} liters per minute. How many minutes until the {tank} is full?"
    )


def _t_fundraiser(rng: random.Random, split: str, s: Steps) -> str:
    club = rng.choice(part(FUND_CLUBS, split))
    t, r = rng.randint(40, 300), rng.randint(20, 200)
    p, q = rng.randrange(300, 2500, 25), rng.randrange(100, 500, 25)
    k = rng.randint(2, 6)
    revenue = t * p + r * q
    share = rng.randint(revenue // (3 * k), revenue // (2 * k))
    cost = revenue - share * k
    a, b = s.turn(f"{t} * {money(p)}", f"{r} * {money(q)}")
    profit = s.one(f"{a} + {b} - {money(cost)}")
    s.one(f"{profit} / {k}")
    return (
        f"The {club} sells {t} show tickets at ${money(p)} each and {r} raffle tickets at "
        f"${money(q)} each. "
        f"The event cost ${money(cost)} to run. The profit is split equally among {k} charities. "
        f"How many dollars does each charity get?"
    )


TEMPLATES: dict[str, Template] = {
    "shopping_change": t_shopping_change,
    "savings_weeks": _t_savings_weeks,
    "factory_defects": _t_factory_defects,
    "ages": _t_ages,
    "recipe_bags": _t_recipe_bags,
    "road_trip_fuel": _t_road_trip_fuel,
    "school_band": _t_school_band,
    "orchard_sales": _t_orchard_sales,
    "overtime_pay": _t_overtime_pay,
    "discount_coupon": _t_discount_coupon,
    "sharing": _t_sharing,
    "bakery_inventory": _t_bakery_inventory,
    "tank_fill": _t_tank_fill,
    "fundraiser": _t_fundraiser,
}
TEST_ONLY_TEMPLATES = ("tank_fill", "fundraiser")


def _with_distractor(rng: random.Random, split: str, text: str) -> str:
    """Insert an irrelevant sentence with a number just before the question."""
    sentence = rng.choice(DISTRACTORS).format(x=rng.randint(2, 95))
    facts, sep, question = text.rpartition(". ")
    return f"{facts}. {sentence} {question}" if sep else f"{sentence} {text}"


class MathTaskSource(TaskSourceBase):
    """Generated word problems (see :mod:`joy_env.domains.math`); deterministic in (seed, split, index)."""

    def __init__(self, seed: int = 0, sizes: dict[str, int] | None = None) -> None:
        self.seed = seed
        self.sizes = dict(SIZES if sizes is None else sizes)

    def build_task(self, split: str, index: int) -> Task:
        rng = random.Random(f"{self.seed}/math/{split}/{index}")
        names = [n for n in TEMPLATES if split == "test" or n not in TEST_ONLY_TEMPLATES]
        template = rng.choice(names)
        steps = Steps()
        text = TEMPLATES[template](rng, split, steps)
        if rng.random() < 0.4:
            text = _with_distractor(rng, split, text)
        answer = steps.results[-1]
        sub = SubTask(agent="math", query=text, turns=tuple(steps.turns), answer=f"The answer is {answer}.")
        return Task(
            task_id=f"math/{split}/{index}",
            domain="math",
            query=text,
            answer=answer,
            answer_type="math",
            route=(sub,),
            template=template,
            meta={"steps": steps.calls, "test_only_template": template in TEST_ONLY_TEMPLATES},
        )


def task_source(seed: int, db: Any = None) -> MathTaskSource:
    """The generated math tasks for ``seed`` (``db`` is unused: the domain has no database)."""
    return MathTaskSource(seed)
