"""Math domain: GSM8K-style word problems solved with an exact calculator.

The ``math`` sub-agent owns one tool and no database. It receives a word problem, works through it one
arithmetic step per ``calculator`` call (independent steps may share a turn, i.e. run in parallel) and answers
with the final number. Answers are scored numerically (``answer_type="math"``), so tasks list no
``required_calls``.

Tools
=====

| Tool         | Arguments                  | What it does                                                  |
|--------------|----------------------------|---------------------------------------------------------------|
| `calculator` | `expression` (str, <= 500) | Evaluates numbers, `+ - * / // % **`, parentheses,            |
|              |                            | `round(x, n)`, `abs`, `min`, `max`, `sqrt`, `floor`, `ceil`   |
|              |                            | exactly (:mod:`joy_env.safe_math`); returns                   |
|              |                            | `{"result": "12.5"}`. A bad expression is a tool error.       |

Generated tasks
===============

:func:`task_source` builds word problems from 14 templates; each needs 2-6 calculator calls and has an exact
integer or exact cents answer. Names, items, places and numbers are drawn from a seeded RNG, and about 40%
of the problems carry a distractor sentence with an irrelevant number.

| Template            | Steps | Answer | Idea                                                           |
|---------------------|-------|--------|----------------------------------------------------------------|
| `shopping_change`   | 4     | money  | two purchases (parallel), total, change from a bill            |
| `savings_weeks`     | 3     | int    | weekly saving share and remaining cost (parallel), weeks       |
| `factory_defects`   | 4     | int    | hourly rate x hours x days, defective share, good items        |
| `ages`              | 3-4   | int    | multiples and differences of ages, sum (optionally in N years) |
| `recipe_bags`       | 3     | int    | scale a recipe, round the bag count up with `ceil`             |
| `road_trip_fuel`    | 5     | money  | two legs (parallel), distance, gallons, cost                   |
| `school_band`       | 3     | int    | percentage of students, fraction of them, difference           |
| `orchard_sales`     | 5     | money  | rows x plants, losses, fruit, full baskets (`floor`), revenue  |
| `overtime_pay`      | 4-5   | money  | base pay and 1.5x rate (parallel), overtime pay, total         |
| `discount_coupon`   | 3     | money  | percent discount, quantity, coupon                             |
| `sharing`           | 3     | int    | give away a fraction and a count, share the rest equally       |
| `bakery_inventory`  | 3     | int    | batches x size, daily surplus, over several days               |
| `tank_fill` *       | 3     | int    | remaining volume and net flow (parallel), minutes              |
| `fundraiser` *      | 4     | money  | two ticket revenues (parallel), profit, share per charity      |

\\* test split only (``meta["test_only_template"] = True``; about 14% of test tasks).

Every task: ``domain="math"``, ``answer_type="math"``, ``answer`` = the final number as the calculator renders
it (``"12.5"``, ``"42"``), one :class:`~joy_env.core.SubTask` for ``math`` whose turns are the calculator
calls and whose answer is ``"The answer is N."``; ``meta={"steps": calls, "test_only_template": bool}``.

Splits
======

Every pool of names, items, places and events is partitioned by position (index mod 10: 0-7 train, 8
validation, 9 test), so the three splits share no person, item or place; the two templates marked * only
appear in test. Sizes: 20000 train, 2000 validation, 2000 test.

GSM8K
=====

:func:`load_gsm8k` reads the official jsonl format (``{"question", "answer"}`` with the answer ending in
``#### N``); the calculator annotations ``<<48/2=24>>`` become gold calculator calls when they evaluate to the
annotated value. :func:`gsm8k_task_source` splits the lines 80/10/10 by a hash of the question.

Parts for collaborative tasks
=============================

:func:`calc_part` (any description + expression) and :func:`discount_part` (a discounted order total, with
optional shipping, rounded to the cent) return a math :class:`~joy_env.core.SubTask` plus its result.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
import re
import unicodedata
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from joy_env.core import SPLITS, Domain, SubTask, Task, Tool, ToolContext, ToolError, check_index, check_split
from joy_env.safe_math import SafeMathError, calculate, evaluate_exact, format_number, parse_number

__all__ = [
    "SIZES",
    "SYSTEM_PROMPT",
    "TEMPLATES",
    "TEST_ONLY_TEMPLATES",
    "TOOLS",
    "GSM8KTaskSource",
    "MathTaskSource",
    "calc_part",
    "calculator",
    "discount_part",
    "domain",
    "gsm8k_task_source",
    "load_gsm8k",
    "task_source",
]

SIZES = {"train": 20000, "validation": 2000, "test": 2000}


# ------------------------------------------------------------------------------------------------ tool


def calculator(ctx: ToolContext, expression: str) -> dict[str, str]:
    """Evaluate an arithmetic expression exactly; ``{"result": "<number>"}``."""
    try:
        return {"result": calculate(expression)}
    except SafeMathError as exc:
        raise ToolError(f"calculator: {exc}") from None


TOOLS: tuple[Tool, ...] = (
    Tool(
        name="calculator",
        description=(
            "Evaluate an arithmetic expression exactly. Supports numbers, + - * / // % **, parentheses and "
            "round(x, n), abs, min, max, sqrt, floor, ceil. Example: (3 * 4.25 + 2) / 5"
        ),
        parameters={
            "type": "object",
            "properties": {
                "expression": {
                    "type": "string",
                    "maxLength": 500,
                    "description": "The expression, e.g. 12 * 3.5 - 4",
                }
            },
            "required": ["expression"],
        },
        fn=calculator,
    ),
)

SYSTEM_PROMPT = (
    "You are the math agent. You solve arithmetic word problems with the calculator tool. Work step by "
    "step: write one arithmetic step per calculator call, using the numbers from the problem and from "
    "earlier results; steps that do not depend on each other may be called in the same turn. Ignore "
    "details that do not matter. When done, answer with the final number, e.g. <answer>The answer is 42."
    "</answer>"
)


def domain() -> Domain:
    """The math sub-agent's tools and prompt (no database)."""
    return Domain(agent="math", tools=TOOLS, system_prompt=SYSTEM_PROMPT)


# ------------------------------------------------------------------------------------------ pools

_FEMALE = (
    "Maria", "Aisha", "Sofia", "Emma", "Priya", "Chloe", "Hana", "Lucia", "Nadia", "Grace",
    "Olivia", "Fatima", "Mei", "Isabel", "Zara", "Ruth", "Elena", "Amara", "Leah", "Ingrid",
    "Carmen", "Yuki", "Nora", "Tessa", "Abena", "Julia", "Sana", "Freya", "Lila", "Paula",
    "Rosa", "Keiko", "Alma", "Dana", "Ivy", "Mira", "Gloria", "Anika", "Beth", "Clara",
)
_MALE = (
    "James", "Omar", "Diego", "Liam", "Ravi", "Kenji", "Tomas", "Noah", "Samuel", "Ahmed",
    "Felix", "Mateo", "Jun", "Kofi", "Lucas", "Arjun", "Pedro", "Ethan", "Hugo", "Tariq",
    "Marco", "Oscar", "Ivan", "Malik", "Leo", "Bruno", "Dev", "Erik", "Jamal", "Ali",
    "Chen", "Rafael", "Owen", "Yusuf", "Milo", "Andre", "Hiro", "Victor", "Kwame", "Simon",
)
# (singular, plural)
_SHOP_ITEMS = (
    ("notebook", "notebooks"), ("pen", "pens"), ("apple", "apples"), ("candle", "candles"),
    ("mug", "mugs"), ("sticker sheet", "sticker sheets"), ("bag of rice", "bags of rice"),
    ("box of tea", "boxes of tea"), ("towel", "towels"), ("light bulb", "light bulbs"),
    ("pencil case", "pencil cases"), ("jar of honey", "jars of honey"), ("pair of socks", "pairs of socks"),
    ("loaf of bread", "loaves of bread"), ("sketchbook", "sketchbooks"), ("flower pot", "flower pots"),
    ("battery pack", "battery packs"), ("bar of soap", "bars of soap"), ("puzzle", "puzzles"),
    ("tin of cookies", "tins of cookies"),
)
_GADGETS = (
    "bicycle", "guitar", "tablet", "skateboard", "telescope", "camera", "keyboard", "tent",
    "drone", "microscope", "scooter", "sewing machine", "record player", "chess set", "violin",
    "smartwatch", "kayak", "drum kit", "fishing rod", "projector",
)
_JOBS = (
    "walking dogs", "mowing lawns", "tutoring", "babysitting", "washing cars", "delivering newspapers",
    "selling crafts", "helping at a bakery", "raking leaves", "shoveling snow",
)
_FACTORY_ITEMS = (
    "bolts", "bottles", "toy cars", "phone cases", "bricks", "candles", "buttons", "tiles", "spoons",
    "cups", "gears", "lids", "notebooks", "springs", "bowls", "hinges", "clips", "pencils", "plates",
    "valves",
)
_INGREDIENTS = (
    ("flour", "loaves of bread"), ("sugar", "muffins"), ("oats", "cookies"), ("rice", "rice balls"),
    ("cornmeal", "corn cakes"), ("cocoa", "brownies"), ("milk", "pancakes"), ("cream", "cream puffs"),
    ("almond flour", "macarons"), ("coconut", "coconut bars"), ("yogurt", "smoothies"),
    ("lentils", "bowls of soup"), ("pasta", "pasta salads"), ("butter", "croissants"),
    ("berries", "berry tarts"), ("cheese", "cheese puffs"), ("honey", "honey cakes"),
    ("raisins", "raisin buns"), ("pumpkin", "pumpkin pies"), ("banana", "banana breads"),
)
_EVENTS = (
    "school fair", "birthday party", "family picnic", "bake sale", "wedding", "team dinner",
    "holiday party", "book club", "charity lunch", "neighborhood potluck",
)
_SCHOOLS = (
    "Maple Grove School", "Riverside Academy", "Hillcrest High", "Oakwood Middle School",
    "Lakeview School", "Sunnyside Academy", "Pine Ridge High", "Brookfield School",
    "Cedar Park Middle School", "Harbor View Academy", "Westfield High", "Elmwood School",
    "Meadowbrook Academy", "Stonegate High", "Willow Creek School", "Northgate Academy",
    "Fairview Middle School", "Greenfield High", "Bayside School", "Clearwater Academy",
)
_CLUBS = (
    "band", "chess club", "drama club", "choir", "robotics team", "art club", "debate team",
    "orchestra", "science club", "dance team",
)
_PLANTS = (
    ("apple trees", "apples"), ("tomato plants", "tomatoes"), ("pepper plants", "peppers"),
    ("lemon trees", "lemons"), ("pear trees", "pears"), ("peach trees", "peaches"),
    ("plum trees", "plums"), ("orange trees", "oranges"), ("cucumber vines", "cucumbers"),
    ("strawberry plants", "strawberries"), ("zucchini plants", "zucchinis"), ("fig trees", "figs"),
    ("apricot trees", "apricots"), ("eggplant plants", "eggplants"), ("mango trees", "mangoes"),
    ("squash vines", "squashes"), ("cherry trees", "cherries"), ("bean plants", "bean pods"),
    ("melon vines", "melons"), ("lime trees", "limes"),
)
_STORES = (
    "sports shop", "bookstore", "toy store", "hardware store", "garden center", "music shop",
    "pet store", "craft store", "shoe store", "kitchen store", "camping store", "stationery shop",
    "bike shop", "electronics store", "gift shop", "outdoor store", "art supply store", "tea shop",
    "furniture store", "bakery",
)
_STORE_ITEMS = (
    ("water bottle", "water bottles"), ("novel", "novels"), ("board game", "board games"),
    ("hammer", "hammers"), ("seed packet", "seed packets"), ("guitar pick set", "guitar pick sets"),
    ("dog toy", "dog toys"), ("yarn ball", "yarn balls"), ("pair of sneakers", "pairs of sneakers"),
    ("frying pan", "frying pans"), ("sleeping bag", "sleeping bags"), ("planner", "planners"),
    ("bike helmet", "bike helmets"), ("phone charger", "phone chargers"), ("photo frame", "photo frames"),
    ("rain jacket", "rain jackets"), ("paint set", "paint sets"), ("teapot", "teapots"),
    ("desk lamp", "desk lamps"), ("cake tin", "cake tins"),
)
_SHARE_ITEMS = (
    "marbles", "stickers", "trading cards", "seashells", "crayons", "beads", "stamps", "coins",
    "acorns", "postcards", "pebbles", "keychains", "ribbons", "bookmarks", "balloons", "erasers",
    "badges", "origami cranes", "paper stars", "bottle caps",
)
_FOODS = (
    "bagels", "muffins", "cookies", "rolls", "croissants", "donuts", "cupcakes", "pretzels", "scones",
    "biscuits", "tarts", "brownies", "buns", "eclairs", "waffles", "pies", "danishes", "madeleines",
    "churros", "cinnamon rolls",
)
_TANKS = (
    "pool", "water tank", "fish tank", "rain barrel", "pond", "bathtub", "cistern", "hot tub",
    "reservoir", "water trough",
)
_FUND_CLUBS = (
    "drama club", "soccer team", "art society", "hiking club", "school choir", "garden club",
    "book club", "robotics club", "scout troop", "photography club",
)
_DISTRACTORS = (
    "It was {x} degrees outside that day.",
    "The library is {x} miles away from the town square.",
    "The bus ride to the market takes {x} minutes.",
    "The town has {x} parks.",
    "The corner shop opened {x} years ago.",
    "There were {x} people waiting at the post office.",
    "The nearest lake is {x} kilometers away.",
    "The local soccer team has won {x} games this season.",
)


def _part(pool: Sequence[Any], split: str) -> list[Any]:
    """The split's share of a pool: index mod 10 in 0-7 train, 8 validation, 9 test."""
    bucket = {"train": range(8), "validation": (8,), "test": (9,)}[split]
    return [x for i, x in enumerate(pool) if i % 10 in bucket]


def _person(rng: random.Random, split: str) -> tuple[str, str, str]:
    """(name, subject pronoun, possessive pronoun)."""
    if rng.random() < 0.5:
        return rng.choice(_part(_FEMALE, split)), "she", "her"
    return rng.choice(_part(_MALE, split)), "he", "his"


def _others(rng: random.Random, split: str, count: int, exclude: str) -> list[str]:
    pool = [n for n in _part(_FEMALE, split) + _part(_MALE, split) if n != exclude]
    return rng.sample(pool, count)


def _money(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}"


def _count(n: int, unit: str) -> str:
    return f"{n} {unit}" if n == 1 else f"{n} {unit}s"


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


class _Steps:
    """Records calculator turns and computes every result with the real calculator."""

    def __init__(self) -> None:
        self.turns: list[tuple[dict[str, Any], ...]] = []
        self.results: list[str] = []

    def turn(self, *expressions: str) -> list[str]:
        results = [calculate(e) for e in expressions]
        self.results.extend(results)
        self.turns.append(tuple({"name": "calculator", "arguments": {"expression": e}} for e in expressions))
        return results

    def one(self, expression: str) -> str:
        return self.turn(expression)[0]

    @property
    def calls(self) -> int:
        return sum(len(t) for t in self.turns)


# Each template: (rng, split, steps) -> problem text; the answer is the result of the last call.
Template = Callable[[random.Random, str, _Steps], str]


def _t_shopping_change(rng: random.Random, split: str, s: _Steps) -> str:
    name, pron, _ = _person(rng, split)
    (_, item1), (_, item2) = rng.sample(_part(_SHOP_ITEMS, split), 2)
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    p1, p2 = rng.randrange(75, 1200, 5), rng.randrange(75, 1200, 5)
    total = a * p1 + b * p2
    bill = next((v for v in (2000, 5000, 10000, 20000) if v > total), None)
    # a total of $200 or more (up to $215.10) is paid with enough $100 bills
    paid, cash = (bill, f"a ${bill // 100} bill") if bill else ((total // 10000 + 1) * 10000, "")
    cash = cash or f"{paid // 10000} $100 bills"
    c1, c2 = s.turn(f"{a} * {_money(p1)}", f"{b} * {_money(p2)}")
    t = s.one(f"{c1} + {c2}")
    s.one(f"{paid // 100} - {t}")
    return (
        f"{name} buys {a} {item1} at ${_money(p1)} each and {b} {item2} at ${_money(p2)} each. "
        f"{_cap(pron)} pays with {cash}. How much change, in dollars, does {pron} get back?"
    )


def _t_savings_weeks(rng: random.Random, split: str, s: _Steps) -> str:
    name, pron, poss = _person(rng, split)
    gadget = rng.choice(_part(_GADGETS, split))
    job = rng.choice(_part(_JOBS, split))
    pct = rng.choice((10, 20, 25, 50))
    save = rng.randint(3, 40)
    wage = save * 100 // pct
    weeks = rng.randint(3, 20)
    have = rng.randint(5, 150)
    cost = have + weeks * save
    w, rest = s.turn(f"{wage} * {pct} / 100", f"{cost} - {have}")
    s.one(f"{rest} / {w}")
    return (
        f"{name} wants to buy a {gadget} that costs ${cost}. {_cap(pron)} already has ${have} saved. "
        f"{_cap(pron)} earns ${wage} a week {job} and saves {pct}% of {poss} earnings. "
        f"How many weeks will it take {name} to save enough for the {gadget}?"
    )


def _t_factory_defects(rng: random.Random, split: str, s: _Steps) -> str:
    item = rng.choice(_part(_FACTORY_ITEMS, split))
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


def _t_ages(rng: random.Random, split: str, s: _Steps) -> str:
    name, _, _ = _person(rng, split)
    n2, n3 = _others(rng, split, 2, name)
    a, k = rng.randint(4, 20), rng.randint(2, 4)
    m = rng.randint(1, max(1, a * k // 2))
    b = s.one(f"{a} * {k}")
    c = s.one(f"{b} - {m}")
    text = (
        f"{name} is {a} years old. {n2} is {k} times as old as {name}, and {n3} is {m} years younger "
        f"than {n2}."
    )
    if rng.random() < 0.5:
        total = s.one(f"{a} + {b} + {c}")
        y = rng.randint(2, 15)
        s.one(f"{total} + 3 * {y}")
        return text + f" What will the sum of their three ages be in {y} years?"
    s.one(f"{a} + {b} + {c}")
    return text + " What is the sum of their ages?"


def _t_recipe_bags(rng: random.Random, split: str, s: _Steps) -> str:
    name, pron, _ = _person(rng, split)
    ingredient, food = rng.choice(_part(_INGREDIENTS, split))
    event = rng.choice(_part(_EVENTS, split))
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


def _t_road_trip_fuel(rng: random.Random, split: str, s: _Steps) -> str:
    name, pron, poss = _person(rng, split)
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
    s.one(f"{gallons} * {_money(gas)}")
    return (
        f"{name} drives for {_count(h1, 'hour')} at {v1} miles per hour, then for {_count(h2, 'hour')} at "
        f"{v2} miles per hour. "
        f"{_cap(poss)} car goes {mpg} miles on a gallon of gas, and gas costs ${_money(gas)} per gallon. "
        f"How much, in dollars, does {pron} spend on gas for the trip?"
    )


def _t_school_band(rng: random.Random, split: str, s: _Steps) -> str:
    school = rng.choice(_part(_SCHOOLS, split))
    club = rng.choice(_part(_CLUBS, split))
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


def _t_orchard_sales(rng: random.Random, split: str, s: _Steps) -> str:
    name, pron, _ = _person(rng, split)
    plant, fruit = rng.choice(_part(_PLANTS, split))
    rows, per_row = rng.randint(3, 12), rng.randint(4, 15)
    dead = rng.randint(1, rows * per_row // 4)
    each = rng.randint(5, 30)
    basket = rng.choice((6, 8, 10, 12))
    price = rng.randrange(300, 1500, 25)
    total = s.one(f"{rows} * {per_row}")
    alive = s.one(f"{total} - {dead}")
    fruits = s.one(f"{alive} * {each}")
    baskets = s.one(f"floor({fruits} / {basket})")
    s.one(f"{baskets} * {_money(price)}")
    return (
        f"{name} plants {rows} rows of {plant} with {per_row} in each row. {dead} of them do not survive. "
        f"Each surviving plant gives {each} {fruit}. {_cap(pron)} packs them in baskets of {basket} and "
        f"sells only full baskets, at ${_money(price)} per basket. How many dollars does {pron} make?"
    )


def _t_overtime_pay(rng: random.Random, split: str, s: _Steps) -> str:
    name, pron, _ = _person(rng, split)
    wage = rng.randrange(1200, 4000, 2)
    hours = rng.randint(42, 60)
    base, rate = s.turn(f"40 * {_money(wage)}", f"{_money(wage)} * 1.5")
    over = s.one(f"({hours} - 40) * {rate}")
    text = (
        f"{name} earns ${_money(wage)} per hour for the first 40 hours of a week and 1.5 times that rate for "
        f"every hour over 40."
    )
    if rng.random() < 0.4:
        weeks = rng.randint(2, 4)
        week = s.one(f"{base} + {over}")
        s.one(f"{week} * {weeks}")
        return text + (
            f" {_cap(pron)} works {hours} hours every week for {weeks} weeks. How much does {pron} earn?"
        )
    s.one(f"{base} + {over}")
    return text + f" Last week {pron} worked {hours} hours. How much did {pron} earn that week?"


def _t_discount_coupon(rng: random.Random, split: str, s: _Steps) -> str:
    name, pron, _ = _person(rng, split)
    store = rng.choice(_part(_STORES, split))
    _, item = rng.choice(_part(_STORE_ITEMS, split))
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


def _t_sharing(rng: random.Random, split: str, s: _Steps) -> str:
    name, pron, _ = _person(rng, split)
    friend1, friend2 = _others(rng, split, 2, name)
    item = rng.choice(_part(_SHARE_ITEMS, split))
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
        f"{name} has {n} {item}. {_cap(pron)} gives 1/{k} of them to {friend1} and {g} to {friend2}, then "
        f"shares the rest equally among {m} classmates. How many {item} does each classmate get?"
    )


def _t_bakery_inventory(rng: random.Random, split: str, s: _Steps) -> str:
    food = rng.choice(_part(_FOODS, split))
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


def _t_tank_fill(rng: random.Random, split: str, s: _Steps) -> str:
    tank = rng.choice(_part(_TANKS, split))
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


def _t_fundraiser(rng: random.Random, split: str, s: _Steps) -> str:
    club = rng.choice(_part(_FUND_CLUBS, split))
    t, r = rng.randint(40, 300), rng.randint(20, 200)
    p, q = rng.randrange(300, 2500, 25), rng.randrange(100, 500, 25)
    k = rng.randint(2, 6)
    revenue = t * p + r * q
    share = rng.randint(revenue // (3 * k), revenue // (2 * k))
    cost = revenue - share * k
    a, b = s.turn(f"{t} * {_money(p)}", f"{r} * {_money(q)}")
    profit = s.one(f"{a} + {b} - {_money(cost)}")
    s.one(f"{profit} / {k}")
    return (
        f"The {club} sells {t} show tickets at ${_money(p)} each and {r} raffle tickets at "
        f"${_money(q)} each. "
        f"The event cost ${_money(cost)} to run. The profit is split equally among {k} charities. "
        f"How many dollars does each charity get?"
    )


TEMPLATES: dict[str, Template] = {
    "shopping_change": _t_shopping_change,
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
    sentence = rng.choice(_DISTRACTORS).format(x=rng.randint(2, 95))
    facts, sep, question = text.rpartition(". ")
    return f"{facts}. {sentence} {question}" if sep else f"{sentence} {text}"


class MathTaskSource:
    """Generated word problems (see the module docstring); deterministic in (seed, split, index)."""

    def __init__(self, seed: int = 0, sizes: dict[str, int] | None = None) -> None:
        self.seed = seed
        self.sizes = dict(SIZES if sizes is None else sizes)

    def size(self, split: str) -> int:
        check_split(split)
        return self.sizes[split]

    def task(self, split: str, index: int) -> Task:
        check_index(split, index, self.size(split))
        rng = random.Random(f"{self.seed}/math/{split}/{index}")
        names = [n for n in TEMPLATES if split == "test" or n not in TEST_ONLY_TEMPLATES]
        template = rng.choice(names)
        steps = _Steps()
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


# ------------------------------------------------------------------------------------------------ GSM8K

_ANNOTATION = re.compile(r"<<([^<>=]*)=([^<>]*)>>")
_FINAL = re.compile(r"####\s*(.*?)\s*$", re.S)


def _ascii(text: str) -> str:
    """Printable ASCII rendering (the env's text space): accents stripped, other symbols replaced."""
    text = unicodedata.normalize("NFKD", text)
    text = text.translate({0x2018: "'", 0x2019: "'", 0x201C: '"', 0x201D: '"', 0x2013: "-", 0x2014: "-"})
    out = []
    for ch in text:
        if ch == "\n" or " " <= ch <= "~":
            out.append(ch)
        elif ch == "\t":
            out.append(" ")
        elif not unicodedata.combining(ch):
            out.append("?")
    return "".join(out)


def _annotation_calls(solution: str) -> tuple[tuple[dict[str, Any], ...], ...]:
    """One calculator turn per ``<<expr=value>>`` annotation that evaluates to the annotated value."""
    turns = []
    for expression, value in _ANNOTATION.findall(solution):
        expression = expression.strip()
        try:
            got = evaluate_exact(expression)
            want = parse_number(value)
        except SafeMathError:
            continue
        if abs(Fraction(got) - want) <= Fraction(1, 10**6):
            turns.append(({"name": "calculator", "arguments": {"expression": expression}},))
    return tuple(turns)


def load_gsm8k(path: str | Path) -> list[Task]:
    """Read a GSM8K jsonl file: one ``{"question": ..., "answer": "... #### N"}`` object per line.

    Task ids are ``gsm8k/all/<i>`` (``i`` counts the non-blank lines from 0); gold answer = ``N`` with commas
    and ``$`` removed, rendered by :func:`joy_env.safe_math.format_number`.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: a line is not JSON, lacks the string fields, or its answer has no valid ``#### N``;
            the message names the file and line number.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"GSM8K file not found: {path}")
    tasks: list[Task] = []
    with path.open(encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: not valid JSON ({exc.msg})") from None
            if not isinstance(record, dict) or not all(
                isinstance(record.get(k), str) for k in ("question", "answer")
            ):
                raise ValueError(f"{where}: expected an object with string fields 'question' and 'answer'")
            match = _FINAL.search(record["answer"])
            if match is None:
                raise ValueError(f"{where}: the answer does not end with '#### N'")
            try:
                gold = format_number(parse_number(match.group(1)))
            except SafeMathError:
                bad = match.group(1)[:40]
                raise ValueError(f"{where}: the final answer {bad!r} is not a number") from None
            question = _ascii(record["question"].strip())
            if not question:
                raise ValueError(f"{where}: empty question")
            turns = _annotation_calls(record["answer"])
            sub = SubTask(agent="math", query=question, turns=turns, answer=gold)
            tasks.append(
                Task(
                    task_id=f"gsm8k/all/{len(tasks)}",
                    domain="math",
                    query=question,
                    answer=gold,
                    answer_type="math",
                    route=(sub,),
                    template="gsm8k",
                    meta={"steps": len(turns), "line": lineno, "source": str(path)},
                )
            )
    return tasks


def _bucket(question: str) -> str:
    h = int.from_bytes(hashlib.sha256(question.encode("utf-8")).digest()[:8], "big") % 10
    return "train" if h < 8 else ("validation" if h == 8 else "test")


class GSM8KTaskSource:
    """GSM8K lines split 80/10/10 by a hash of the question (stable across seeds and file orders)."""

    def __init__(self, tasks: Sequence[Task], seed: int = 0) -> None:
        self.seed = seed
        self._tasks: dict[str, list[Task]] = {s: [] for s in SPLITS}
        for t in tasks:
            self._tasks[_bucket(t.query)].append(t)
        for split, items in self._tasks.items():
            random.Random(f"{seed}/gsm8k/{split}").shuffle(items)

    def size(self, split: str) -> int:
        check_split(split)
        return len(self._tasks[split])

    def task(self, split: str, index: int) -> Task:
        check_index(split, index, self.size(split))
        return dataclasses.replace(self._tasks[split][int(index)], task_id=f"gsm8k/{split}/{index}")


def gsm8k_task_source(path: str | Path, seed: int = 0) -> GSM8KTaskSource:
    """A task source over a GSM8K jsonl file; ``seed`` shuffles the order within each split."""
    return GSM8KTaskSource(load_gsm8k(path), seed)


# ------------------------------------------------------------------------- parts for collaborative tasks


def calc_part(rng: random.Random, split: str, description: str, expression: str) -> tuple[SubTask, dict]:
    """A math sub-task: answer ``description`` by calling ``calculator(expression)``.

    Returns ``(SubTask, {"result": rendered result, "value": float})``.

    Raises:
        ValueError: ``expression`` is not valid for the calculator (:class:`SafeMathError`).
    """
    result = calculate(expression)
    value = float(evaluate_exact(expression))
    phrase = rng.choice(("The result is", "The answer is", "It comes to"))
    sub = SubTask(
        agent="math",
        query=_ascii(description),
        turns=(({"name": "calculator", "arguments": {"expression": expression}},),),
        answer=f"{phrase} {result}.",
    )
    return sub, {"result": result, "value": value}


_DISCOUNTS = (5, 10, 12, 15, 20, 25, 30, 35, 40)
_SHIPPING = ("4.99", "5.99", "6.50", "7.95", "8.99", "9.99", "12.00")


def discount_part(rng: random.Random, split: str, unit_price: float, quantity: int) -> tuple[SubTask, dict]:
    """A math sub-task: the total of ``quantity`` items at ``unit_price`` with a random discount.

    Picks a discount percent and, half of the time, a shipping fee; the sub-query is
    "What is the total for Q items at $P each with a D% discount (plus $S shipping)? Round to the nearest
    cent." and the gold call is ``calculator("round(Q * P * (100 - D) / 100 + S, 2)")``.

    Returns ``(SubTask, {"result", "value", "total", "percent", "shipping", "expression", "question"})``
    where ``total`` is the rounded total as a float.

    Raises:
        ValueError: non-positive price or quantity.
    """
    if not isinstance(quantity, int) or isinstance(quantity, bool) or quantity < 1:
        raise ValueError(f"quantity must be a positive integer, got {quantity!r}")
    if not isinstance(unit_price, (int, float)) or not 0 < unit_price <= 1e9 or unit_price != unit_price:
        raise ValueError(f"unit_price must be a positive number, got {unit_price!r}")
    price = f"{unit_price:.2f}"
    percent = rng.choice(_DISCOUNTS)
    shipping = rng.choice(_SHIPPING) if rng.random() < 0.5 else None
    item = "item" if quantity == 1 else "items"
    question = f"What is the total for {quantity} {item} at ${price} each with a {percent}% discount"
    expression = f"{quantity} * {price} * (100 - {percent}) / 100"
    if shipping is not None:
        question += f" plus ${shipping} shipping"
        expression += f" + {shipping}"
    question += "? Round to the nearest cent."
    expression = f"round({expression}, 2)"
    sub, out = calc_part(rng, split, question, expression)
    total = round(out["value"], 2)
    out.update(
        total=total,
        percent=percent,
        shipping=float(shipping) if shipping is not None else 0.0,
        expression=expression,
        question=question,
    )
    answer = f"The total is ${total:.2f}."
    return dataclasses.replace(sub, answer=answer), out
