"""The mixed domain (``joy/mixed-v0``): every single-domain task plus collaborative tasks.

Of every 13 consecutive task indices, 10 are single-sub-agent tasks drawn in turn from the
ecommerce, general, qa and math sources and 3 are **collaborative**: they need two or three sub-agents,
and the master must pass what one returns into the query of the next (the paper's master data mixes
single and collaborative calls about 10:3).

==================================  =======================================  ==========  ============
Template                            Route                                    Answer      Splits
==================================  =======================================  ==========  ============
``discounted_purchase``             ecommerce (unit price) -> math (total)   number      all
``price_in_currency``               ecommerce (unit price) -> general (FX)   number      all
``order_return_policy``             ecommerce (order) -> qa (return window)  facts       all
``price_and_shipping``              ecommerce (unit price) -> qa (shipping)  facts       all
``weather_fahrenheit``              general (forecast) -> math (C to F)      number      all
``order_total_in_currency``         ecommerce (order) -> general (FX)        number      test only
``discounted_purchase_in_currency`` ecommerce -> math -> general             number      test only
==================================  =======================================  ==========  ============

The two test-only templates combine parts that never appear together in train, so the test split
measures compositional generalisation. Entities follow the split partitions of each domain.
Single-domain tasks keep their ``domain`` (``ecommerce``, ...); collaborative ones have domain
``collaborative``.
"""

from __future__ import annotations

import random
import sqlite3
from dataclasses import replace

from joy_env.core import SPLITS, SubTask, Task, TaskSourceBase

SINGLE_PER_BLOCK = 10
COLLAB_PER_BLOCK = 3
BLOCK = SINGLE_PER_BLOCK + COLLAB_PER_BLOCK
SINGLE_DOMAINS = ("ecommerce", "general", "qa", "math")
TRAIN_TEMPLATES = (
    "discounted_purchase",
    "price_in_currency",
    "order_return_policy",
    "price_and_shipping",
    "weather_fahrenheit",
)
TEST_ONLY_TEMPLATES = ("order_total_in_currency", "discounted_purchase_in_currency")


def _money(x: float) -> str:
    return f"{x:.2f}"


class MixedTasks(TaskSourceBase):
    """Task source of ``joy/mixed-v0`` (see the module documentation)."""

    def __init__(self, seed: int, db: sqlite3.Connection) -> None:
        from joy_env.domains import ecommerce, general, math, qa

        self.seed = seed
        self.db = db
        self.ecommerce, self.general, self.qa, self.math = ecommerce, general, qa, math
        self.sources = {
            "ecommerce": ecommerce.task_source(seed, db),
            "general": general.task_source(seed),
            "qa": qa.task_source(seed),
            "math": math.task_source(seed),
        }
        self.sizes = {s: min(src.size(s) for src in self.sources.values()) for s in SPLITS}

    def build_task(self, split: str, index: int) -> Task:
        block, pos = divmod(index, BLOCK)
        task_id = f"mixed/{split}/{index}"
        if pos < SINGLE_PER_BLOCK:
            single = block * SINGLE_PER_BLOCK + pos
            domain = SINGLE_DOMAINS[single % len(SINGLE_DOMAINS)]
            src = self.sources[domain]
            inner = src.task(split, (single // len(SINGLE_DOMAINS)) % src.size(split))
            return replace(inner, task_id=task_id, meta={**inner.meta, "source_task_id": inner.task_id})
        rng = random.Random(f"{self.seed}/mixed/{split}/{index}")
        templates = TRAIN_TEMPLATES + (TEST_ONLY_TEMPLATES if split == "test" else ())
        collab = block * COLLAB_PER_BLOCK + pos - SINGLE_PER_BLOCK
        template = templates[collab % len(templates)]
        return getattr(self, "_" + template)(rng, split, task_id)

    # ------------------------------------------------------------------ templates

    def _task(
        self,
        task_id: str,
        template: str,
        query: str,
        route: tuple[SubTask, ...],
        answer: str,
        answer_type: str,
        facts: tuple[str, ...] = (),
    ) -> Task:
        return Task(
            task_id=task_id,
            domain="collaborative",
            query=query,
            answer=answer,
            answer_type=answer_type,
            route=route,
            facts=facts,
            template=template,
            meta={"agents": [s.agent for s in route], "test_only_template": template in TEST_ONLY_TEMPLATES},
        )

    def _discounted_purchase(self, rng: random.Random, split: str, task_id: str) -> Task:
        price_sub, p = self.ecommerce.price_part(self.db, rng, split)
        qty = rng.randint(2, 6)
        calc_sub, d = self.math.discount_part(rng, split, p["price"], qty)
        ship = f" plus ${_money(d['shipping'])} shipping" if d.get("shipping") else ""
        query = (
            f"I want to buy {qty} units of the {p['product_name']}. With my {d['percent']}% discount{ship}, "
            "how much will I pay in total? Round to the nearest cent."
        )
        total = _money(d["total"])
        return self._task(
            task_id, "discounted_purchase", query, (price_sub, calc_sub), f"You will pay ${total} in total.", "math"
        )

    def _price_in_currency(self, rng: random.Random, split: str, task_id: str) -> Task:
        price_sub, p = self.ecommerce.price_part(self.db, rng, split)
        qty = rng.randint(1, 4)
        fx_sub, c = self.general.currency_part(rng, split, round(p["price"] * qty, 2), "USD")
        query = (
            f"What would {qty} of the {p['product_name']} cost in {c['to_currency']}? "
            "Use today's exchange rate and round to 2 decimals."
        )
        converted = _money(c["converted"])
        return self._task(
            task_id, "price_in_currency", query, (price_sub, fx_sub), f"That is {converted} {c['to_currency']}.", "math"
        )

    def _order_return_policy(self, rng: random.Random, split: str, task_id: str) -> Task:
        order_sub, o = self.ecommerce.order_part(self.db, rng, split)
        policy_sub, pol = self.qa.policy_part(rng, split, "returns", o["category"], seed=self.seed)
        query = (
            f"I'm user {o['user_id']}. What is the status of my order {o['order_id']}, and how long is the "
            f"return window for {o['category']} items?"
        )
        answer = f"Order {o['order_id']} is {o['status']}; the return window for {o['category']} is {pol['answer']}."
        return self._task(
            task_id,
            "order_return_policy",
            query,
            (order_sub, policy_sub),
            answer,
            "facts",
            (o["order_id"], o["status"], pol["answer"]),
        )

    def _price_and_shipping(self, rng: random.Random, split: str, task_id: str) -> Task:
        price_sub, p = self.ecommerce.price_part(self.db, rng, split)
        policy_sub, pol = self.qa.policy_part(rng, split, "shipping", seed=self.seed)
        question = pol["question"].rstrip("?. ")
        query = f"How much is the {p['product_name']}? Also, {question[0].lower() + question[1:]}?"
        price = _money(p["price"])
        answer = f"The {p['product_name']} costs ${price}. {pol['answer']}."
        return self._task(
            task_id, "price_and_shipping", query, (price_sub, policy_sub), answer, "facts", (price, pol["answer"])
        )

    def _weather_fahrenheit(self, rng: random.Random, split: str, task_id: str) -> Task:
        weather_sub, w = self.general.weather_part(rng, split)
        high = w["high_c"]
        calc_sub, r = self.math.calc_part(
            rng, split, f"Convert {high} degrees Celsius to Fahrenheit.", f"{high} * 9 / 5 + 32"
        )
        query = f"What will the high temperature be in {w['city']} on {w['date']}, in degrees Fahrenheit?"
        return self._task(
            task_id, "weather_fahrenheit", query, (weather_sub, calc_sub), f"The high will be {r['result']} F.", "math"
        )

    def _order_total_in_currency(self, rng: random.Random, split: str, task_id: str) -> Task:
        order_sub, o = self.ecommerce.order_part(self.db, rng, split)
        fx_sub, c = self.general.currency_part(rng, split, o["total"], "USD")
        query = (
            f"I'm user {o['user_id']}. How much did my order {o['order_id']} cost in {c['to_currency']}? "
            "Round to 2 decimals."
        )
        converted = _money(c["converted"])
        return self._task(
            task_id,
            "order_total_in_currency",
            query,
            (order_sub, fx_sub),
            f"Order {o['order_id']} cost {converted} {c['to_currency']}.",
            "math",
        )

    def _discounted_purchase_in_currency(self, rng: random.Random, split: str, task_id: str) -> Task:
        price_sub, p = self.ecommerce.price_part(self.db, rng, split)
        qty = rng.randint(2, 5)
        calc_sub, d = self.math.discount_part(rng, split, p["price"], qty)
        fx_sub, c = self.general.currency_part(rng, split, round(d["total"], 2), "USD")
        ship = f" plus ${_money(d['shipping'])} shipping" if d.get("shipping") else ""
        query = (
            f"I want {qty} units of the {p['product_name']} with my {d['percent']}% discount{ship}. "
            f"What is the total in {c['to_currency']}, rounded to 2 decimals?"
        )
        converted = _money(c["converted"])
        return self._task(
            task_id,
            "discounted_purchase_in_currency",
            query,
            (price_sub, calc_sub, fx_sub),
            f"The total is {converted} {c['to_currency']}.",
            "math",
        )


def task_source(seed: int, db: sqlite3.Connection) -> MixedTasks:
    """The task source of ``joy/mixed-v0``; ``db`` is the pristine shop database."""
    return MixedTasks(seed, db)
