"""Environment ids, ``make`` and the custom-domain API.

An :class:`EnvSpec` names the sub-agents' domains (tools and databases) and a task-source factory.
``register_env`` adds one; ``register_env_loader`` adds an id whose spec is built on first use (the
built-in ids, registered by :mod:`joy_env.builtin` when ``joy_env`` is imported, are added this way, so
that importing ``joy_env`` does not import the domains). ``make`` builds the shared, read-only *world* of
a spec once per process (pristine database images and the task source) and returns a fresh
:class:`joy_env.env.JoyEnv`.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Mapping
from typing import Any

from joy_env import database
from joy_env.core import SEED_MODULUS, check_seed
from joy_env.env import JoyEnv
from joy_env.rewards import RewardConfig
from joy_env.spec import EnvSpec, TaskFactory, World

__all__ = [
    "COMMON_KWARGS",
    "EnvSpec",
    "TaskFactory",
    "World",
    "get_spec",
    "get_world",
    "list_envs",
    "make",
    "register_env",
    "register_env_loader",
]

COMMON_KWARGS = ("split", "seed", "max_cycles", "reward_config", "render_mode")


_REGISTRY: dict[str, EnvSpec | Callable[[], EnvSpec]] = {}
"""Env id -> its spec, or the loader that builds it on first use (replaced by the spec then)."""
_FINAL: set[str] = set()
"""Ids that cannot be replaced, even with ``overwrite=True`` (the built-in ids)."""
_REGISTRY_LOCK = threading.Lock()
_WORLDS: dict[tuple, World] = {}
_WORLDS_LOCK = threading.Lock()


def register_env(spec: EnvSpec, overwrite: bool = False) -> None:
    """Register a custom environment id (see ``examples/custom_domain``)."""
    if not isinstance(spec, EnvSpec):
        raise TypeError(f"register_env expects an EnvSpec, got {type(spec).__name__}")
    _check_free(spec.env_id, overwrite)
    _check_spec(spec)
    _REGISTRY[spec.env_id] = spec


def register_env_loader(
    env_id: str, loader: Callable[[], EnvSpec], overwrite: bool = False, final: bool = False
) -> None:
    """Register ``env_id`` with a function that builds its :class:`EnvSpec` on first use.

    For domains that are costly to import: ``loader()`` runs (once) when the id is first made or looked
    up, and its spec is checked then as :func:`register_env` checks one. ``final=True`` keeps the id from
    ever being replaced, even with ``overwrite=True`` (the built-in ids are registered so).
    """
    if not isinstance(env_id, str) or not env_id:
        raise TypeError(f"env_id must be a non-empty str, got {env_id!r}")
    if not callable(loader):
        raise TypeError(f"loader must be a function returning an EnvSpec, got {type(loader).__name__}")
    _check_free(env_id, overwrite)
    _REGISTRY[env_id] = loader
    if final:
        _FINAL.add(env_id)


def _check_free(env_id: str, overwrite: bool) -> None:
    if env_id in _FINAL or (env_id in _REGISTRY and not overwrite):
        raise ValueError(
            f"env id {env_id!r} is already registered; pick another id or pass overwrite=True "
            "(built-in ids cannot be replaced)"
        )


def _check_spec(spec: EnvSpec) -> None:
    agents = [d.agent for d in spec.domains]
    if not agents or len(set(agents)) != len(agents) or "master" in agents:
        raise ValueError(
            f"EnvSpec {spec.env_id!r}: domains must name distinct sub-agents other than 'master', got {agents}"
        )
    for d in spec.domains:
        names = [t.name for t in d.tools]
        if len(set(names)) != len(names):
            raise ValueError(f"domain {d.agent!r} of {spec.env_id!r} has duplicate tool names: {names}")


def list_envs() -> list[str]:
    """All registered env ids in registration order: the built-in ids first."""
    return list(_REGISTRY)


def get_spec(env_id: str) -> EnvSpec:
    """The :class:`EnvSpec` of ``env_id`` (built by its loader on first use)."""
    entry = _REGISTRY.get(env_id)
    if entry is None:
        raise ValueError(f"unknown env id {env_id!r}; valid ids: {', '.join(list_envs())}")
    if isinstance(entry, EnvSpec):
        return entry
    with _REGISTRY_LOCK:
        entry = _REGISTRY[env_id]
        if isinstance(entry, EnvSpec):  # another thread loaded it meanwhile
            return entry
        spec = entry()
        if not isinstance(spec, EnvSpec) or spec.env_id != env_id:
            got = spec.env_id if isinstance(spec, EnvSpec) else type(spec).__name__
            raise TypeError(f"the loader of env id {env_id!r} must return an EnvSpec with that id, got {got!r}")
        _check_spec(spec)
        _REGISTRY[env_id] = spec
        return spec


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple, set)):
        return tuple(_freeze(v) for v in value)
    return str(value) if not isinstance(value, (int, float, str, bool, type(None))) else value


def get_world(spec: EnvSpec, seed: int, source_kwargs: Mapping[str, Any]) -> World:
    """Build (once per process) the shared world of ``spec`` for ``seed`` and ``source_kwargs``."""
    key = (spec.env_id, id(spec), seed, _freeze(source_kwargs))
    with _WORLDS_LOCK:
        world = _WORLDS.get(key)
        if world is not None:
            return world
        images: dict[str, bytes] = {}
        pristine: dict[str, sqlite3.Connection] = {}
        for d in spec.domains:
            if d.build_db is None:
                continue
            conn = d.build_db(seed)
            if d.audit:
                database.install_audit(conn, d.audit)
                conn.execute(f"DELETE FROM {database.AUDIT_TABLE}")
            images[d.agent] = database.image(conn)
            pristine[d.agent] = database.load(images[d.agent])
        tasks = spec.tasks(seed, pristine, **source_kwargs)
        tools = {d.agent: {t.name: t for t in d.tools} for d in spec.domains}
        world = World(spec=spec, seed=seed, tasks=tasks, images=images, pristine=pristine, tools=tools)
        _WORLDS[key] = world
        return world


def make(env_id: str = "joy/mixed-v0", **kwargs: Any) -> JoyEnv:
    """Create an environment.

    Args:
        env_id: one of :func:`list_envs` (default ``"joy/mixed-v0"``).
        split: ``"train"`` | ``"validation"`` | ``"test"`` (default ``"train"``; a spec may name others, e.g.
            ``"all"`` for ``source="tau2"``).
        seed: data seed (database, knowledge base, tasks), an int >= 0; default 0. Seeds of ``2**63`` or
            more are reduced modulo ``2**63`` (``seed=2**63 + 5`` builds the world of ``seed=5``); a
            negative seed is a ``ValueError``. Episodes are sampled with the seed passed to ``reset``.
        max_cycles: maximum number of agent turns in an episode (default 30); then the episode is truncated.
        reward_config: a :class:`joy_env.rewards.RewardConfig`.
        render_mode: ``None``, ``"human"`` (print) or ``"ansi"`` (return text).
        **source_kwargs: options of the env id's task source, e.g. ``source="gsm8k", path=FILE`` for
            ``joy/math-v0``, ``source="bfcl", path=DIR, categories=[...]`` for ``joy/general-v0`` or
            ``source="tau2", path=None`` for ``joy/ecommerce-v0``.

    Returns:
        A :class:`joy_env.env.JoyEnv` (a PettingZoo ``AECEnv``).
    """
    spec = get_spec(env_id)
    if spec.variant is not None:
        spec = spec.variant(dict(kwargs)) or spec
    valid = (*COMMON_KWARGS, *spec.source_kwargs)
    unknown = [k for k in kwargs if k not in valid]
    if unknown:
        raise TypeError(f"make({env_id!r}) got unknown argument(s) {unknown}; valid arguments: {', '.join(valid)}")
    split = kwargs.pop("split", "train")
    if split not in spec.splits:
        raise ValueError(f"split must be one of {spec.splits}, got {split!r}")
    seed = check_seed(kwargs.pop("seed", 0)) % SEED_MODULUS
    max_cycles = kwargs.pop("max_cycles", 30)
    if not isinstance(max_cycles, int) or isinstance(max_cycles, bool) or max_cycles < 1:
        raise ValueError(f"max_cycles must be an int >= 1 (agent turns per episode), got {max_cycles!r}")
    reward_config = kwargs.pop("reward_config", None) or RewardConfig()
    if not isinstance(reward_config, RewardConfig):
        raise TypeError(f"reward_config must be a joy_env.rewards.RewardConfig, got {type(reward_config).__name__}")
    render_mode = kwargs.pop("render_mode", None)
    if render_mode not in (None, "human", "ansi"):
        raise ValueError(f"render_mode must be None, 'human' or 'ansi', got {render_mode!r}")
    world = get_world(spec, seed, kwargs)
    if world.tasks.size(split) <= 0:
        raise ValueError(f"{env_id} has no tasks in split {split!r} with these options")
    return JoyEnv(world, split=split, max_cycles=max_cycles, reward_config=reward_config, render_mode=render_mode)
