"""The e-commerce task source: one generator method per template (see :mod:`joy_env.domains.ecommerce`)."""

from __future__ import annotations

import random
import sqlite3
import threading
from collections.abc import Callable, Mapping
from typing import Any

from joy_env.core import SubTask, Task, TaskSourceBase, ToolContext, ToolError
from joy_env.domains.ecommerce.db import MAX_CART_QUANTITY, cents_str, coupon_discount
from joy_env.domains.ecommerce.helpers import RETURN_REASONS, coupon_failures, eligible_cents
from joy_env.domains.ecommerce.schemas import TOOL_MAP
from joy_env.domains.ecommerce.task_helpers import (
    CANCEL_REASONS,
    CATEGORY_PHRASES,
    REASON_PHRASES,
    Draft,
    ShopIndex,
    facts_distinct,
    gold_call,
    opt,
    run_gold_turns,
    their,
)


def _coupon_refusal(coupon: Mapping[str, Any], keyword: str, lines: list) -> tuple[str, str | None]:
    """Why ``coupon`` cannot be used on ``lines`` (its one failure, ``keyword``), in words, and the fact to report
    with it, if any."""
    eligible = cents_str(eligible_cents(coupon, lines))
    minimum = cents_str(coupon["min_spend_cents"])
    return {
        "inactive": ("it is inactive", None),
        "expired": (f"it expired on {coupon['expires_on']}", coupon["expires_on"]),
        "usage limit": ("it has reached its usage limit", None),
        "category": (f"its category restriction limits it to {coupon['category']} items and your cart has none", None),
        "minimum spend": (f"your eligible subtotal of ${eligible} is below its minimum spend of ${minimum}", minimum),
    }[keyword]


class EcommerceTaskSource(ShopIndex, TaskSourceBase):
    """Tasks of the e-commerce domain for one seed (templates: see :mod:`joy_env.domains.ecommerce`)."""

    SIZES: Mapping[str, int] = {"train": 20000, "validation": 2000, "test": 2000}

    def __init__(self, seed: int, db: sqlite3.Connection) -> None:
        self.seed = seed
        self.sizes = dict(self.SIZES)
        self.db = db
        self._image: bytes | None = None
        self._scratch: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._ctx = ToolContext(db)
        self._index()
        # (name, generator, test only, weight)
        self._templates: tuple[tuple[str, Callable[[random.Random, str], Draft | None], bool, float], ...] = (
            ("cheapest_in_range", self._t_cheapest, False, 1.0),
            ("compare_products", self._t_compare, False, 1.0),
            ("order_tracking", self._t_tracking, False, 1.0),
            ("buy_product", self._t_buy, False, 1.2),
            ("cancel_order", self._t_cancel, False, 1.0),
            ("cancel_denied", self._t_cancel_denied, False, 0.8),
            ("coupon_check", self._t_coupon, False, 1.2),
            ("return_item", self._t_return, False, 1.0),
            ("return_denied", self._t_return_denied, False, 0.8),
            ("count_orders", self._t_count, False, 0.8),
            ("stock_variant", self._t_stock_variant, False, 1.0),
            ("remove_from_cart", self._t_remove, False, 0.8),
            ("buy_cheapest_with_coupon", self._t_buy_cheapest_coupon, True, 1.4),
            ("latest_shipment", self._t_latest_shipment, True, 1.4),
        )

    # -- public API -----------------------------------------------------------------------------------------

    def build_task(self, split: str, index: int) -> Task:
        """Task ``index`` of ``split`` (deterministic in seed, split and index)."""
        rng = random.Random(f"ecommerce-task/{self.seed}/{split}/{index}")
        templates = [t for t in self._templates if split == "test" or not t[2]]
        first = rng.choices(range(len(templates)), weights=[t[3] for t in templates])[0]
        for k in range(len(templates)):
            name, make, test_only, _weight = templates[(first + k) % len(templates)]
            for _attempt in range(60):
                draft = make(rng, split)
                if draft is not None and facts_distinct(draft.answer, draft.facts):
                    sub = SubTask(
                        agent="ecommerce",
                        query=draft.sub_query,
                        turns=tuple(tuple(turn) for turn in draft.turns),
                        answer=draft.answer,
                        required_calls=tuple(draft.required),
                    )
                    return Task(
                        task_id=f"ecommerce/{split}/{index}",
                        domain="ecommerce",
                        query=draft.query,
                        answer=draft.answer,
                        answer_type="facts",
                        route=(sub,),
                        facts=draft.facts,
                        template=name,
                        meta={
                            "test_only_template": test_only,
                            "writes": any(TOOL_MAP[c["name"]].writes for t in draft.turns for c in t),
                            "calls": sum(len(t) for t in draft.turns),
                        },
                    )
        raise RuntimeError(f"no e-commerce template could generate task {split}/{index}")  # pragma: no cover

    # -- templates --------------------------------------------------------------------------------------------

    def _t_cheapest(self, rng: random.Random, split: str) -> Draft | None:
        p = self.products[rng.choice(self.in_stock_by_split[split])]
        rng_range = self._price_range(p, rng)
        if rng_range is None:
            return None
        lo, hi = rng_range
        args: dict[str, Any] = {"category": p["category"], "brand": p["brand"]}
        if lo:
            args["min_price"] = lo // 100
        args.update(max_price=hi // 100, in_stock=True, sort_by="price_asc", limit=5)
        turns = [[gold_call("search_products", **args)], [gold_call("check_stock", product_id=p["product_id"])]]
        found, details = (r[0] for r in run_gold_turns(self.db, turns))
        if found["results"][0]["product_id"] != p["product_id"]:
            return None
        what = CATEGORY_PHRASES[p["category"]]
        span = f"between ${lo // 100} and ${hi // 100}" if lo else f"under ${hi // 100}"
        query = self._join(
            self._intro(rng),
            f"I'm looking for {what} from {p['brand']}, priced {span}, and it has to be in stock.",
            self._distractor(rng, split),
            "Which one is the cheapest, what does it cost, and how many units do you have?",
        )
        sub_query = (
            f"Find the cheapest in-stock {p['brand']} product in the {p['category']} category priced {span}; "
            "report its product id, price and units in stock."
        )
        answer = (
            f"The cheapest in-stock {p['brand']} {p['category']} item priced {span} is the {details['name']} "
            f"({details['product_id']}) at ${cents_str(p['price_cents'])}, with {details['stock']} units in stock."
        )
        return Draft(
            query,
            sub_query,
            turns,
            answer,
            (details["product_id"], cents_str(p["price_cents"]), str(details["stock"])),
            [{"check_stock": {"product_id": [p["product_id"]]}}],
        )

    def _t_compare(self, rng: random.Random, split: str) -> Draft | None:
        p1 = self.products[rng.choice(self.products_by_split[split])]
        peers = [
            self.products[q]
            for q in self.by_type[(split, p1["category"], p1["product_type"])]
            if self.products[q]["model_id"] != p1["model_id"]
            and self.products[q]["rating"] != p1["rating"]
            and self.products[q]["price_cents"] != p1["price_cents"]
        ]
        if not peers:
            return None
        same_brand = [q for q in peers if q["brand"] == p1["brand"]]
        p2 = rng.choice(same_brand if same_brand and rng.random() < 0.6 else peers)
        by_name = rng.random() < 0.4
        if by_name and not self._found_by_search(p2["name"], p2["product_id"]):
            by_name = False
        d1 = gold_call("get_product_details", product_id=p1["product_id"])
        d2 = gold_call("get_product_details", product_id=p2["product_id"])
        if by_name:
            turns = [[d1, gold_call("search_products", query=p2["name"], limit=5)], [d2]]
        else:
            turns = [[d1, d2]]
        run_gold_turns(self.db, turns)
        win, lose = (p1, p2) if p1["rating"] > p2["rating"] else (p2, p1)
        diff = cents_str(abs(p1["price_cents"] - p2["price_cents"]))
        cheaper = "more" if win["price_cents"] > lose["price_cents"] else "less"
        second = p2["name"] if by_name else f"{p2['name']} ({p2['product_id']})"
        query = self._join(
            self._intro(rng),
            f"I can't decide between the {p1['name']} ({p1['product_id']}) and the {second}.",
            self._distractor(rng, split),
            "Which one has the better customer rating, and how much more or less does it cost than the other?",
        )
        sub_query = (
            f"Compare the {p1['name']} ({p1['product_id']}) with the {second}: which has the higher rating, "
            "and what is the price difference?"
        )
        answer = (
            f"The {win['name']} ({win['product_id']}) has the better rating, {win['rating']:.1f} versus "
            f"{lose['rating']:.1f} for the {lose['name']} ({lose['product_id']}). It costs "
            f"${cents_str(win['price_cents'])} versus ${cents_str(lose['price_cents'])}, so it is ${diff} {cheaper} "
            "expensive."
        )
        facts = (win["product_id"], f"{win['rating']:.1f}", f"{lose['rating']:.1f}", diff)
        required = [
            {"get_product_details": {"product_id": [p1["product_id"]]}},
            {"get_product_details": {"product_id": [p2["product_id"]]}},
        ]
        return Draft(query, sub_query, turns, answer, facts, required)

    def _t_tracking(self, rng: random.Random, split: str) -> Draft | None:
        pool = self.orders_by.get((split, "shipped" if rng.random() < 0.6 else "delivered"), [])
        if not pool:
            return None
        oid = rng.choice(pool)
        uid = self.orders[oid]["user_id"]
        turns = [[gold_call("get_order_details", order_id=oid), gold_call("track_shipment", order_id=oid)]]
        ((details, track),) = run_gold_turns(self.db, turns)
        latest = track["latest_event"]
        others = [o for o in self.orders_by_user[uid] if o != oid]
        aside = (
            f"(I also have order {rng.choice(others)}, but that one is fine.)" if others and rng.random() < 0.6 else ""
        )
        query = self._join(
            self._intro(rng),
            f"This is {self.users[uid][1]}, customer id {uid}. Could you check on my order {oid}?",
            aside,
            "I'd like its status, which carrier has it and the latest tracking update.",
            self._distractor(rng, split),
        )
        sub_query = (
            f"User {uid} asks about order {oid}: report the order status, the carrier, the tracking number "
            "and the latest tracking event."
        )
        answer = (
            f"Order {oid} is {details['status']}; the latest update ({latest['time'][:10]}) is "
            f"'{latest['description']}' in {latest['location']}. It is with {track['carrier']}, tracking number "
            f"{track['tracking_number']}."
        )
        facts = (details["status"], track["carrier"], track["tracking_number"], latest["location"])
        required = [{"get_order_details": {"order_id": [oid]}}, {"track_shipment": {"order_id": [oid]}}]
        return Draft(query, sub_query, turns, answer, facts, required)

    def _t_buy(self, rng: random.Random, split: str) -> Draft | None:
        uid = rng.choice(self.users_by_split[split])
        cart = self.carts.get(uid, [])
        if any(q > self.products[c]["stock"] for c, q in cart):
            return None
        p = self.products[rng.choice(self.in_stock_by_split[split])]
        n = rng.choice((1, 1, 2, 3))
        if dict(cart).get(p["product_id"], 0) + n > min(p["stock"], MAX_CART_QUANTITY):
            return None
        expected = sum(self.products[c]["price_cents"] * q for c, q in cart) + n * p["price_cents"]
        usable = self._usable_payments(uid, expected)
        if not usable:
            return None
        pm = rng.choice(usable)
        by_name = rng.random() < 0.5 and self._found_by_search(p["name"], p["product_id"])
        profile = gold_call("get_user_profile", user_id=uid)
        add = gold_call("add_to_cart", user_id=uid, product_id=p["product_id"], quantity=n)
        order = gold_call("place_order", user_id=uid, payment_id=pm["payment_id"])
        if by_name:
            turns = [[gold_call("search_products", query=p["name"], limit=5), profile], [add], [order]]
            desc = f"the {p['name']}"
        else:
            turns = [[profile, add], [order]]
            desc = f"the {p['name']} ({p['product_id']})"
        try:
            placed = self._run_write(turns)[-1][0]
        except ToolError:
            return None
        note = ", together with everything that is already in my cart," if cart else ""
        query = self._join(
            self._intro(rng),
            f"I'm {self.users[uid][1]}, user {uid}. Please add {n} x {desc} to my cart and check out{note} "
            f"paying with {self._pay_phrase(pm)}.",
            self._distractor(rng, split),
            "What's the order number and the total?",
        )
        sub_query = (
            f"For user {uid}: add {n} x {desc} to the cart, then place the order for the whole cart paid with "
            f"{their(self._pay_phrase(pm))}. Report the order id and total."
        )
        extra = " plus the items already in the cart" if cart else ""
        answer = (
            f"Order {placed['order_id']} has been placed: {n} x {p['name']}{extra}, paid with {pm['label']}; "
            f"the total is ${placed['total']}."
        )
        required = [
            {
                "add_to_cart": {
                    "user_id": [uid],
                    "product_id": [p["product_id"]],
                    "quantity": opt(n) if n == 1 else [n],
                }
            },
            {"place_order": {"user_id": [uid], "payment_id": [pm["payment_id"]], "coupon_code": [""]}},
        ]
        return Draft(query, sub_query, turns, answer, (placed["order_id"], placed["total"]), required)

    def _t_cancel(self, rng: random.Random, split: str) -> Draft | None:
        pool = self.orders_by.get((split, "placed"), []) + self.orders_by.get((split, "paid"), [])
        if not pool:
            return None
        oid = rng.choice(pool)
        uid = self.orders[oid]["user_id"]
        turns = [[gold_call("get_order_details", order_id=oid)], [gold_call("cancel_order", user_id=uid, order_id=oid)]]
        try:
            result = self._run_write(turns)[-1][0]
        except ToolError:
            return None
        query = self._join(
            self._intro(rng),
            f"I'm {self.users[uid][1]} ({uid}) and I'd like to cancel my order {oid}.",
            rng.choice(CANCEL_REASONS),
            "How much will I get back?",
        )
        sub_query = f"User {uid} wants to cancel order {oid}. Cancel it if the shop allows it and report the refund."
        answer = (
            f"Order {oid} has been cancelled and {result['refunded_to']} will be refunded ${result['refund_amount']}."
        )
        required = [{"cancel_order": {"user_id": [uid], "order_id": [oid]}}]
        return Draft(query, sub_query, turns, answer, (oid, "cancelled", result["refund_amount"]), required)

    def _t_cancel_denied(self, rng: random.Random, split: str) -> Draft | None:
        pool = self.orders_by.get((split, "shipped" if rng.random() < 0.6 else "delivered"), [])
        if not pool:
            return None
        oid = rng.choice(pool)
        uid = self.orders[oid]["user_id"]
        turns = [[gold_call("get_order_details", order_id=oid)]]
        status = run_gold_turns(self.db, turns)[0][0]["status"]
        query = self._join(
            self._intro(rng),
            f"I'm {self.users[uid][1]} ({uid}). Please cancel my order {oid}.",
            rng.choice(CANCEL_REASONS),
            self._distractor(rng, split),
        )
        sub_query = f"User {uid} wants to cancel order {oid}. Cancel it if the shop allows it and report the result."
        answer = (
            f"Order {oid} cannot be cancelled: it has already been {status}, and only placed or paid orders "
            "can be cancelled. Nothing was changed."
        )
        return Draft(query, sub_query, turns, answer, (oid, status), [{"get_order_details": {"order_id": [oid]}}])

    def _coupon_cart(self, rng: random.Random, split: str, uid: str) -> tuple[dict[str, Any] | None, int, list] | None:
        """The cart lines a coupon is tried on: the user's cart (``None, 0, lines``), or, when it is empty, one
        product to add first (``product, quantity, lines``); ``None`` when the product lacks the stock."""
        cart = self.carts.get(uid, [])
        if cart:
            return None, 0, [(self.products[c]["category"], q, self.products[c]["price_cents"]) for c, q in cart]
        p = self.products[rng.choice(self.in_stock_by_split[split])]
        n = rng.choice((1, 1, 2))
        if n > p["stock"]:
            return None
        return p, n, [(p["category"], n, p["price_cents"])]

    def _pick_coupon(self, rng: random.Random, split: str, lines: list) -> tuple[bool, dict[str, Any] | None, list]:
        """``(valid, coupon, failures)``: a coupon of the split that gives a discount on ``lines`` (55% of the time)
        or one refused for exactly one reason; ``coupon`` is ``None`` when the split has none."""
        want_valid = rng.random() < 0.55
        codes = list(self.coupons_by_split[split])
        rng.shuffle(codes)
        failures: list = []
        for code in codes:
            c = self.coupons[code]
            failures = coupon_failures(c, lines)
            if want_valid and not failures and coupon_discount(c["kind"], c["value"], eligible_cents(c, lines)) > 0:
                return want_valid, c, failures
            if not want_valid and len(failures) == 1:
                return want_valid, c, failures
        return want_valid, None, failures

    def _t_coupon(self, rng: random.Random, split: str) -> Draft | None:
        uid = rng.choice(self.users_by_split[split])
        picked = self._coupon_cart(rng, split, uid)
        if picked is None:
            return None
        p, n, lines = picked
        adding = p is not None
        want_valid, chosen, failures = self._pick_coupon(rng, split, lines)
        if chosen is None:
            return None
        code = chosen["code"]
        first = (
            gold_call("add_to_cart", user_id=uid, product_id=p["product_id"], quantity=n)
            if adding
            else gold_call("view_cart", user_id=uid)
        )
        turns = [[first, gold_call("get_coupon", code=code)]]
        if want_valid:
            turns.append([gold_call("apply_coupon", user_id=uid, coupon_code=code)])
        try:
            results = self._run_write(turns) if adding else run_gold_turns(self.db, turns)
        except ToolError:
            return None
        cart_now = results[0][0]
        add_text = f"Please add {n} x the {p['name']} ({p['product_id']}) to my cart first." if adding else ""
        query = self._join(
            self._intro(rng),
            f"I'm {uid}.",
            add_text,
            f"Can I use coupon {code} on my cart? If it works, what's the discount and the new total?",
            self._distractor(rng, split),
        )
        sub_query = self._join(
            f"User {uid}:" if not adding else f"User {uid}: add {n} x {p['product_id']} to the cart, then",
            f"check whether coupon {code} can be used on the cart and, if so, report the discount and total.",
        )
        required: list[dict[str, Any]] = []
        if adding:
            qty = opt(n) if n == 1 else [n]
            required.append({"add_to_cart": {"user_id": [uid], "product_id": [p["product_id"]], "quantity": qty}})
        if want_valid:
            applied = results[1][0]
            answer = (
                f"Coupon {code} applies: the discount is ${applied['discount']}, so your cart goes from "
                f"${applied['subtotal']} to ${applied['total']}."
            )
            facts: tuple[str, ...] = (code, applied["discount"], applied["total"])
            required.append({"apply_coupon": {"user_id": [uid], "coupon_code": [code]}})
        else:
            keyword = failures[0][0]
            why, value = _coupon_refusal(chosen, keyword, lines)
            answer = f"Your cart subtotal is ${cart_now['subtotal']}, but coupon {code} cannot be used: {why}."
            facts = (code, keyword) if value is None else (code, keyword, value)
            required.append({"get_coupon": {"code": [code]}})
        return Draft(query, sub_query, turns, answer, facts, required)

    def _t_return(self, rng: random.Random, split: str) -> Draft | None:
        pool = self.recent_delivered[split]
        if not pool:
            return None
        oid, chosen = rng.choice(pool)
        uid = self.orders[oid]["user_id"]
        lines = [line for line in self.items[oid] if line[0] == chosen and line[1] > line[3]]
        if not lines:
            return None
        pid, qty, _unit, ret = rng.choice(lines)
        q = rng.randint(1, qty - ret)
        reason = rng.choice(RETURN_REASONS)
        name = self.products[pid]["name"]
        call = gold_call("return_item", user_id=uid, order_id=oid, product_id=pid, reason=reason, quantity=q)
        turns = [[gold_call("get_order_details", order_id=oid)], [call]]
        try:
            result = self._run_write(turns)[-1][0]
        except ToolError:
            return None
        amount = f"{q} of " if qty > 1 else ""
        query = self._join(
            self._intro(rng),
            f"I'm {self.users[uid][1]} ({uid}). I want to return {amount}the {name} from order {oid} because "
            f"{REASON_PHRASES[reason]}.",
            self._distractor(rng, split),
            "How much will be refunded?",
        )
        sub_query = (
            f"User {uid} wants to return {q} unit(s) of the {name} from order {oid} (reason: {reason}). "
            "Process the return if allowed and report the return id and refund."
        )
        answer = (
            f"Return {result['return_id']} is approved for {q} x {name} from order {oid}, refunded to "
            f"{result['refunded_to']}: the refund is ${result['refund_amount']}."
        )
        required = [
            {
                "return_item": {
                    "user_id": [uid],
                    "order_id": [oid],
                    "product_id": [pid],
                    "quantity": opt(q) if q == 1 else [q],
                    "reason": [reason],
                }
            }
        ]
        return Draft(query, sub_query, turns, answer, (result["return_id"], result["refund_amount"]), required)

    def _t_return_denied(self, rng: random.Random, split: str) -> Draft | None:
        late = rng.random() < 0.7
        pool = self.old_delivered[split] if late else self.orders_by.get((split, "shipped"), [])
        if not pool:
            return None
        if late:
            oid, pid = rng.choice(pool)
        else:
            oid = rng.choice(pool)
            pid = rng.choice(self.items[oid])[0]
        uid = self.orders[oid]["user_id"]
        name = self.products[pid]["name"]
        reason = rng.choice(RETURN_REASONS)
        turns = [[gold_call("get_order_details", order_id=oid)]]
        details = run_gold_turns(self.db, turns)[0][0]
        item = next((i for i in details["items"] if i["product_id"] == pid), {})
        query = self._join(
            self._intro(rng),
            f"I'm {self.users[uid][1]} ({uid}). I'd like to return the {name} from order {oid} because "
            f"{REASON_PHRASES[reason]}.",
            self._distractor(rng, split),
        )
        sub_query = (
            f"User {uid} wants to return the {name} from order {oid} (reason: {reason}). Process the return if "
            "allowed and report the result."
        )
        if late:
            answer = (
                f"The {name} from order {oid} can no longer be returned: it was delivered on "
                f"{details['delivered_at'][:10]} and its return window ended on {item['return_by']}."
            )
            facts: tuple[str, ...] = (oid, item["return_by"])
        else:
            answer = (
                f"The {name} from order {oid} cannot be returned yet: the order is still shipped and not delivered, "
                "and only delivered orders can be returned."
            )
            facts = (oid, "shipped")
        return Draft(query, sub_query, turns, answer, facts, [{"get_order_details": {"order_id": [oid]}}])

    def _t_count(self, rng: random.Random, split: str) -> Draft | None:
        uid = rng.choice(self.users_by_split[split])
        status = rng.choice(("delivered", "delivered", "delivered", "cancelled", "returned", "shipped"))
        turns = [[gold_call("list_user_orders", user_id=uid, status=status)]]
        listing = run_gold_turns(self.db, turns)[0][0]
        count = listing["count"]
        if count == 0 or count > 10:  # all of them fit in the default page
            return None
        total = cents_str(sum(self.orders[o["order_id"]]["total_cents"] for o in listing["orders"]))
        query = self._join(
            self._intro(rng),
            f"How many of my orders are {status}, and how much did those orders come to in total? My user id is {uid}.",
            self._distractor(rng, split),
        )
        sub_query = f"Count user {uid}'s orders with status {status} and add up their totals."
        ids = ", ".join(o["order_id"] for o in listing["orders"])
        answer = f"You have {count} {status} order{'s' if count != 1 else ''} ({ids}), totalling ${total}."
        pages: list[Any] = ["", *range(count, 21)]  # any limit that lists every order
        required = [{"list_user_orders": {"user_id": [uid], "status": [status], "limit": pages}}]
        return Draft(query, sub_query, turns, answer, (str(count), total), required)

    def _t_stock_variant(self, rng: random.Random, split: str) -> Draft | None:
        models = self.models_by_split[split]
        if not models:
            return None
        p = self.products[rng.choice(self.models[rng.choice(models)])]
        args: dict[str, Any] = {"query": p["model_name"]}
        bits = []
        if p["colour"]:
            args["colour"] = p["colour"]
            bits.append(p["colour"])
        if p["size"]:
            args["size"] = p["size"]
            bits.append(
                p["size"]
                if p["size"] in ("Paperback", "Hardcover") or p["size"].endswith("ml")
                else f"size {p['size']}"
            )
        args["limit"] = 10
        turns = [[gold_call("search_products", **args)], [gold_call("check_stock", product_id=p["product_id"])]]
        found, stock = (r[0] for r in run_gold_turns(self.db, turns))
        if not any(r["product_id"] == p["product_id"] for r in found["results"]):
            return None
        variant = " in " + ", ".join(bits)
        query = self._join(
            self._intro(rng),
            f"Do you have the {p['model_name']}{variant}? How many are in stock?",
            self._distractor(rng, split),
        )
        sub_query = f"Find the {p['model_name']}{variant} and check how many units are in stock."
        if stock["stock"] > 0:
            answer = f"Yes, the {p['name']} ({p['product_id']}) is in stock: {stock['stock']} units available."
        else:
            answer = f"Sorry, the {p['name']} ({p['product_id']}) is out of stock (0 units)."
        required = [{"check_stock": {"product_id": [p["product_id"]]}}]
        return Draft(query, sub_query, turns, answer, (p["product_id"], str(stock["stock"])), required)

    def _t_remove(self, rng: random.Random, split: str) -> Draft | None:
        uid = rng.choice(self.users_by_split[split])
        cart = self.carts.get(uid, [])
        if len(cart) < 2:
            return None
        pid, qty = rng.choice(cart)
        name = self.products[pid]["name"]
        turns = [[gold_call("view_cart", user_id=uid)], [gold_call("remove_from_cart", user_id=uid, product_id=pid)]]
        try:
            after = self._run_write(turns)[-1][0]
        except ToolError:
            return None
        query = self._join(
            self._intro(rng),
            f"Please take the {name} out of my cart, I'm {uid}.",
            self._distractor(rng, split),
            "What's my cart subtotal after that?",
        )
        sub_query = f"Remove the {name} completely from user {uid}'s cart and report the new cart subtotal."
        answer = (
            f"The {name} has been removed from your cart; it now holds {after['item_count']} item(s) with a "
            f"subtotal of ${after['subtotal']}."
        )
        whole: list[Any] = ["", *range(qty, MAX_CART_QUANTITY + 1)]  # any quantity that removes the line
        required = [{"remove_from_cart": {"user_id": [uid], "product_id": [pid], "quantity": whole}}]
        return Draft(query, sub_query, turns, answer, (after["subtotal"],), required)

    def _t_buy_cheapest_coupon(self, rng: random.Random, split: str) -> Draft | None:
        uid = rng.choice(self.users_by_split[split])
        if self.carts.get(uid):
            return None
        p = self.products[rng.choice(self.in_stock_by_split[split])]
        rng_range = self._price_range(p, rng)
        if rng_range is None:
            return None
        lo, hi = rng_range
        lines = [(p["category"], 1, p["price_cents"])]
        valid = []
        for code in self.coupons_by_split[split]:
            c = self.coupons[code]
            if not coupon_failures(c, lines) and coupon_discount(c["kind"], c["value"], p["price_cents"]) > 0:
                valid.append(c)
        if not valid:
            return None
        coupon = rng.choice(valid)
        total = p["price_cents"] - coupon_discount(coupon["kind"], coupon["value"], p["price_cents"])
        usable = self._usable_payments(uid, total)
        if not usable:
            return None
        pm = rng.choice(usable)
        args: dict[str, Any] = {"category": p["category"], "brand": p["brand"]}
        if lo:
            args["min_price"] = lo // 100
        args.update(max_price=hi // 100, in_stock=True, sort_by="price_asc", limit=5)
        turns = [
            [gold_call("search_products", **args), gold_call("get_user_profile", user_id=uid)],
            [gold_call("add_to_cart", user_id=uid, product_id=p["product_id"], quantity=1)],
            [gold_call("place_order", user_id=uid, payment_id=pm["payment_id"], coupon_code=coupon["code"])],
        ]
        try:
            results = self._run_write(turns)
        except ToolError:
            return None
        if results[0][0]["results"][0]["product_id"] != p["product_id"]:
            return None
        placed = results[-1][0]
        what = CATEGORY_PHRASES[p["category"]]
        span = f"between ${lo // 100} and ${hi // 100}" if lo else f"under ${hi // 100}"
        query = self._join(
            self._intro(rng),
            f"I'm {self.users[uid][1]} ({uid}). Please buy me the cheapest in-stock {what} from {p['brand']} priced "
            f"{span}, just one unit, using coupon {coupon['code']} and paying with {self._pay_phrase(pm)}.",
            self._distractor(rng, split),
            "Tell me which product you picked, the order number and the total.",
        )
        sub_query = (
            f"For user {uid}: find the cheapest in-stock {p['brand']} product in the {p['category']} category "
            f"priced {span}, add one unit to the cart and place the order with coupon {coupon['code']}, paid "
            f"with {their(self._pay_phrase(pm))}."
        )
        answer = (
            f"I ordered the {p['name']} ({p['product_id']}) with coupon {coupon['code']}, paid with {pm['label']}: "
            f"order {placed['order_id']}, total ${placed['total']}."
        )
        required = [
            {"add_to_cart": {"user_id": [uid], "product_id": [p["product_id"]], "quantity": opt(1)}},
            {
                "place_order": {
                    "user_id": [uid],
                    "payment_id": [pm["payment_id"]],
                    "coupon_code": [coupon["code"]],
                }
            },
        ]
        return Draft(query, sub_query, turns, answer, (p["product_id"], placed["order_id"], placed["total"]), required)

    def _t_latest_shipment(self, rng: random.Random, split: str) -> Draft | None:
        pool = self.orders_by.get((split, "shipped"), [])
        if not pool:
            return None
        uid = self.orders[rng.choice(pool)]["user_id"]
        turns = [[gold_call("list_user_orders", user_id=uid, status="shipped")]]
        listing = run_gold_turns(self.db, turns)[0][0]
        oid = listing["orders"][0]["order_id"]
        turns.append([gold_call("track_shipment", order_id=oid)])
        track = run_gold_turns(self.db, turns[1:])[0][0]
        latest = track["latest_event"]
        query = self._join(
            self._intro(rng),
            f"I'm {uid}. I have a package on the way but lost the confirmation email.",
            "Where is my most recent order that has shipped, and which carrier has it?",
            self._distractor(rng, split),
        )
        sub_query = (
            f"Find user {uid}'s most recent order with status shipped and report its carrier and latest tracking event."
        )
        answer = (
            f"Your most recent shipped order is {oid}; it is with {track['carrier']} (tracking number "
            f"{track['tracking_number']}) and the latest update is '{latest['description']}' in {latest['location']}."
        )
        facts = (oid, track["carrier"], latest["location"], track["tracking_number"])
        return Draft(query, sub_query, turns, answer, facts, [{"track_shipment": {"order_id": [oid]}}])


def task_source(seed: int, db: sqlite3.Connection) -> EcommerceTaskSource:
    """The e-commerce task source of ``seed``; ``db`` is the pristine ``build_db(seed)`` (only read)."""
    return EcommerceTaskSource(seed, db)
