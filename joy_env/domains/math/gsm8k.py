"""The GSM8K loader: a jsonl file of ``{"question", "answer"}`` lines as a task source."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import re
import unicodedata
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from joy_env.core import SPLITS, SubTask, Task, TaskSourceBase
from joy_env.safe_math import SafeMathError, evaluate_exact, format_number, parse_number

_ANNOTATION = re.compile(r"<<([^<>=]*)=([^<>]*)>>")
_FINAL = re.compile(r"####\s*(.*?)\s*$", re.S)


def ascii_text(text: str) -> str:
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
            if not isinstance(record, dict) or not all(isinstance(record.get(k), str) for k in ("question", "answer")):
                raise ValueError(f"{where}: expected an object with string fields 'question' and 'answer'")
            match = _FINAL.search(record["answer"])
            if match is None:
                raise ValueError(f"{where}: the answer does not end with '#### N'")
            try:
                gold = format_number(parse_number(match.group(1)))
            except SafeMathError:
                bad = match.group(1)[:40]
                raise ValueError(f"{where}: the final answer {bad!r} is not a number") from None
            question = ascii_text(record["question"].strip())
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


class GSM8KTaskSource(TaskSourceBase):
    """GSM8K lines split 80/10/10 by a hash of the question (stable across seeds and file orders)."""

    def __init__(self, tasks: Sequence[Task], seed: int = 0) -> None:
        self.seed = seed
        self._tasks: dict[str, list[Task]] = {s: [] for s in SPLITS}
        for t in tasks:
            self._tasks[_bucket(t.query)].append(t)
        for split, items in self._tasks.items():
            random.Random(f"{seed}/gsm8k/{split}").shuffle(items)
        self.sizes = {split: len(items) for split, items in self._tasks.items()}

    def build_task(self, split: str, index: int) -> Task:
        return dataclasses.replace(self._tasks[split][int(index)], task_id=f"gsm8k/{split}/{index}")


def gsm8k_task_source(path: str | Path, seed: int = 0) -> GSM8KTaskSource:
    """A task source over a GSM8K jsonl file; ``seed`` shuffles the order within each split."""
    return GSM8KTaskSource(load_gsm8k(path), seed)
