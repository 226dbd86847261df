"""tau2's retail tasks as JoyAgents tasks: the customer's request (:func:`render_request`), the gold answer,
the task source in tau2's splits and the env spec of ``source="tau2"``, all from :mod:`joy_env.domains.tau2`
(see :mod:`joy_env.domains.tau2.retail`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from joy_env.domains.tau2 import tasks as generic
from joy_env.domains.tau2.retail.data import RetailData
from joy_env.domains.tau2.retail.schemas import WRITE_TOOLS
from joy_env.domains.tau2.spec import retail_alias_spec
from joy_env.domains.tau2.tasks import Tau2TaskSource, render_request
from joy_env.spec import EnvSpec

__all__ = ["TASK_PREFIX", "Tau2TaskSource", "env_spec", "gold_answer", "render_request", "task_source"]

TASK_PREFIX = generic.task_prefix("retail")


def gold_answer(task: Mapping[str, Any]) -> str:
    """The expert's final answer to a tau2 retail task: the writes done, then the ``communicate_info`` verbatim
    (:func:`joy_env.domains.tau2.tasks.gold_answer`)."""
    return generic.gold_answer(task, WRITE_TOOLS)


def task_source(data: RetailData) -> Tau2TaskSource:
    """The task source over ``data`` (tau2's splits; ids ``"tau2/retail/<tau2 id>"``)."""
    return Tau2TaskSource("retail", {str(t["id"]): t for t in data.tasks}, data.splits, WRITE_TOOLS)


def env_spec(path: str | os.PathLike[str] | None = None) -> EnvSpec:
    """The :class:`~joy_env.spec.EnvSpec` of ``joy/ecommerce-v0`` with ``source="tau2"`` (one per data
    directory): ``joy/tau2-v0``'s retail domain under the shop's env id
    (:func:`joy_env.domains.tau2.spec.retail_alias_spec`)."""
    return retail_alias_spec(path)
