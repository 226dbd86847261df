"""Deterministic generator of the e-commerce shop database.

:func:`build_db` turns a seed into an in-memory SQLite shop: a catalog of product variants with
look-alike distractors, users with addresses and payment methods, carts, orders in every state with
their items, shipments with tracking events, coupons with rules, and returns. The shop lives on a
fixed simulated clock (:data:`TODAY`, :data:`NOW`) so that expiry dates, return windows and tracking
events never depend on the real time. Money is stored in integer cents.

Splits: products are partitioned by *model* (all colour / size variants of a model share a split),
users and coupons by their id, with :func:`split_of` (a CRC32 of the id, independent of the seed).
A user's cart and orders only contain products of the user's split.

The user documentation of the domain (tools, tasks) is in :mod:`joy_env.domains.ecommerce`.
"""

from __future__ import annotations

import datetime as dt
import random
import sqlite3
import zlib

from joy_env.database import install_audit

TODAY = "2026-06-01"
NOW = "2026-06-01T12:00:00"
TODAY_DATE = dt.date(2026, 6, 1)
NOW_DT = dt.datetime(2026, 6, 1, 12, 0, 0)
RETURN_WINDOW_DAYS = 30
"""Return window of a category the shop policy does not name (every catalog category is named)."""
MAX_CART_QUANTITY = 10

ORDER_STATUSES = ("placed", "paid", "shipped", "delivered", "cancelled", "returned")
CATEGORIES = ("electronics", "clothing", "shoes", "home", "sports", "books", "beauty")

#: Tables that tools may write, with their primary keys (installed as audit triggers).
AUDIT: dict[str, tuple[str, ...]] = {
    "products": ("product_id",),
    "cart_items": ("user_id", "product_id"),
    "orders": ("order_id",),
    "order_items": ("order_id", "product_id"),
    "coupons": ("code",),
    "returns": ("return_id",),
    "payment_methods": ("payment_id",),
}

SCHEMA = """
CREATE TABLE products (
    product_id TEXT PRIMARY KEY, model_id TEXT NOT NULL, name TEXT NOT NULL UNIQUE,
    model_name TEXT NOT NULL, brand TEXT NOT NULL, category TEXT NOT NULL, product_type TEXT NOT NULL,
    colour TEXT, size TEXT, price_cents INTEGER NOT NULL CHECK (price_cents > 0),
    rating REAL NOT NULL CHECK (rating BETWEEN 1.0 AND 5.0), stock INTEGER NOT NULL CHECK (stock >= 0),
    description TEXT NOT NULL,
    search_text TEXT NOT NULL  -- lower(name || ' ' || category): what search_products matches
);
CREATE TABLE users (
    user_id TEXT PRIMARY KEY, name TEXT NOT NULL, email TEXT NOT NULL, street TEXT NOT NULL,
    city TEXT NOT NULL, state TEXT NOT NULL, zip TEXT NOT NULL, joined_on TEXT NOT NULL
);
CREATE TABLE payment_methods (
    payment_id TEXT PRIMARY KEY, user_id TEXT NOT NULL REFERENCES users (user_id),
    kind TEXT NOT NULL CHECK (kind IN ('card', 'wallet', 'gift_card')), label TEXT NOT NULL,
    last4 TEXT, expires TEXT, balance_cents INTEGER CHECK (balance_cents IS NULL OR balance_cents >= 0)
);
CREATE TABLE cart_items (
    user_id TEXT NOT NULL, product_id TEXT NOT NULL, quantity INTEGER NOT NULL CHECK (quantity > 0),
    added_at TEXT NOT NULL, PRIMARY KEY (user_id, product_id)
);
CREATE TABLE coupons (
    code TEXT PRIMARY KEY, description TEXT NOT NULL, kind TEXT NOT NULL CHECK (kind IN ('percent', 'fixed')),
    value INTEGER NOT NULL, min_spend_cents INTEGER NOT NULL, category TEXT, expires_on TEXT NOT NULL,
    usage_limit INTEGER NOT NULL, used_count INTEGER NOT NULL CHECK (used_count >= 0),
    active INTEGER NOT NULL
);
CREATE TABLE orders (
    order_id TEXT PRIMARY KEY, user_id TEXT NOT NULL, status TEXT NOT NULL CHECK (status IN
    ('placed', 'paid', 'shipped', 'delivered', 'cancelled', 'returned')), created_at TEXT NOT NULL,
    payment_id TEXT NOT NULL, coupon_code TEXT, subtotal_cents INTEGER NOT NULL,
    discount_cents INTEGER NOT NULL, total_cents INTEGER NOT NULL CHECK (total_cents >= 0),
    ship_address TEXT NOT NULL, delivered_at TEXT, cancelled_at TEXT
);
CREATE TABLE order_items (
    order_id TEXT NOT NULL, product_id TEXT NOT NULL, quantity INTEGER NOT NULL CHECK (quantity > 0),
    unit_price_cents INTEGER NOT NULL, returned_quantity INTEGER NOT NULL DEFAULT 0
    CHECK (returned_quantity BETWEEN 0 AND quantity), PRIMARY KEY (order_id, product_id)
);
CREATE TABLE shipments (
    shipment_id TEXT PRIMARY KEY, order_id TEXT NOT NULL UNIQUE, carrier TEXT NOT NULL,
    tracking_number TEXT NOT NULL UNIQUE, status TEXT NOT NULL, shipped_at TEXT NOT NULL,
    estimated_delivery TEXT NOT NULL, delivered_at TEXT
);
CREATE TABLE tracking_events (
    shipment_id TEXT NOT NULL, seq INTEGER NOT NULL, ts TEXT NOT NULL, location TEXT NOT NULL,
    description TEXT NOT NULL, PRIMARY KEY (shipment_id, seq)
);
CREATE TABLE return_windows (category TEXT PRIMARY KEY, days INTEGER NOT NULL CHECK (days > 0));
CREATE TABLE returns (
    return_id TEXT PRIMARY KEY, order_id TEXT NOT NULL, product_id TEXT NOT NULL, user_id TEXT NOT NULL,
    quantity INTEGER NOT NULL CHECK (quantity > 0), reason TEXT NOT NULL, status TEXT NOT NULL,
    refund_cents INTEGER NOT NULL, created_at TEXT NOT NULL
);
CREATE INDEX idx_products_category ON products (category, brand);
CREATE INDEX idx_products_model ON products (model_id);
CREATE INDEX idx_orders_user ON orders (user_id, status);
CREATE INDEX idx_payment_user ON payment_methods (user_id);
"""

# --- catalog vocabulary -------------------------------------------------------------------------------

_CATALOG: dict[str, dict] = {
    "electronics": {
        "brands": ["Voltra", "Sonix", "Pixelon", "Auralis", "Nexa", "Kestrel"],
        "types": {
            "Bluetooth Speaker": (2500, 15000),
            "Wireless Earbuds": (3000, 22000),
            "Smartwatch": (9000, 40000),
            "Tablet": (15000, 90000),
            "Headphones": (4000, 35000),
            "Action Camera": (12000, 45000),
        },
        "colours": ["Black", "White", "Silver", "Blue", "Graphite"],
        "sizes": None,
    },
    "clothing": {
        "brands": ["Northpeak", "Urbanly", "Corvid", "Linden", "Tidewear", "Halcyon"],
        "types": {
            "Fleece Hoodie": (3500, 9000),
            "Rain Jacket": (6000, 22000),
            "Crew T-Shirt": (1200, 4000),
            "Slim Jeans": (4000, 12000),
            "Wool Sweater": (5000, 16000),
            "Chino Shorts": (2500, 6000),
        },
        "colours": ["Black", "Navy", "Olive", "Grey", "Red", "White"],
        "sizes": ["XS", "S", "M", "L", "XL"],
    },
    "shoes": {
        "brands": ["Stride", "Kinetic", "Terrano", "Velox", "Ambler"],
        "types": {
            "Running Shoes": (5000, 18000),
            "Trail Sneakers": (6000, 17000),
            "Hiking Boots": (8000, 25000),
            "Canvas Sneakers": (3000, 8000),
            "Leather Loafers": (7000, 20000),
        },
        "colours": ["Black", "White", "Grey", "Blue", "Brown"],
        "sizes": ["38", "39", "40", "41", "42", "43", "44", "45"],
    },
    "home": {
        "brands": ["Hearth", "Nordhaus", "Casaluz", "Brightwell", "Oakline"],
        "types": {
            "Coffee Maker": (3000, 25000),
            "Blender": (2500, 18000),
            "Desk Lamp": (1500, 9000),
            "Cookware Set": (6000, 30000),
            "Throw Blanket": (2000, 8000),
            "Air Purifier": (8000, 40000),
        },
        "colours": ["Black", "White", "Silver", "Red", "Sage"],
        "sizes": None,
    },
    "sports": {
        "brands": ["Apex", "Summit", "Ridgeline", "Pulsefit", "Marlin"],
        "types": {
            "Yoga Mat": (1500, 9000),
            "Dumbbell Set": (3000, 20000),
            "Tennis Racket": (4000, 25000),
            "Cycling Helmet": (4000, 20000),
            "Water Bottle": (1000, 4500),
            "Jump Rope": (800, 3500),
        },
        "colours": ["Black", "Purple", "Teal", "Orange", "Blue"],
        "sizes": ["S", "M", "L"],
        "sized_types": {"Cycling Helmet"},
    },
    "books": {
        "brands": ["Harbor Press", "Quill House", "Northlight Books", "Vantage"],
        "types": {
            "Novel": (900, 3200),
            "Thriller": (900, 2800),
            "Cookbook": (1500, 4500),
            "Guide": (1200, 4000),
        },
        "colours": None,
        "sizes": ["Paperback", "Hardcover"],
    },
    "beauty": {
        "brands": ["Lumiere", "Verdant", "Solenne", "Aurea", "Petalry"],
        "types": {
            "Face Serum": (1800, 9000),
            "Moisturizer": (1500, 7000),
            "Shampoo": (800, 3500),
            "Lipstick": (1200, 4500),
            "Eau de Parfum": (4000, 15000),
        },
        "colours": ["Ruby", "Coral", "Mauve", "Nude", "Berry"],
        "coloured_types": {"Lipstick"},
        "sizes": ["30ml", "50ml", "100ml"],
        "sized_types": {"Face Serum", "Moisturizer", "Shampoo", "Eau de Parfum"},
    },
}

_SERIES = [
    "Pulse",
    "Nova",
    "Aero",
    "Flex",
    "Orbit",
    "Echo",
    "Terra",
    "Zen",
    "Swift",
    "Glide",
    "Peak",
    "Vista",
    "Drift",
    "Core",
    "Edge",
    "Halo",
    "Atlas",
    "Breeze",
    "Ember",
    "Luma",
    "Strata",
    "Vertex",
    "Cirrus",
    "Onyx",
]
_BOOK_WORDS_A = ["Quiet", "Silver", "Hidden", "Last", "Northern", "Golden", "Broken", "Distant", "Salt", "Winter"]
_BOOK_WORDS_B = ["Orchard", "Harbor", "Lantern", "River", "Garden", "Signal", "Kingdom", "Island", "Road", "Letters"]
_BOOK_TOPICS = {
    "Cookbook": ["Weeknight Pasta", "Plant Kitchen", "Slow Cooker", "Baking Basics", "Street Food", "Soups"],
    "Guide": ["Home Repair", "Trail Running", "Houseplants", "Budget Travel", "Watercolor", "Chess"],
}
_FIRST = [
    "Ava",
    "Liam",
    "Noah",
    "Emma",
    "Olivia",
    "Mason",
    "Sophia",
    "Lucas",
    "Mia",
    "Ethan",
    "Amelia",
    "Logan",
    "Harper",
    "Elijah",
    "Evelyn",
    "James",
    "Abigail",
    "Benjamin",
    "Ella",
    "Henry",
    "Grace",
    "Daniel",
    "Chloe",
    "Samuel",
    "Zoe",
    "Owen",
    "Nora",
    "Caleb",
    "Leah",
    "Isaac",
    "Maya",
    "Julian",
    "Aria",
    "Gabriel",
    "Ruby",
    "Adrian",
    "Hazel",
    "Leo",
    "Ivy",
    "Miles",
]
_LAST = [
    "Smith",
    "Johnson",
    "Lee",
    "Garcia",
    "Martin",
    "Clark",
    "Lewis",
    "Walker",
    "Hall",
    "Young",
    "King",
    "Wright",
    "Lopez",
    "Hill",
    "Scott",
    "Green",
    "Adams",
    "Baker",
    "Nelson",
    "Carter",
    "Mitchell",
    "Perez",
    "Roberts",
    "Turner",
    "Phillips",
    "Campbell",
    "Parker",
    "Evans",
    "Edwards",
    "Collins",
    "Stewart",
    "Morris",
    "Reed",
    "Cook",
    "Morgan",
    "Bell",
    "Murphy",
    "Bailey",
    "Rivera",
    "Cooper",
]
_CITIES = [
    ("Portland", "OR"),
    ("Austin", "TX"),
    ("Denver", "CO"),
    ("Madison", "WI"),
    ("Raleigh", "NC"),
    ("Tucson", "AZ"),
    ("Boise", "ID"),
    ("Omaha", "NE"),
    ("Tampa", "FL"),
    ("Buffalo", "NY"),
    ("Spokane", "WA"),
    ("Richmond", "VA"),
    ("Fresno", "CA"),
    ("Toledo", "OH"),
    ("Lansing", "MI"),
    ("Savannah", "GA"),
    ("Provo", "UT"),
    ("Eugene", "OR"),
    ("Albany", "NY"),
    ("Dayton", "OH"),
    ("Wichita", "KS"),
    ("Mobile", "AL"),
    ("Reno", "NV"),
    ("Durham", "NC"),
    ("Fargo", "ND"),
]
_STREETS = ["Maple", "Oak", "Cedar", "Pine", "Elm", "Birch", "Willow", "Lake", "Hill", "Park", "Sunset", "River"]
_STREET_KINDS = ["St", "Ave", "Rd", "Ln", "Dr", "Way"]
_CARRIERS = {"UPS": "1Z", "FedEx": "FX", "DHL": "DH", "USPS": "US"}
_WAREHOUSES = ["Memphis", "Columbus", "Allentown", "Stockton"]
_HUBS = ["Louisville", "Indianapolis", "Dallas", "Atlanta", "Chicago", "Phoenix", "Nashville", "Kansas City"]
_COUPON_WORDS = [
    "SAVE",
    "SPRING",
    "SUMMER",
    "WELCOME",
    "FLASH",
    "TECH",
    "STYLE",
    "HOME",
    "FIT",
    "READ",
    "GLOW",
    "SHOE",
    "BONUS",
    "VIP",
    "CLEAR",
    "EXTRA",
    "HAPPY",
    "DEAL",
]

FIRST_ORDER_NUMBER = 30001
FIRST_RETURN_NUMBER = 70001


def split_of(entity_id: str) -> str:
    """The split (``train`` / ``validation`` / ``test``) of a model, user or coupon id (~80/10/10)."""
    bucket = zlib.crc32(entity_id.encode("ascii")) % 10
    return "test" if bucket == 0 else "validation" if bucket == 1 else "train"


def cents_str(cents: int) -> str:
    """``12999`` -> ``"129.99"`` (the money format of every tool result and fact)."""
    sign = "-" if cents < 0 else ""
    cents = abs(cents)
    return f"{sign}{cents // 100}.{cents % 100:02d}"


def coupon_discount(kind: str, value: int, eligible_cents: int) -> int:
    """Discount in cents of a coupon on an eligible subtotal (percent rounds half up)."""
    if kind == "percent":
        return (eligible_cents * value + 50) // 100
    return min(value, eligible_cents)


def refund_cents(unit_cents: int, quantity: int, subtotal_cents: int, discount_cents: int) -> int:
    """Refund of ``quantity`` units: their price minus their pro-rata share of the order discount."""
    line = unit_cents * quantity
    share = discount_cents * line // subtotal_cents if subtotal_cents else 0
    return line - share


def _price(rng: random.Random, lo: int, hi: int) -> int:
    dollars = rng.randint(lo // 100, hi // 100 - 1)
    return dollars * 100 + rng.choice([99, 99, 95, 49, 50, 0, 89, 79])


def _gen_products(rng: random.Random) -> list[tuple]:
    rows: list[tuple] = []
    names: set[str] = set()
    model_no = 100
    product_no = 1001
    for category, spec in _CATALOG.items():
        for ptype, (lo, hi) in spec["types"].items():
            brands = rng.sample(spec["brands"], min(len(spec["brands"]), 5 if category != "books" else 3))
            for brand in brands:
                base_price = _price(rng, lo, hi)
                base_rating = rng.uniform(2.4, 4.9)
                if category == "books":
                    models = _book_models(rng, ptype)
                else:
                    series = rng.choice(_SERIES)
                    gen = rng.randint(1, 5)
                    models = [f"{series} {gen}"]
                    extra = rng.random()
                    if extra < 0.35:
                        models.append(f"{series} {gen} Pro")
                    elif extra < 0.6:
                        models.append(f"{series} {gen + 1}")
                for m_index, model in enumerate(models):
                    model_no += 1
                    model_id = f"M{model_no}"
                    if category == "books":
                        model_name = f"{model} ({ptype}) from {brand}"
                    else:
                        model_name = f"{brand} {model} {ptype}"
                    price = base_price + m_index * rng.choice([1000, 2000, 3000]) + rng.choice([0, 0, 500, -500])
                    price = max(price, 499)
                    rating = min(5.0, max(1.0, base_rating + rng.uniform(-0.6, 0.6)))
                    for colour, size in _variants(rng, spec, ptype):
                        suffix = ", ".join(_suffix(colour, size))
                        name = f"{model_name} - {suffix}" if suffix else model_name
                        if name in names:
                            continue
                        names.add(name)
                        v_price = price + (rng.choice([0, 0, 0, 200, 500]) if size in ("XL", "100ml") else 0)
                        v_rating = round(min(5.0, max(1.0, rating + rng.uniform(-0.3, 0.3))), 1)
                        stock = 0 if rng.random() < 0.12 else rng.randint(1, 60)
                        desc = f"{ptype} from the {brand} {model.split(' ')[0]} line."
                        if category == "books":
                            desc = f"{ptype} '{model}' published by {brand}."
                        rows.append(
                            (
                                f"P{product_no}",
                                model_id,
                                name,
                                model_name,
                                brand,
                                category,
                                ptype,
                                colour,
                                size,
                                v_price,
                                v_rating,
                                stock,
                                desc,
                            )
                        )
                        product_no += 1
    return rows


def _book_models(rng: random.Random, ptype: str) -> list[str]:
    if ptype in ("Novel", "Thriller"):
        first = f"{rng.choice(_BOOK_WORDS_A)} {rng.choice(_BOOK_WORDS_B)}"
        second = f"{rng.choice(_BOOK_WORDS_A)} {rng.choice(_BOOK_WORDS_B)}"
        return [first] if first == second else [first, second]
    topic = rng.choice(_BOOK_TOPICS[ptype])
    return [f"{topic} {ptype}", f"{topic} {ptype} Vol 2"] if rng.random() < 0.5 else [f"{topic} {ptype}"]


def _variants(rng: random.Random, spec: dict, ptype: str) -> list[tuple[str | None, str | None]]:
    colours = spec["colours"]
    if colours is not None and "coloured_types" in spec and ptype not in spec["coloured_types"]:
        colours = None
    sizes = spec["sizes"]
    if sizes is not None and "sized_types" in spec and ptype not in spec["sized_types"]:
        sizes = None
    cs = rng.sample(colours, rng.randint(1, 3)) if colours else [None]
    ss = sorted(rng.sample(sizes, min(len(sizes), rng.randint(1, 3))), key=sizes.index) if sizes else [None]
    combos = [(c, s) for c in cs for s in ss]
    rng.shuffle(combos)
    return sorted(combos[: rng.randint(2, 6)], key=lambda cs_: (cs_[0] or "", cs_[1] or ""))


def _suffix(colour: str | None, size: str | None) -> list[str]:
    parts = []
    if colour:
        parts.append(colour)
    if size:
        parts.append(size if size in ("Paperback", "Hardcover") or size.endswith("ml") else f"Size {size}")
    return parts


def _gen_users(rng: random.Random) -> tuple[list[tuple], list[tuple]]:
    users, payments = [], []
    seen: set[str] = set()
    payment_no = 5001
    for i in range(250):
        while True:
            name = f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"
            if name not in seen:
                seen.add(name)
                break
        uid = f"U{2001 + i}"
        city, state = rng.choice(_CITIES)
        street = f"{rng.randint(10, 9899)} {rng.choice(_STREETS)} {rng.choice(_STREET_KINDS)}"
        email = f"{name.lower().replace(' ', '.')}{rng.randint(1, 99)}@example.com"
        joined = TODAY_DATE - dt.timedelta(days=rng.randint(200, 1500))
        users.append((uid, name, email, street, city, state, f"{rng.randint(10000, 99999)}", joined.isoformat()))
        last4s = [f"{d:04d}" for d in rng.sample(range(10000), 4)]
        methods: list[tuple] = []
        for _ in range(rng.choice([1, 1, 2])):
            brand = rng.choice(["Visa", "Mastercard", "Amex"])
            l4 = last4s.pop()
            year = rng.choice([2025, 2026, 2026, 2027, 2028, 2029])
            month = rng.randint(1, 12)
            methods.append(("card", f"{brand} ending {l4}", l4, f"{year}-{month:02d}", None))
        if rng.random() < 0.45:
            l4 = last4s.pop()
            methods.append(
                ("gift_card", f"Gift card ending {l4}", l4, None, rng.randint(10, 400) * 100 + rng.choice([0, 50]))
            )
        if rng.random() < 0.4:
            methods.append(("wallet", "JoyPay wallet", None, None, rng.randint(0, 600) * 100 + rng.randint(0, 99)))
        for kind, label, l4, exp, bal in methods:
            payments.append((f"PM{payment_no}", uid, kind, label, l4, exp, bal))
            payment_no += 1
    return users, payments


def _gen_coupons(rng: random.Random) -> list[tuple]:
    rows = []
    codes: set[str] = set()
    while len(rows) < 220:
        word = rng.choice(_COUPON_WORDS)
        kind = "percent" if rng.random() < 0.55 else "fixed"
        value = rng.choice([5, 10, 15, 20, 25, 30]) if kind == "percent" else rng.choice([5, 10, 15, 20, 25, 40]) * 100
        code = f"{word}{value if kind == 'percent' else value // 100}{rng.choice('ABCDEFGHJKLMNPQRSTUVWXYZ')}"
        if code in codes:
            continue
        codes.add(code)
        min_spend = rng.choice([0, 0, 2500, 5000, 5000, 10000, 15000, 20000])
        category = rng.choice(CATEGORIES) if rng.random() < 0.45 else None
        if rng.random() < 0.25:
            expires = TODAY_DATE - dt.timedelta(days=rng.randint(1, 120))
        else:
            expires = TODAY_DATE + dt.timedelta(days=rng.randint(0, 200))
        limit = rng.choice([50, 100, 200, 500, 1000])
        used = limit if rng.random() < 0.1 else rng.randint(0, limit - 1)
        active = 0 if rng.random() < 0.08 else 1
        what = f"{value}% off" if kind == "percent" else f"{cents_str(value)} off"
        scope = f" {category} items" if category else " your order"
        minimum = f" when you spend at least {cents_str(min_spend)}" if min_spend else ""
        rows.append(
            (
                code,
                f"{what}{scope}{minimum}",
                kind,
                value,
                min_spend,
                category,
                expires.isoformat(),
                limit,
                used,
                active,
            )
        )
    return rows


def _iso(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S")


def _order_status(rng: random.Random) -> str:
    r = rng.random()
    for status, below in (
        ("placed", 0.06),
        ("paid", 0.12),
        ("shipped", 0.25),
        ("delivered", 0.82),
        ("cancelled", 0.90),
    ):
        if r < below:
            return status
    return "returned"


def _order_age_minutes(rng: random.Random, status: str) -> int:
    """How long ago an order of ``status`` was placed."""
    if status in ("placed", "paid"):
        return rng.randint(30, 3 * 24 * 60)
    if status == "shipped":
        return rng.randint(2 * 24 * 60, 9 * 24 * 60)
    if status == "delivered" and rng.random() < 0.4:
        return rng.randint(5 * 24 * 60, 32 * 24 * 60)
    return rng.randint(9 * 24 * 60, 150 * 24 * 60)


def _order_drafts(rng: random.Random, users: list[tuple]) -> list[tuple[dt.datetime, tuple, str]]:
    """1,250 orders' ``(created, user, status)``, oldest first."""
    drafts = []
    for _ in range(1250):
        user = rng.choice(users)
        status = _order_status(rng)
        drafts.append((NOW_DT - dt.timedelta(minutes=_order_age_minutes(rng, status)), user, status))
    drafts.sort(key=lambda d: (d[0], d[1][0]))
    return drafts


def _tracking_number(rng: random.Random, carrier: str, seen: set[str]) -> str:
    while True:
        tracking = f"{_CARRIERS[carrier]}{rng.randint(10**9, 10**10 - 1)}"
        if tracking not in seen:
            seen.add(tracking)
            return tracking


def _shipment(
    rng: random.Random, oid: str, sid: str, user: tuple, created: dt.datetime, status: str, seen: set[str]
) -> tuple[dt.datetime, tuple, list[tuple], str | None]:
    """A shipped, delivered or returned order's shipment: ``(created, shipment row, tracking events, delivered
    at)``; ``created`` moves back when the order would otherwise be delivered in the future."""
    shipped = created + dt.timedelta(minutes=rng.randint(12 * 60, 36 * 60))
    transit_days = rng.randint(2, 6)
    eta = (shipped + dt.timedelta(days=transit_days)).date()
    carrier = rng.choice(sorted(_CARRIERS))
    tracking = _tracking_number(rng, carrier, seen)
    warehouse = rng.choice(_WAREHOUSES)
    hubs = rng.sample(_HUBS, rng.randint(1, 2))
    plan = [(warehouse, "Label created, package handed to carrier"), (warehouse, "Picked up")]
    plan += [(h, "Arrived at carrier facility") for h in hubs]
    plan += [(user[4], "Out for delivery"), (user[4], "Delivered")]
    step = dt.timedelta(minutes=transit_days * 24 * 60 // (len(plan) - 1))
    times = [shipped + step * i for i in range(len(plan))]
    delivered_at = None
    if status == "shipped":
        keep = [i for i, t in enumerate(times[:-1]) if t < NOW_DT] or [0]
        plan, times = plan[: keep[-1] + 1], times[: keep[-1] + 1]
        times[0] = min(times[0], NOW_DT - dt.timedelta(minutes=5))
        ship_status = "out_for_delivery" if plan[-1][1] == "Out for delivery" else "in_transit"
        eta = max(eta, TODAY_DATE)
    else:
        ship_status = "delivered"
        if times[-1] >= NOW_DT:  # too recent to be delivered: shift the whole order back
            shift = times[-1] - NOW_DT + dt.timedelta(hours=rng.randint(2, 48))
            created, times = created - shift, [t - shift for t in times]
        delivered_at = _iso(times[-1])
        eta = times[-1].date()
    row = (sid, oid, carrier, tracking, ship_status, _iso(times[0]), eta.isoformat(), delivered_at)
    events = [(sid, i + 1, _iso(t), loc, what) for i, (t, (loc, what)) in enumerate(zip(times, plan, strict=True))]
    return created, row, events, delivered_at


def _return_rows(
    rng: random.Random, oid: str, uid: str, lines: list[tuple], subtotal: int, discount: int, delivered_at: str, no: int
) -> list[tuple]:
    """The return rows of a returned order, one per line, numbered from ``no``."""
    ret_day = dt.datetime.fromisoformat(delivered_at) + dt.timedelta(days=rng.randint(1, 20))
    ret_day = min(ret_day, NOW_DT - dt.timedelta(hours=1))
    reason = rng.choice(["Damaged on arrival", "Wrong size", "Changed my mind", "Not as described"])
    return [
        (f"R{no + i}", oid, pid, uid, q, reason, "refunded", refund_cents(c, q, subtotal, discount), _iso(ret_day))
        for i, (pid, q, c) in enumerate(lines)
    ]


def _gen_orders(
    rng: random.Random,
    products: list[tuple],
    users: list[tuple],
    payments: list[tuple],
    coupons: list[tuple],
) -> tuple[list[tuple], list[tuple], list[tuple], list[tuple], list[tuple]]:
    by_split: dict[str, list[tuple]] = {"train": [], "validation": [], "test": []}
    for p in products:
        by_split[split_of(p[1])].append(p)
    pay_by_user: dict[str, list[tuple]] = {}
    for pm in payments:
        pay_by_user.setdefault(pm[1], []).append(pm)
    plain_coupons = [c for c in coupons if c[5] is None]
    orders: list[tuple] = []
    items: list[tuple] = []
    shipments: list[tuple] = []
    events: list[tuple] = []
    returns: list[tuple] = []
    tracking_seen: set[str] = set()
    for n, (created, user, status) in enumerate(_order_drafts(rng, users)):
        oid = f"O{FIRST_ORDER_NUMBER + n}"
        uid = user[0]
        chosen = rng.sample(by_split[split_of(uid)], rng.choice([1, 1, 2, 2, 3, 4]))
        lines = [(p[0], rng.choice([1, 1, 1, 2, 3]), p[9]) for p in chosen]
        subtotal = sum(q * c for _, q, c in lines)
        coupon, discount = None, 0
        if rng.random() < 0.25:
            c = rng.choice(plain_coupons)
            coupon, discount = c[0], coupon_discount(c[2], c[3], subtotal)
        pm = rng.choice(pay_by_user[uid])
        delivered_at = cancelled_at = None
        if status == "cancelled":
            cancelled_at = _iso(created + dt.timedelta(minutes=rng.randint(20, 600)))
        if status in ("shipped", "delivered", "returned"):
            sid = f"S{80001 + len(shipments)}"
            created, shipment, steps, delivered_at = _shipment(rng, oid, sid, user, created, status, tracking_seen)
            shipments.append(shipment)
            events.extend(steps)
        returned = status == "returned"
        items.extend((oid, pid, q, c, q if returned else 0) for pid, q, c in lines)
        if returned:
            no = FIRST_RETURN_NUMBER + len(returns)
            returns.extend(_return_rows(rng, oid, uid, lines, subtotal, discount, delivered_at, no))
        address = f"{user[3]}, {user[4]}, {user[5]} {user[6]}"
        row = (oid, uid, status, _iso(created), pm[0], coupon, subtotal, discount, subtotal - discount, address)
        orders.append((*row, delivered_at, cancelled_at))
    return orders, items, shipments, events, returns


def _gen_carts(rng: random.Random, products: list[tuple], users: list[tuple]) -> list[tuple]:
    by_split: dict[str, list[tuple]] = {"train": [], "validation": [], "test": []}
    for p in products:
        if p[11] > 0:
            by_split[split_of(p[1])].append(p)
    rows = []
    for user in users:
        if rng.random() < 0.45:
            for p in rng.sample(by_split[split_of(user[0])], rng.randint(1, 3)):
                added = NOW_DT - dt.timedelta(minutes=rng.randint(60, 20 * 24 * 60))
                rows.append((user[0], p[0], min(p[11], rng.choice([1, 1, 2, 3])), _iso(added)))
    return rows


def return_windows(seed: int) -> dict[str, int]:
    """Days to return an item of each catalog category: the shop policy of the knowledge base
    (:func:`joy_env.domains.qa.policy_facts`), so what the QA agent reads is what ``return_item`` enforces."""
    from joy_env.domains.qa import policy_facts

    windows = policy_facts(seed)["returns"]
    return {c: int(windows.get(c, RETURN_WINDOW_DAYS)) for c in CATEGORIES}


def build_db(seed: int) -> sqlite3.Connection:
    """Build the pristine shop database of ``seed`` (in memory, deterministic, audited)."""
    rng = random.Random(f"ecommerce-db/{seed}")
    conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    conn.executescript(SCHEMA)
    products = _gen_products(rng)
    users, payments = _gen_users(rng)
    coupons = _gen_coupons(rng)
    orders, items, shipments, events, returns = _gen_orders(rng, products, users, payments, coupons)
    carts = _gen_carts(rng, products, users)
    conn.execute("BEGIN")
    conn.executemany(
        f"INSERT INTO products VALUES ({', '.join('?' * 14)})", [(*p, f"{p[2]} {p[5]}".lower()) for p in products]
    )
    conn.executemany("INSERT INTO users VALUES (?, ?, ?, ?, ?, ?, ?, ?)", users)
    conn.executemany("INSERT INTO payment_methods VALUES (?, ?, ?, ?, ?, ?, ?)", payments)
    conn.executemany("INSERT INTO coupons VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", coupons)
    conn.executemany(f"INSERT INTO orders VALUES ({', '.join('?' * 12)})", orders)
    conn.executemany("INSERT INTO order_items VALUES (?, ?, ?, ?, ?)", items)
    conn.executemany("INSERT INTO shipments VALUES (?, ?, ?, ?, ?, ?, ?, ?)", shipments)
    conn.executemany("INSERT INTO tracking_events VALUES (?, ?, ?, ?, ?)", events)
    conn.executemany("INSERT INTO returns VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", returns)
    conn.executemany("INSERT INTO cart_items VALUES (?, ?, ?, ?)", carts)
    conn.executemany("INSERT INTO return_windows VALUES (?, ?)", sorted(return_windows(seed).items()))
    conn.execute("COMMIT")
    install_audit(conn, AUDIT)
    return conn
