"""Pools of names and items (partitioned by split) and the helpers that the templates share."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from joy_env.safe_math import calculate

FEMALE = (
    "Maria",
    "Aisha",
    "Sofia",
    "Emma",
    "Priya",
    "Chloe",
    "Hana",
    "Lucia",
    "Nadia",
    "Grace",
    "Olivia",
    "Fatima",
    "Mei",
    "Isabel",
    "Zara",
    "Ruth",
    "Elena",
    "Amara",
    "Leah",
    "Ingrid",
    "Carmen",
    "Yuki",
    "Nora",
    "Tessa",
    "Abena",
    "Julia",
    "Sana",
    "Freya",
    "Lila",
    "Paula",
    "Rosa",
    "Keiko",
    "Alma",
    "Dana",
    "Ivy",
    "Mira",
    "Gloria",
    "Anika",
    "Beth",
    "Clara",
)
MALE = (
    "James",
    "Omar",
    "Diego",
    "Liam",
    "Ravi",
    "Kenji",
    "Tomas",
    "Noah",
    "Samuel",
    "Ahmed",
    "Felix",
    "Mateo",
    "Jun",
    "Kofi",
    "Lucas",
    "Arjun",
    "Pedro",
    "Ethan",
    "Hugo",
    "Tariq",
    "Marco",
    "Oscar",
    "Ivan",
    "Malik",
    "Leo",
    "Bruno",
    "Dev",
    "Erik",
    "Jamal",
    "Ali",
    "Chen",
    "Rafael",
    "Owen",
    "Yusuf",
    "Milo",
    "Andre",
    "Hiro",
    "Victor",
    "Kwame",
    "Simon",
)
# (singular, plural)
SHOP_ITEMS = (
    ("notebook", "notebooks"),
    ("pen", "pens"),
    ("apple", "apples"),
    ("candle", "candles"),
    ("mug", "mugs"),
    ("sticker sheet", "sticker sheets"),
    ("bag of rice", "bags of rice"),
    ("box of tea", "boxes of tea"),
    ("towel", "towels"),
    ("light bulb", "light bulbs"),
    ("pencil case", "pencil cases"),
    ("jar of honey", "jars of honey"),
    ("pair of socks", "pairs of socks"),
    ("loaf of bread", "loaves of bread"),
    ("sketchbook", "sketchbooks"),
    ("flower pot", "flower pots"),
    ("battery pack", "battery packs"),
    ("bar of soap", "bars of soap"),
    ("puzzle", "puzzles"),
    ("tin of cookies", "tins of cookies"),
)
GADGETS = (
    "bicycle",
    "guitar",
    "tablet",
    "skateboard",
    "telescope",
    "camera",
    "keyboard",
    "tent",
    "drone",
    "microscope",
    "scooter",
    "sewing machine",
    "record player",
    "chess set",
    "violin",
    "smartwatch",
    "kayak",
    "drum kit",
    "fishing rod",
    "projector",
)
JOBS = (
    "walking dogs",
    "mowing lawns",
    "tutoring",
    "babysitting",
    "washing cars",
    "delivering newspapers",
    "selling crafts",
    "helping at a bakery",
    "raking leaves",
    "shoveling snow",
)
FACTORY_ITEMS = (
    "bolts",
    "bottles",
    "toy cars",
    "phone cases",
    "bricks",
    "candles",
    "buttons",
    "tiles",
    "spoons",
    "cups",
    "gears",
    "lids",
    "notebooks",
    "springs",
    "bowls",
    "hinges",
    "clips",
    "pencils",
    "plates",
    "valves",
)
INGREDIENTS = (
    ("flour", "loaves of bread"),
    ("sugar", "muffins"),
    ("oats", "cookies"),
    ("rice", "rice balls"),
    ("cornmeal", "corn cakes"),
    ("cocoa", "brownies"),
    ("milk", "pancakes"),
    ("cream", "cream puffs"),
    ("almond flour", "macarons"),
    ("coconut", "coconut bars"),
    ("yogurt", "smoothies"),
    ("lentils", "bowls of soup"),
    ("pasta", "pasta salads"),
    ("butter", "croissants"),
    ("berries", "berry tarts"),
    ("cheese", "cheese puffs"),
    ("honey", "honey cakes"),
    ("raisins", "raisin buns"),
    ("pumpkin", "pumpkin pies"),
    ("banana", "banana breads"),
)
EVENTS = (
    "school fair",
    "birthday party",
    "family picnic",
    "bake sale",
    "wedding",
    "team dinner",
    "holiday party",
    "book club",
    "charity lunch",
    "neighborhood potluck",
)
SCHOOLS = (
    "Maple Grove School",
    "Riverside Academy",
    "Hillcrest High",
    "Oakwood Middle School",
    "Lakeview School",
    "Sunnyside Academy",
    "Pine Ridge High",
    "Brookfield School",
    "Cedar Park Middle School",
    "Harbor View Academy",
    "Westfield High",
    "Elmwood School",
    "Meadowbrook Academy",
    "Stonegate High",
    "Willow Creek School",
    "Northgate Academy",
    "Fairview Middle School",
    "Greenfield High",
    "Bayside School",
    "Clearwater Academy",
)
CLUBS = (
    "band",
    "chess club",
    "drama club",
    "choir",
    "robotics team",
    "art club",
    "debate team",
    "orchestra",
    "science club",
    "dance team",
)
PLANTS = (
    ("apple trees", "apples"),
    ("tomato plants", "tomatoes"),
    ("pepper plants", "peppers"),
    ("lemon trees", "lemons"),
    ("pear trees", "pears"),
    ("peach trees", "peaches"),
    ("plum trees", "plums"),
    ("orange trees", "oranges"),
    ("cucumber vines", "cucumbers"),
    ("strawberry plants", "strawberries"),
    ("zucchini plants", "zucchinis"),
    ("fig trees", "figs"),
    ("apricot trees", "apricots"),
    ("eggplant plants", "eggplants"),
    ("mango trees", "mangoes"),
    ("squash vines", "squashes"),
    ("cherry trees", "cherries"),
    ("bean plants", "bean pods"),
    ("melon vines", "melons"),
    ("lime trees", "limes"),
)
STORES = (
    "sports shop",
    "bookstore",
    "toy store",
    "hardware store",
    "garden center",
    "music shop",
    "pet store",
    "craft store",
    "shoe store",
    "kitchen store",
    "camping store",
    "stationery shop",
    "bike shop",
    "electronics store",
    "gift shop",
    "outdoor store",
    "art supply store",
    "tea shop",
    "furniture store",
    "bakery",
)
STORE_ITEMS = (
    ("water bottle", "water bottles"),
    ("novel", "novels"),
    ("board game", "board games"),
    ("hammer", "hammers"),
    ("seed packet", "seed packets"),
    ("guitar pick set", "guitar pick sets"),
    ("dog toy", "dog toys"),
    ("yarn ball", "yarn balls"),
    ("pair of sneakers", "pairs of sneakers"),
    ("frying pan", "frying pans"),
    ("sleeping bag", "sleeping bags"),
    ("planner", "planners"),
    ("bike helmet", "bike helmets"),
    ("phone charger", "phone chargers"),
    ("photo frame", "photo frames"),
    ("rain jacket", "rain jackets"),
    ("paint set", "paint sets"),
    ("teapot", "teapots"),
    ("desk lamp", "desk lamps"),
    ("cake tin", "cake tins"),
)
SHARE_ITEMS = (
    "marbles",
    "stickers",
    "trading cards",
    "seashells",
    "crayons",
    "beads",
    "stamps",
    "coins",
    "acorns",
    "postcards",
    "pebbles",
    "keychains",
    "ribbons",
    "bookmarks",
    "balloons",
    "erasers",
    "badges",
    "origami cranes",
    "paper stars",
    "bottle caps",
)
FOODS = (
    "bagels",
    "muffins",
    "cookies",
    "rolls",
    "croissants",
    "donuts",
    "cupcakes",
    "pretzels",
    "scones",
    "biscuits",
    "tarts",
    "brownies",
    "buns",
    "eclairs",
    "waffles",
    "pies",
    "danishes",
    "madeleines",
    "churros",
    "cinnamon rolls",
)
TANKS = (
    "pool",
    "water tank",
    "fish tank",
    "rain barrel",
    "pond",
    "bathtub",
    "cistern",
    "hot tub",
    "reservoir",
    "water trough",
)
FUND_CLUBS = (
    "drama club",
    "soccer team",
    "art society",
    "hiking club",
    "school choir",
    "garden club",
    "book club",
    "robotics club",
    "scout troop",
    "photography club",
)
DISTRACTORS = (
    "It was {x} degrees outside that day.",
    "The library is {x} miles away from the town square.",
    "The bus ride to the market takes {x} minutes.",
    "The town has {x} parks.",
    "The corner shop opened {x} years ago.",
    "There were {x} people waiting at the post office.",
    "The nearest lake is {x} kilometers away.",
    "The local soccer team has won {x} games this season.",
)


def part(pool: Sequence[Any], split: str) -> list[Any]:
    """The split's share of a pool: index mod 10 in 0-7 train, 8 validation, 9 test."""
    bucket = {"train": range(8), "validation": (8,), "test": (9,)}[split]
    return [x for i, x in enumerate(pool) if i % 10 in bucket]


def person(rng: random.Random, split: str) -> tuple[str, str, str]:
    """(name, subject pronoun, possessive pronoun)."""
    if rng.random() < 0.5:
        return rng.choice(part(FEMALE, split)), "she", "her"
    return rng.choice(part(MALE, split)), "he", "his"


def others(rng: random.Random, split: str, count: int, exclude: str) -> list[str]:
    pool = [n for n in part(FEMALE, split) + part(MALE, split) if n != exclude]
    return rng.sample(pool, count)


def money(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}"


def counted(n: int, unit: str) -> str:
    return f"{n} {unit}" if n == 1 else f"{n} {unit}s"


def capitalized(text: str) -> str:
    return text[:1].upper() + text[1:]


class Steps:
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
