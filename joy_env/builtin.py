"""The built-in environment ids.

=====================  ==========================================================================
Id                     Tasks
=====================  ==========================================================================
``joy/ecommerce-v0``   shop tasks: search, compare, orders, shipments, carts, coupons, returns
                       (:mod:`joy_env.domains.ecommerce`); ``source="tau2"`` serves tau2-bench's retail
                       tasks: ``joy/tau2-v0``'s retail domain under this id
``joy/general-v0``     general tool calls: weather, units, currencies, dates, time zones, stocks,
                       flights, dictionary (:mod:`joy_env.domains.general`); ``source="bfcl"`` loads
                       BFCL v4 files (:mod:`joy_env.domains.bfcl`)
``joy/qa-v0``          shop-policy and open-domain questions over a knowledge base
                       (:mod:`joy_env.domains.qa`)
``joy/math-v0``        GSM8K-style word problems with a calculator (:mod:`joy_env.domains.math`);
                       ``source="gsm8k"`` loads a GSM8K jsonl file
``joy/mixed-v0``       all of the above plus collaborative tasks that need two or three sub-agents,
                       about 3 collaborative per 10 single-sub-agent tasks (:mod:`joy_env.domains.mixed`)
``joy/tau2-v0``        tau2-bench's retail, airline and telecom tasks (``domain=...``) with tau2's data,
                       tools and reward (:mod:`joy_env.domains.tau2`; needs tau2's data installed)
=====================  ==========================================================================

Every id has the same five agents; the master may call any sub-agent (calling the wrong one is a
mistake the reward sees). Agents, action protocol, observation, reward and arguments are documented in
:mod:`joy_env.env`; each domain's tools and task templates in its module.

``import joy_env`` registers these ids like custom ones (:func:`register_builtin_envs`, through
:func:`joy_env.registry.register_env_loader`); a spec and its domains are built when the id is first used.
Built-in ids cannot be replaced. :data:`ENV_IDS` holds the first five, whose tasks the project generates.

Version history
---------------
* v0 (all ids): first release. ``joy/tau2-v0`` added beside the generated ids (``joy/ecommerce-v0`` with
  ``source="tau2"`` stays as its retail alias).
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from joy_env.core import TaskSource
from joy_env.registry import EnvSpec, list_envs, register_env_loader

ENV_IDS = ("joy/ecommerce-v0", "joy/general-v0", "joy/qa-v0", "joy/math-v0", "joy/mixed-v0")
"""The ids whose tasks the project generates itself (the tiny model is pretrained on their text)."""
TAU2_ENV_ID = "joy/tau2-v0"
"""tau2-bench's retail, airline and telecom tasks (needs tau2's data: :mod:`joy_env.domains.tau2`)."""


def _ecommerce_tasks(
    seed: int, dbs: Mapping[str, sqlite3.Connection], source: str = "generated", path: str | None = None
) -> TaskSource:
    from joy_env.domains import ecommerce

    if source != "generated":
        raise ValueError(f"joy/ecommerce-v0: source must be 'generated' or 'tau2', got {source!r}")
    if path is not None:
        raise ValueError("path only applies to source='tau2'")
    return ecommerce.task_source(seed, dbs["ecommerce"])


# -- source="tau2": tau2-bench retail replaces the ecommerce domain (joy_env/domains/tau2/retail/) --
def _ecommerce_variant(kwargs: Mapping[str, Any]) -> EnvSpec | None:
    if kwargs.get("source") != "tau2":
        return None
    from joy_env.domains.tau2.spec import retail_alias_spec

    return retail_alias_spec(kwargs.get("path"))


# -- end of source="tau2" --


def _general_tasks(
    seed: int,
    dbs: Mapping[str, sqlite3.Connection],
    source: str = "generated",
    path: str | None = None,
    categories: Sequence[str] | None = None,
) -> TaskSource:
    from joy_env.domains import bfcl, general

    if source == "generated":
        if path is not None or categories is not None:
            raise ValueError("path and categories only apply to source='bfcl'")
        return general.task_source(seed)
    if source == "bfcl":
        if path is None:
            found = bfcl.find_bfcl_data()
            if found is None:
                raise ValueError(
                    "source='bfcl' needs path=DIR with the BFCL v4 json files (e.g. the data directory of "
                    "`pip install --no-deps bfcl-eval`); none was given and no installed bfcl_eval was found"
                )
            path = str(found)
        cats = tuple(categories) if categories is not None else ("simple", "multiple", "parallel", "parallel_multiple")
        return bfcl.bfcl_task_source(path, cats, seed)
    raise ValueError(f"joy/general-v0: source must be 'generated' or 'bfcl', got {source!r}")


def _qa_tasks(seed: int, dbs: Mapping[str, sqlite3.Connection]) -> TaskSource:
    from joy_env.domains import qa

    return qa.task_source(seed)


def _math_tasks(
    seed: int, dbs: Mapping[str, sqlite3.Connection], source: str = "generated", path: str | None = None
) -> TaskSource:
    from joy_env.domains import math

    if source == "generated":
        if path is not None:
            raise ValueError("path only applies to source='gsm8k'")
        return math.task_source(seed)
    if source == "gsm8k":
        if path is None:
            raise ValueError("source='gsm8k' needs path=FILE, a jsonl file of {'question', 'answer'} lines")
        return math.gsm8k_task_source(path, seed)
    raise ValueError(f"joy/math-v0: source must be 'generated' or 'gsm8k', got {source!r}")


def _mixed_tasks(seed: int, dbs: Mapping[str, sqlite3.Connection]) -> TaskSource:
    from joy_env.domains import mixed

    return mixed.task_source(seed, dbs["ecommerce"])


@functools.lru_cache(maxsize=1)
def specs() -> dict[str, EnvSpec]:
    """``{env_id: EnvSpec}`` of the built-in ids (built on first use, not at import)."""
    from joy_env.domains import builtin_domains

    doms = builtin_domains()
    return {
        "joy/ecommerce-v0": EnvSpec(
            "joy/ecommerce-v0",
            doms,
            _ecommerce_tasks,
            ("source", "path"),
            "shop tasks / tau2-bench retail",
            variant=_ecommerce_variant,
        ),
        "joy/general-v0": EnvSpec(
            "joy/general-v0",
            doms,
            _general_tasks,
            ("source", "path", "categories"),
            "general tool calls / BFCL",
        ),
        "joy/qa-v0": EnvSpec("joy/qa-v0", doms, _qa_tasks, (), "knowledge-base questions"),
        "joy/math-v0": EnvSpec("joy/math-v0", doms, _math_tasks, ("source", "path"), "word problems / GSM8K"),
        "joy/mixed-v0": EnvSpec("joy/mixed-v0", doms, _mixed_tasks, (), "all domains + collaborative tasks"),
    }


def _tau2_spec() -> EnvSpec:
    """``joy/tau2-v0`` before its options are known: ``make`` always builds the spec of the chosen domain
    (:func:`joy_env.domains.tau2.spec.variant`), so this one only names the options and the splits."""
    from joy_env.domains import builtin_domains
    from joy_env.domains.tau2.spec import SOURCE_KWARGS, variant

    def tasks(seed: int, dbs: Mapping[str, sqlite3.Connection], **kwargs: Any) -> TaskSource:
        raise RuntimeError("joy/tau2-v0's tasks come from the spec of its domain (joy_env.domains.tau2.spec.variant)")

    return EnvSpec(
        TAU2_ENV_ID,
        builtin_domains(),
        tasks,
        SOURCE_KWARGS,
        "tau2-bench retail / airline / telecom",
        splits=("train", "test", "all", "small", "full"),
        variant=variant,
    )


def register_builtin_envs() -> None:
    """Register :data:`ENV_IDS` and :data:`TAU2_ENV_ID` (done once by ``import joy_env``); each spec is built on
    first use."""
    for env_id in ENV_IDS:
        if env_id not in list_envs():  # already there when joy_env is reloaded
            register_env_loader(env_id, functools.partial(_spec, env_id), final=True)
    if TAU2_ENV_ID not in list_envs():
        register_env_loader(TAU2_ENV_ID, _tau2_spec, final=True)


def _spec(env_id: str) -> EnvSpec:
    return specs()[env_id]
