"""The ``search_kb`` tool, its schema, the agent's system prompt, the QA database and :func:`domain`."""

from __future__ import annotations

import numbers
import sqlite3

from joy_env.core import Domain, Tool, ToolContext, ToolError
from joy_env.domains.qa.world import search

DEFAULT_SEED = 0
MAX_TOP_K = 10


def _seed_of(ctx: ToolContext | None) -> int:
    db = getattr(ctx, "db", None)
    if db is None:
        return DEFAULT_SEED
    try:
        row = db.execute("SELECT seed FROM kb_info").fetchone()
    except sqlite3.Error:
        return DEFAULT_SEED
    return int(row[0]) if row and isinstance(row[0], int) else DEFAULT_SEED


def search_kb(ctx: ToolContext, query: str, top_k: int = 3) -> list[dict[str, str]]:
    """Search the shop's knowledge base; the ``top_k`` best passages ``{"id", "title", "text"}``."""
    if not isinstance(query, str) or not query.strip():
        raise ToolError("search_kb: query must be a non-empty string, e.g. 'return window for shoes'")
    if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or not 1 <= top_k <= MAX_TOP_K:
        raise ToolError(f"search_kb: top_k must be an integer from 1 to {MAX_TOP_K}, got {top_k!r}")
    return search(_seed_of(ctx), query[:300], int(top_k))


TOOLS: tuple[Tool, ...] = (
    Tool(
        name="search_kb",
        description=(
            "Search the knowledge base (shop policies: returns, shipping, warranty, membership, payment; and "
            "general facts). Returns the best matching passages with id, title and text."
        ),
        parameters={
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "maxLength": 300,
                    "description": "keywords naming the entity and what you want to know",
                },
                "top_k": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_TOP_K,
                    "default": 3,
                    "description": "number of passages to return",
                },
            },
            "required": ["query"],
        },
        fn=search_kb,
    ),
)

SYSTEM_PROMPT = (
    "You are the QA agent of an online shop. You answer questions about the shop's policies (returns, "
    "shipping, warranty, membership, payment) and general knowledge questions, using only the knowledge "
    "base: call search_kb with keywords that name the entity and what is asked. If the question needs a "
    "fact about an entity found in a first passage, search again for that entity. Passages about similar "
    "things look alike: read them carefully. Answer with the shortest exact phrase, e.g. "
    "<answer>30 days</answer>."
)


def build_db(seed: int) -> sqlite3.Connection:
    """The domain's database: just ``kb_info(seed)``, which tells ``search_kb`` which KB to search."""
    conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    conn.execute("CREATE TABLE kb_info (seed INTEGER NOT NULL)")
    conn.execute("INSERT INTO kb_info (seed) VALUES (?)", (int(seed),))
    return conn


def domain() -> Domain:
    """The QA sub-agent's tool, database (the KB seed) and prompt."""
    return Domain(agent="qa", tools=TOOLS, build_db=build_db, system_prompt=SYSTEM_PROMPT)
