"""BFCL v4 loader: Berkeley Function Calling Leaderboard entries as ``general`` tasks.

BFCL ships one JSON-lines file per category, ``BFCL_v4_<category>.json`` (each line
``{"id", "question": [[{"role", "content"}, ...]], "function": [function docs]}``), and the gold calls in
``possible_answer/BFCL_v4_<category>.json`` (lines ``{"id", "ground_truth": [{name: {arg: [acceptable
values]}}, ...]}``; ``""`` in a list: the argument may be omitted). Get the files from the data directory
of the ``bfcl-eval`` package (``pip install --no-deps bfcl-eval``; :func:`find_bfcl_data` finds it) or
from the BFCL repository; this project does not ship them.

Categories
==========

| Category                        | File ``BFCL_v4_<...>.json``     | Gold calls                            |
|---------------------------------|---------------------------------|---------------------------------------|
| `simple`                        | ``simple`` or ``simple_python`` | one call, one function offered        |
| `simple_python`                 | ``simple_python``               | same                                  |
| `multiple`                      | ``multiple``                    | one call, several functions offered   |
| `parallel`                      | ``parallel``                    | several calls of one function         |
| `parallel_multiple`             | ``parallel_multiple``           | several calls of several functions    |
| `live_simple`, `live_multiple`, | ``live_simple``... (same name)  | user-contributed entries, same shapes |
| `live_parallel`,                |                                 |                                       |
| `live_parallel_multiple`        |                                 |                                       |

The defaults are the four original AST categories. Java / JavaScript, irrelevance, multi-turn, memory
and web-search categories need other checkers and are not supported.

What a task looks like
======================

Each entry becomes one :class:`~joy_env.core.Task` with ``domain="general"``, ``query`` = the entry's
messages (a system message, if any, then the user message, separated by a blank line), ``answer_type=
"none"`` and a single ``general`` :class:`~joy_env.core.SubTask` with ``strict_calls=True`` (BFCL
semantics: exactly the gold calls, no extra ones), ``required_calls`` = the ground truth as it is, and one
gold turn holding every gold call (parallel calls share the turn); each argument takes the first
acceptable value that is neither ``""`` nor ``None`` and fits the schema, and optional arguments
without such a value but with ``""`` acceptable are left out. The entry's functions are converted to
JSON schema (:func:`convert_bfcl_schema`) and attached as ``task.tools["general"]``; the environment
executes them with a recorder. Function names keep their dots (``math.factorial``); the env matches
names exactly. ``meta = {"source": "bfcl", "bfcl_id", "category"}``; task ids are ``bfcl/<bfcl id>``
from :func:`load_bfcl` and ``bfcl/<split>/<index>`` from :func:`bfcl_task_source`.

Text is made ASCII (the environment's observation space): accents are stripped and typographic quotes
and dashes replaced, consistently in the query, the function docs and the ground truth. Entries whose
text still has other characters (Chinese, emoji...) are skipped, as are the few entries whose ground
truth does not fit their own schema (e.g. an argument the function does not declare) and the two whose
query is longer than :data:`MAX_QUERY` characters (the limit of ``call_agent``'s query); one warning
reports how many were skipped and why.

Type conversion
===============

BFCL ``dict`` -> ``object`` (``additionalProperties`` allowed when it lists no properties), ``float`` /
``double`` -> ``number``, ``tuple`` / ``list`` -> ``array``, ``long`` / ``short`` / ``byte`` -> ``integer``,
``bool`` -> ``boolean``, ``any`` (and unknown names) -> no type constraint; ``integer``, ``string``,
``boolean``, ``array``, ``number``, ``object`` stay. Kept keywords: ``description``, ``enum``, ``items``,
``properties``, ``required`` (only declared names), ``default`` (only when it fits the type),
``minimum``, ``maximum``, ``maxLength``, ``maxItems``; others (``optional``, ``format``...) are dropped.

Splits
======

:func:`bfcl_task_source` assigns each entry to a split by a SHA-256 hash of its id (80% train, 10%
validation, 10% test; independent of the seed and of the other categories loaded) and orders each split
by a shuffle seeded with ``seed``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import math
import numbers
import os
import random
import unicodedata
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from joy_env.core import SPLITS, SubTask, Task, TaskSourceBase
from joy_env.schema import validate

__all__ = [
    "DEFAULT_CATEGORIES",
    "MAX_QUERY",
    "VALID_CATEGORIES",
    "BFCLTaskSource",
    "bfcl_task_source",
    "convert_bfcl_schema",
    "find_bfcl_data",
    "load_bfcl",
]

DEFAULT_CATEGORIES: tuple[str, ...] = ("simple", "multiple", "parallel", "parallel_multiple")
VALID_CATEGORIES: tuple[str, ...] = (
    "simple",
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
)
MAX_QUERY = 2000
"""Entries whose query is longer are skipped (the ``call_agent`` query argument is limited to this)."""
_PREFIX = "BFCL_v4_"
# file stems tried in order for a category ("simple" was renamed "simple_python" in BFCL v4)
_STEMS: dict[str, tuple[str, ...]] = {"simple": ("simple", "simple_python")}

_TYPES: dict[str, str | None] = {
    "dict": "object",
    "object": "object",
    "HashMap": "object",
    "Hashtable": "object",
    "float": "number",
    "double": "number",
    "number": "number",
    "integer": "integer",
    "int": "integer",
    "long": "integer",
    "short": "integer",
    "byte": "integer",
    "Bigint": "integer",
    "string": "string",
    "str": "string",
    "String": "string",
    "char": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "Boolean": "boolean",
    "array": "array",
    "list": "array",
    "tuple": "array",
    "ArrayList": "array",
    "Array": "array",
    "Queue": "array",
    "Stack": "array",
    "any": None,
    "Any": None,
}
_KEEP_NUMERIC = ("minimum", "maximum", "maxLength", "maxItems")


# ------------------------------------------------------------------------------------------------ schema


def _convert(schema: Any) -> dict[str, Any]:
    """One BFCL parameter schema -> JSON schema (see the module docstring)."""
    if not isinstance(schema, Mapping):
        return {}
    out: dict[str, Any] = {}
    raw = schema.get("type")
    kind = _TYPES.get(raw) if isinstance(raw, str) else None
    if kind is not None:
        out["type"] = kind
    if isinstance(schema.get("description"), str):
        out["description"] = schema["description"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        out["enum"] = list(schema["enum"])
    for key in _KEEP_NUMERIC:
        value = schema.get(key)
        if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value):
            out[key] = value
    if kind in ("array", None) and isinstance(schema.get("items"), Mapping):
        out["items"] = _convert(schema["items"])
    if kind in ("object", None) and isinstance(schema.get("properties"), Mapping):
        out["properties"] = {str(k): _convert(v) for k, v in schema["properties"].items()}
        required = schema.get("required")
        if isinstance(required, list):
            out["required"] = [r for r in required if r in out["properties"]]
    if kind == "object" and not out.get("properties"):
        out.pop("properties", None)
        out.pop("required", None)
        out["additionalProperties"] = True
    if "default" in schema and _fits(schema["default"], out):
        out["default"] = schema["default"]
    return out


def _parameters(params: Any) -> dict[str, Any]:
    params = params if isinstance(params, Mapping) else {}
    props = params.get("properties") if isinstance(params.get("properties"), Mapping) else {}
    out_props = {str(k): _convert(v) for k, v in props.items()}
    required = params.get("required") if isinstance(params.get("required"), list) else []
    return {"type": "object", "properties": out_props, "required": [r for r in required if r in out_props]}


def convert_bfcl_schema(function_doc: dict) -> dict:
    """A BFCL function doc ``{"name", "description", "parameters"}`` -> an OpenAI tool schema
    ``{"type": "function", "function": {"name", "description", "parameters"}}``.

    The name is kept as is (dots included). Raises ValueError if ``function_doc`` has no string name.
    """
    if not isinstance(function_doc, Mapping) or not isinstance(function_doc.get("name"), str):
        raise ValueError(f"a BFCL function doc needs a string 'name', got {str(function_doc)[:120]!r}")
    description = function_doc.get("description")
    return {
        "type": "function",
        "function": {
            "name": function_doc["name"],
            "description": description if isinstance(description, str) else "",
            "parameters": _parameters(function_doc.get("parameters")),
        },
    }


def _fits(value: Any, schema: Mapping[str, Any]) -> bool:
    """Whether ``value`` satisfies a converted schema under the env's own argument rules."""
    return not validate(value, schema)


# ------------------------------------------------------------------------------------------- gold calls


class _Unfit(Exception):
    """The ground truth cannot be written as a call that fits the function's schema."""


_OMIT = object()


def _resolve(value: Any, schema: Mapping[str, Any]) -> Any:
    """A concrete value from a BFCL acceptable value (nested dicts map keys to acceptable lists)."""
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        required = schema.get("required") or ()
        out = {}
        for key, options in value.items():
            picked = _pick(options if isinstance(options, list) else [options], props.get(key, {}), key in required)
            if picked is not _OMIT:
                out[key] = picked
        return out
    if isinstance(value, list) and any(isinstance(v, dict) for v in value):
        items = schema.get("items") if isinstance(schema.get("items"), Mapping) else {}
        return [_resolve(v, items) for v in value]
    return value


def _pick(options: list[Any], schema: Mapping[str, Any], required: bool) -> Any:
    """The first acceptable value that is not ``""`` / ``None`` and fits ``schema``, else ``_OMIT`` if the
    argument is optional and ``""`` is acceptable; raises _Unfit otherwise (BFCL omits an argument only
    when ``""`` is listed; a ``None`` alone asks for an explicit null, which no converted type allows)."""
    for option in options:
        if option == "" or option is None:
            continue
        try:
            value = _resolve(option, schema)
        except _Unfit:
            continue
        if _fits(value, schema):
            return value
    if not required and "" in options:
        return _OMIT
    raise _Unfit(f"no acceptable value fits {json.dumps(schema)[:200]}: {json.dumps(options)[:200]}")


def _gold_call(name: str, args: Mapping[str, Any], functions: Mapping[str, dict]) -> dict[str, Any]:
    if name not in functions:
        raise _Unfit(f"the gold function {name!r} is not offered")
    params = functions[name]["function"]["parameters"]
    props, required = params["properties"], params["required"]
    arguments: dict[str, Any] = {}
    for arg, options in args.items():
        options = options if isinstance(options, list) else [options]
        if arg not in props:
            if "" in options:
                continue
            raise _Unfit(f"{name}: the gold argument {arg!r} is not declared")
        picked = _pick(options, props[arg], arg in required)
        if picked is not _OMIT:
            arguments[arg] = picked
    if not _fits(arguments, params):
        raise _Unfit(f"{name}: the gold arguments miss a required parameter or do not fit")
    return {"name": name, "arguments": arguments}


# ----------------------------------------------------------------------------------------------- ASCII

_ASCII_MAP = {
    0x2018: "'",
    0x2019: "'",
    0x201A: "'",
    0x201C: '"',
    0x201D: '"',
    0x201E: '"',
    0x2013: "-",
    0x2014: "-",
    0x2212: "-",
    0x00A0: " ",
    0x2026: "...",
    0x00D7: "x",
    0x00B0: " degrees",
    0x00DF: "ss",
    0x00E6: "ae",
    0x00C6: "AE",
    0x00F8: "o",
    0x00D8: "O",
    0x0153: "oe",
    0x0152: "OE",
    0x00B5: "u",
    0x03BC: "u",
}


class _NotAscii(Exception):
    pass


def _ascii(value: Any) -> Any:
    """``value`` with every string made ASCII; raises _NotAscii if some character has no ASCII form."""
    if isinstance(value, str):
        if value.isascii():
            return value
        text = unicodedata.normalize("NFKD", value.translate(_ASCII_MAP))
        text = "".join(ch for ch in text if not unicodedata.combining(ch))
        if not text.isascii():
            raise _NotAscii
        return text
    if isinstance(value, list):
        return [_ascii(v) for v in value]
    if isinstance(value, dict):
        return {_ascii(k): _ascii(v) for k, v in value.items()}
    return value


# ----------------------------------------------------------------------------------------------- files


def find_bfcl_data() -> Path | None:
    """The data directory of an installed ``bfcl_eval`` package, or ``None``.

    Uses :func:`importlib.util.find_spec`, so nothing of ``bfcl_eval`` (whose checker has heavy
    dependencies) is imported.
    """
    try:
        spec = importlib.util.find_spec("bfcl_eval")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        data = Path(location) / "data"
        if data.is_dir() and any(data.glob(f"{_PREFIX}*.json")):
            return data
    return None


def _expected(category: str) -> str:
    return " or ".join(f"{_PREFIX}{stem}.json" for stem in _STEMS.get(category, (category,)))


def _check_categories(categories: Sequence[str] | str) -> tuple[str, ...]:
    cats = (categories,) if isinstance(categories, str) else tuple(categories)
    if not cats:
        raise ValueError(f"no BFCL category given; valid categories: {', '.join(VALID_CATEGORIES)}")
    for c in cats:
        if c not in VALID_CATEGORIES:
            raise ValueError(f"unknown BFCL category {c!r}; valid categories: {', '.join(VALID_CATEGORIES)}")
    return tuple(dict.fromkeys(cats))


def _files(root: Path, category: str) -> tuple[Path, Path]:
    for stem in _STEMS.get(category, (category,)):
        question = root / f"{_PREFIX}{stem}.json"
        if question.is_file():
            answer = root / "possible_answer" / question.name
            if not answer.is_file():
                raise FileNotFoundError(
                    f"BFCL category {category!r}: found {question} but not its possible answers {answer} "
                    f"(expected possible_answer/{question.name} under {root})"
                )
            return question, answer
    raise FileNotFoundError(
        f"BFCL category {category!r}: no {_expected(category)} in {root} (each category needs "
        f"{_PREFIX}<category>.json and possible_answer/{_PREFIX}<category>.json; valid categories: "
        f"{', '.join(VALID_CATEGORIES)})"
    )


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    records = []
    with path.open(encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
            if not isinstance(record, dict) or not isinstance(record.get("id"), str):
                raise ValueError(f"{path}:{lineno}: expected a JSON object with a string 'id'")
            records.append(record)
    return records


def _query(entry: dict[str, Any], where: str) -> str:
    question = entry.get("question")
    if not isinstance(question, list) or not question:
        raise ValueError(f"{where}: 'question' must be a non-empty list of message lists")
    messages = [m for turn in question for m in (turn if isinstance(turn, list) else [turn])]
    parts = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "system"]
    parts += [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    parts = [p.strip() for p in parts if isinstance(p, str) and p.strip()]
    if not parts:
        raise ValueError(f"{where}: no user message")
    return "\n\n".join(parts)


def _entry_task(
    entry: dict[str, Any],
    answers: dict[str, Any],
    question_file: Path,
    answer_file: Path,
    category: str,
    ascii_only: bool,
) -> tuple[Task | None, str]:
    """One BFCL entry as a task, or ``None`` and why it is skipped (``too_long``, ``not_ascii``, ``unfit``); a
    ``ValueError`` for an entry that breaks BFCL's format."""
    bfcl_id = entry["id"]
    where = f"{question_file} (id {bfcl_id})"
    if bfcl_id not in answers:
        raise ValueError(f"{where}: no ground truth with this id in {answer_file}")
    truth = answers[bfcl_id].get("ground_truth")
    docs = entry.get("function")
    if not isinstance(truth, list) or not all(isinstance(c, dict) and len(c) == 1 for c in truth):
        raise ValueError(f"{answer_file} (id {bfcl_id}): 'ground_truth' must be a list of {{name: args}}")
    if not isinstance(docs, list):
        raise ValueError(f"{where}: 'function' must be a list of function docs")
    query = _query(entry, where)
    if len(query) > MAX_QUERY:
        return None, "too_long"
    if ascii_only:
        try:
            query, docs, truth = _ascii(query), _ascii(docs), _ascii(truth)
        except _NotAscii:
            return None, "not_ascii"
    schemas = tuple(convert_bfcl_schema(d) for d in docs)
    functions = {s["function"]["name"]: s for s in schemas}
    try:
        calls = tuple(_gold_call(name, args, functions) for c in truth for name, args in c.items())
    except _Unfit:
        return None, "unfit"
    sub = SubTask(
        agent="general",
        query=query,
        turns=(calls,) if calls else (),
        answer="done",
        required_calls=tuple(truth),
        strict_calls=True,
    )
    task = Task(
        task_id=f"bfcl/{bfcl_id}",
        domain="general",
        query=query,
        answer="done",
        answer_type="none",
        route=(sub,),
        template=f"bfcl_{category}",
        tools={"general": schemas},
        meta={"source": "bfcl", "bfcl_id": bfcl_id, "category": category},
    )
    return task, ""


def load_bfcl(
    path: str | os.PathLike,
    categories: Sequence[str] = DEFAULT_CATEGORIES,
    *,
    ascii_only: bool = True,
) -> list[Task]:
    """Read BFCL v4 entries of ``categories`` from the directory ``path`` as tasks (see the module doc).

    Args:
        path: the directory holding ``BFCL_v4_<category>.json`` and ``possible_answer/``.
        categories: categories to load, in order (a single name is accepted too).
        ascii_only: make text ASCII and skip entries that cannot be (the env's text is printable
            ASCII); ``False`` keeps the text unchanged.

    Raises:
        FileNotFoundError: ``path`` is not a directory, or a category's files are missing (the message
            names the path and the files expected).
        ValueError: an unknown category (the message lists the valid ones), a line that is not JSON,
            an entry without a user message, or an entry without possible answer.
    """
    cats = _check_categories(categories)
    root = Path(path)
    if not root.is_dir():
        expected = ", ".join(_expected(c) for c in cats)
        raise FileNotFoundError(
            f"BFCL data directory not found: {root} (expected a directory with {expected} and the same "
            "names under possible_answer/; e.g. the data directory of `pip install --no-deps bfcl-eval`)"
        )
    tasks: list[Task] = []
    unfit: list[str] = []
    not_ascii: list[str] = []
    too_long: list[str] = []
    loaded: set[Path] = set()
    for category in cats:
        question_file, answer_file = _files(root, category)
        if question_file in loaded:  # "simple" and "simple_python" name the same file
            continue
        loaded.add(question_file)
        answers = {r["id"]: r for r in _read_jsonl(answer_file)}
        for entry in _read_jsonl(question_file):
            task, skipped = _entry_task(entry, answers, question_file, answer_file, category, ascii_only)
            if task is not None:
                tasks.append(task)
            else:
                {"unfit": unfit, "not_ascii": not_ascii, "too_long": too_long}[skipped].append(entry["id"])
    if unfit or not_ascii or too_long:
        warnings.warn(
            f"load_bfcl: skipped {len(unfit)} entries whose ground truth does not fit their schema "
            f"{unfit[:5]}, {len(not_ascii)} entries with non-ASCII text {not_ascii[:5]} and "
            f"{len(too_long)} entries longer than {MAX_QUERY} characters {too_long[:5]}",
            stacklevel=2,
        )
    return tasks


# ------------------------------------------------------------------------------------------------ splits


def _bucket(bfcl_id: str) -> str:
    h = int.from_bytes(hashlib.sha256(bfcl_id.encode("utf-8")).digest()[:8], "big") % 10
    return "train" if h < 8 else ("validation" if h == 8 else "test")


class BFCLTaskSource(TaskSourceBase):
    """BFCL tasks split 80/10/10 by a hash of the BFCL id; ``seed`` shuffles the order within a split."""

    def __init__(self, tasks: Sequence[Task], seed: int = 0) -> None:
        self.seed = seed
        self._tasks: dict[str, list[Task]] = {s: [] for s in SPLITS}
        for t in tasks:
            self._tasks[_bucket(str(t.meta.get("bfcl_id", t.task_id)))].append(t)
        for split, items in self._tasks.items():
            random.Random(f"{seed}/bfcl/{split}").shuffle(items)
        self.sizes = {split: len(items) for split, items in self._tasks.items()}

    def build_task(self, split: str, index: int) -> Task:
        return dataclasses.replace(self._tasks[split][index], task_id=f"bfcl/{split}/{index}")


def bfcl_task_source(
    path: str | os.PathLike | None = None,
    categories: Sequence[str] = DEFAULT_CATEGORIES,
    seed: int = 0,
) -> BFCLTaskSource:
    """A task source over BFCL files in ``path`` (default: :func:`find_bfcl_data`); see :func:`load_bfcl`."""
    if path is None:
        path = find_bfcl_data()
        if path is None:
            raise FileNotFoundError(
                "no BFCL data: pass path=DIR with the BFCL_v4_<category>.json files and possible_answer/, "
                "or install the package that ships them (`pip install --no-deps bfcl-eval`)"
            )
    return BFCLTaskSource(load_bfcl(path, categories), seed)
