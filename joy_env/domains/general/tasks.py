"""The generated general task source."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from joy_env.core import SubTask, Task, TaskSourceBase
from joy_env.domains.general.splits import split_pools
from joy_env.domains.general.templates import TEMPLATES, TEST_ONLY_TEMPLATES, Plan, Retry

SIZES = {"train": 20000, "validation": 2000, "test": 2000}


class GeneralTaskSource(TaskSourceBase):
    """Generated general tasks (see :mod:`joy_env.domains.general`); deterministic in (seed, split, index)."""

    def __init__(self, seed: int = 0, sizes: Mapping[str, int] | None = None) -> None:
        self.seed = seed
        self.sizes = dict(SIZES if sizes is None else sizes)

    def build_task(self, split: str, index: int) -> Task:
        rng = random.Random(f"{self.seed}/general/{split}/{index}")
        pool = split_pools()[split]
        names = [n for n in TEMPLATES if split == "test" or n not in TEST_ONLY_TEMPLATES]
        template = rng.choice(names)
        for _ in range(50):
            plan = Plan()
            try:
                query, answer, facts = TEMPLATES[template](rng, pool, plan)
                break
            except Retry:
                continue
        else:  # pragma: no cover - every template fits within a few draws
            raise RuntimeError(f"template {template} found no fitting entities for {split}/{index}")
        sub = SubTask(
            agent="general",
            query=query,
            turns=tuple(plan.turns),
            answer=answer,
            required_calls=tuple(plan.required),
        )
        return Task(
            task_id=f"general/{split}/{int(index)}",
            domain="general",
            query=query,
            answer=answer,
            answer_type="facts",
            route=(sub,),
            facts=facts,
            template=template,
            meta={
                "test_only_template": template in TEST_ONLY_TEMPLATES,
                "calls": len(plan.required),
                "parallel": any(len(t) > 1 for t in plan.turns),
            },
        )


def task_source(seed: int, db: Any = None) -> GeneralTaskSource:
    """The generated general tasks for ``seed`` (``db`` is unused: the domain has no database)."""
    return GeneralTaskSource(seed)
