"""A complete custom domain: a lending library with its own database, tools and tasks.

Register it and play it like a built-in env id::

    import joy_env
    from library_domain import SPEC
    joy_env.register_env(SPEC)
    env = joy_env.make("example/library-v0", split="test")

What a custom domain provides:

1. **Tools**: ``joy_env.Tool(name, description, parameters=JSON schema, fn=fn, writes=...)`` where
   ``fn(ctx, **arguments)`` gets validated arguments and ``ctx.db`` (the live SQLite connection), returns
   JSON-serialisable data and raises ``joy_env.ToolError`` for refusals. Use ``?`` placeholders only.
2. **A database** (optional): ``build_db(seed) -> sqlite3.Connection`` (in memory) and ``audit``, the
   primary keys of the tables tools write, so the env can compare final states with the gold one cheaply.
3. **Tasks with gold solutions**: an object with ``size(split)`` and ``task(split, index) -> joy_env.Task``
   (subclassing ``joy_env.TaskSourceBase`` gives both, with the argument checks: set ``sizes`` and write
   ``build_task(split, index)``); each task lists the route (``SubTask`` per sub-agent call: sub-query,
   tool-call turns, answer, required calls) and the master's final answer. The env's expert replays it; the
   reward scores against it.
4. An ``EnvSpec(env_id, domains, tasks)`` passed to ``joy_env.register_env``.
"""

from __future__ import annotations

import random
import sqlite3

from joy_env import Domain, EnvSpec, SubTask, Task, TaskSourceBase, Tool, ToolContext, ToolError

AUTHORS = [
    "Ada Brook",
    "Ben Carver",
    "Cleo Dunn",
    "Dev Ellis",
    "Eva Frost",
    "Finn Gale",
    "Gia Hart",
    "Hugo Ives",
]
WORDS = ["River", "Stone", "Light", "Garden", "Winter", "Harbor", "Echo", "Maple", "Signal", "Orbit"]
MAX_LOANS = 3


def build_db(seed: int) -> sqlite3.Connection:
    """Books, members and loans, generated from ``seed``."""
    rng = random.Random(seed)
    conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    conn.executescript(
        """
        CREATE TABLE books (book_id TEXT PRIMARY KEY, title TEXT, author TEXT, year INTEGER, copies INTEGER);
        CREATE TABLE members (member_id TEXT PRIMARY KEY, name TEXT);
        CREATE TABLE loans (member_id TEXT, book_id TEXT, PRIMARY KEY (member_id, book_id));
        """
    )
    for i in range(120):
        title = f"The {rng.choice(WORDS)} {rng.choice(WORDS)}"
        conn.execute(
            "INSERT INTO books VALUES (?, ?, ?, ?, ?)",
            (f"B{100 + i}", title, AUTHORS[i % len(AUTHORS)], 1900 + i, rng.randint(0, 3)),
        )
    for i in range(60):
        conn.execute("INSERT INTO members VALUES (?, ?)", (f"M{500 + i}", f"Member {i}"))
    return conn


def _search(ctx: ToolContext, author: str, year: int | None = None) -> list[dict]:
    sql, args = "SELECT book_id, title, year, copies FROM books WHERE author = ?", [author]
    if year is not None:
        sql, args = sql + " AND year = ?", args + [year]
    rows = ctx.db.execute(sql + " ORDER BY book_id LIMIT 10", args).fetchall()
    return [{"book_id": b, "title": t, "year": y, "copies_available": c} for b, t, y, c in rows]


def _borrow(ctx: ToolContext, member_id: str, book_id: str) -> dict:
    db = ctx.db
    if db.execute("SELECT 1 FROM members WHERE member_id = ?", (member_id,)).fetchone() is None:
        raise ToolError(f"unknown member {member_id!r}")
    row = db.execute("SELECT copies FROM books WHERE book_id = ?", (book_id,)).fetchone()
    if row is None:
        raise ToolError(f"unknown book {book_id!r}")
    if row[0] < 1:
        raise ToolError(f"no copy of {book_id} is available")
    if db.execute("SELECT COUNT(*) FROM loans WHERE member_id = ?", (member_id,)).fetchone()[0] >= MAX_LOANS:
        raise ToolError(f"member {member_id} already has {MAX_LOANS} loans")
    if db.execute("SELECT 1 FROM loans WHERE member_id = ? AND book_id = ?", (member_id, book_id)).fetchone():
        raise ToolError(f"member {member_id} already borrowed {book_id}")
    db.execute("BEGIN")
    db.execute("UPDATE books SET copies = copies - 1 WHERE book_id = ?", (book_id,))
    db.execute("INSERT INTO loans VALUES (?, ?)", (member_id, book_id))
    db.execute("COMMIT")
    return {"status": "borrowed", "member_id": member_id, "book_id": book_id}


TOOLS = (
    Tool(
        "search_books",
        "Find books by author, optionally by publication year.",
        {
            "type": "object",
            "properties": {"author": {"type": "string"}, "year": {"type": "integer"}},
            "required": ["author"],
        },
        _search,
    ),
    Tool(
        "borrow_book",
        "Lend one copy of a book to a member.",
        {
            "type": "object",
            "properties": {"member_id": {"type": "string"}, "book_id": {"type": "string"}},
            "required": ["member_id", "book_id"],
        },
        _borrow,
        writes=True,
    ),
)

LIBRARIAN = Domain(
    agent="librarian",
    tools=TOOLS,
    build_db=build_db,
    audit={"books": ("book_id",), "loans": ("member_id", "book_id")},
    system_prompt="You are the librarian agent: find books and lend them with your tools.",
)


class LibraryTasks(TaskSourceBase):
    """Borrowing tasks; books are split by id so test books never appear in train."""

    sizes = {"train": 400, "validation": 50, "test": 50}

    def __init__(self, seed: int, db: sqlite3.Connection) -> None:
        rows = db.execute("SELECT book_id, author, year FROM books WHERE copies > 0 ORDER BY book_id").fetchall()
        self.seed = seed
        self.books = {
            "train": [r for r in rows if int(r[0][1:]) % 10 < 8],
            "validation": [r for r in rows if int(r[0][1:]) % 10 == 8],
            "test": [r for r in rows if int(r[0][1:]) % 10 == 9],
        }

    def build_task(self, split: str, index: int) -> Task:
        rng = random.Random(f"{self.seed}/{split}/{index}")
        book_id, author, year = rng.choice(self.books[split])
        member = f"M{500 + rng.randrange(60)}"
        query = f"I am member {member}. Please lend me the book {author} published in {year}."
        search = {"name": "search_books", "arguments": {"author": author, "year": year}}
        borrow = {"name": "borrow_book", "arguments": {"member_id": member, "book_id": book_id}}
        sub = SubTask(
            agent="librarian",
            query=query,
            turns=((search,), (borrow,)),
            answer=f"Book {book_id} is now borrowed by {member}.",
            required_calls=({"borrow_book": {"member_id": [member], "book_id": [book_id]}},),
        )
        return Task(
            task_id=f"library/{split}/{index}",
            domain="library",
            query=query,
            answer=f"Done: {book_id} is borrowed by {member}.",
            answer_type="facts",
            facts=(book_id, member),
            route=(sub,),
            template="borrow",
        )


def library_tasks(seed: int, dbs: dict[str, sqlite3.Connection]) -> LibraryTasks:
    """Task-source factory: ``dbs`` holds each domain's pristine database by agent name."""
    return LibraryTasks(seed, dbs["librarian"])


SPEC = EnvSpec("example/library-v0", (LIBRARIAN,), library_tasks, description="a lending library")
