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

Package layout
==============

``tools`` (``calculator``, prompt, :func:`domain`), ``pools`` (names and items by split), ``tasks``
(templates and the task source), ``gsm8k`` (the loader) and ``parts``. Everything listed in ``__all__``
is importable from ``joy_env.domains.math``.
"""

from joy_env.domains.math.gsm8k import GSM8KTaskSource, gsm8k_task_source, load_gsm8k
from joy_env.domains.math.parts import calc_part, discount_part
from joy_env.domains.math.pools import DISTRACTORS as DISTRACTORS
from joy_env.domains.math.pools import FEMALE as FEMALE
from joy_env.domains.math.pools import GADGETS as GADGETS
from joy_env.domains.math.pools import MALE as MALE
from joy_env.domains.math.pools import SCHOOLS as SCHOOLS
from joy_env.domains.math.pools import SHARE_ITEMS as SHARE_ITEMS
from joy_env.domains.math.pools import TANKS as TANKS
from joy_env.domains.math.pools import Steps as Steps
from joy_env.domains.math.pools import part as part
from joy_env.domains.math.tasks import SIZES, TEMPLATES, TEST_ONLY_TEMPLATES, MathTaskSource, task_source
from joy_env.domains.math.tasks import t_shopping_change as t_shopping_change
from joy_env.domains.math.tools import SYSTEM_PROMPT, TOOLS, calculator, domain

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
