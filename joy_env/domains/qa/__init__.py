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

Package layout
==============

``retrieval`` (BM25), ``world`` (the generated policies and entities, the KB), ``tools`` (``search_kb``,
prompt, database, :func:`domain`), ``tasks`` (templates and the task source) and ``parts``. Everything
listed in ``__all__`` is importable from ``joy_env.domains.qa``.
"""

from joy_env.domains.qa.parts import policy_part
from joy_env.domains.qa.tasks import MULTI_HOP_TEMPLATES, SIZES, QATaskSource, task_source
from joy_env.domains.qa.tools import DEFAULT_SEED as DEFAULT_SEED
from joy_env.domains.qa.tools import SYSTEM_PROMPT, TOOLS, build_db, domain, search_kb
from joy_env.domains.qa.world import CATEGORIES, kb, policy_facts, search
from joy_env.domains.qa.world import TOPICS as TOPICS
from joy_env.domains.qa.world import world_of as world_of

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
