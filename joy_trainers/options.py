"""A trainer's options as data: every field of its Config dataclass with its type, its default and its
documentation (the docstring written under the field), for ``joy-train --list-options`` and the options
tables of ``docs/trainers/<name>.md``; and :func:`config_from_dict`, which builds a Config from user values
after checking every name and every value's type against the field's annotation.

    >>> from joy_trainers.grpo import GRPOConfig
    >>> [o.name for o in config_options(GRPOConfig)][:3]
    ['model', 'sft_run', 'sft_overrides']
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import textwrap
import types
import typing
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Union

from joy_trainers.errors import UsageError, shown
from joy_trainers.resume_config import CONFIG_MAX_BYTES
from joy_trainers.rundir import JSON_DEPTH_MAX

OPTIONS_MAX_BYTES = CONFIG_MAX_BYTES // 2
"""The most bytes the options of a run may take as its ``config.json`` holds them (indented JSON): half of what
``--resume`` reads back (:data:`~joy_trainers.resume_config.CONFIG_MAX_BYTES`), and far below what ``joy-eval``
reads of ``results.json``, so that a run's own tools never refuse its files. Also the longest ``--set`` value."""
OPTION_DEPTH_MAX = JSON_DEPTH_MAX - 2
"""The deepest nesting of lists and objects in one option's value: ``results.json`` holds it two levels down (in
its ``config``), and a run's file read back nests at most :data:`~joy_trainers.rundir.JSON_DEPTH_MAX` deep."""


@dataclass(frozen=True)
class Option:
    """One field of a Config dataclass."""

    name: str
    type: str
    """The annotation as written in the source (e.g. ``int | None``)."""
    default: Any
    """The default value (the factory's value for ``field(default_factory=...)``)."""
    doc: str
    """The field's docstring, whitespace collapsed ("" when it has none)."""


def field_docs(cls: type) -> dict[str, str]:
    """The docstring written under each annotated field of ``cls`` and of its dataclass bases (a subclass's
    docstring wins), read from the source with :mod:`ast`."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or not dataclasses.is_dataclass(klass):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):  # no source (e.g. built in an interactive session)
            continue
        body = ast.parse(source).body[0].body  # type: ignore[attr-defined]
        for node, following in zip(body, body[1:] + [None], strict=True):
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            if (
                isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs[node.target.id] = " ".join(following.value.value.split())
    return docs


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def config_options(cls: type) -> list[Option]:
    """Every field of the Config dataclass ``cls`` (in declaration order, bases first)."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass; a trainer's config_class must be one")
    docs = field_docs(cls)
    out = []
    for f in dataclasses.fields(cls):
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        out.append(Option(f.name, kind, _default(f), docs.get(f.name, "")))
    return out


def format_default(value: Any) -> str:
    """A default as a user would write it with ``--set`` (JSON-like; ``None`` as ``null``)."""
    if value is dataclasses.MISSING:
        return "(required)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, dict) and not value:
        return "{}"
    return repr(value)


def options_text(cls: type, width: int = 100) -> str:
    """The options as plain text: ``name (type, default X)`` then the documentation, indented."""
    lines = []
    for o in config_options(cls):
        lines.append(f"{o.name} ({o.type}, default {format_default(o.default)})")
        doc = o.doc or "(undocumented)"
        lines += textwrap.wrap(doc, width=width, initial_indent="    ", subsequent_indent="    ")
    return "\n".join(lines) + "\n"


def options_markdown(cls: type) -> str:
    """The options as a markdown table (``| option | type | default | what it does |``)."""
    rows = ["| option | type | default | what it does |", "|---|---|---|---|"]
    for o in config_options(cls):
        doc = o.doc.replace("|", "\\|")
        kind = o.type.replace("|", "\\|")
        default = format_default(o.default).replace("|", "\\|")
        rows.append(f"| `{o.name}` | `{kind}` | `{default}` | {doc} |")
    return "\n".join(rows) + "\n"


def _matches(value: Any, kind: Any) -> bool:
    """Whether ``value`` (as parsed from YAML or ``--set``) fits the annotation ``kind``."""
    if kind is Any:
        return True
    if kind is type(None):
        return value is None
    origin = typing.get_origin(kind)
    if origin in (Union, types.UnionType):
        return any(_matches(value, k) for k in typing.get_args(kind))
    if origin is dict:
        key, val = typing.get_args(kind) or (Any, Any)
        return isinstance(value, dict) and all(_matches(k, key) and _matches(v, val) for k, v in value.items())
    if origin in (list, tuple):
        return isinstance(value, (list, tuple))
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return not isinstance(kind, type) or isinstance(value, kind)


def _describe(kind: Any) -> str:
    """An annotation in words (``int | None`` -> "an integer or null")."""
    origin = typing.get_origin(kind)
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(k) for k in typing.get_args(kind))
    if origin is dict:
        key, val = typing.get_args(kind) or (Any, Any)
        return f"a mapping of {_describe(key)} to {_describe(val)}"
    if origin in (list, tuple):
        return "a list"
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string", type(None): "null"}
    return names.get(kind, "anything" if kind is Any else getattr(kind, "__name__", str(kind)))


def _accepts_float(kind: Any) -> bool:
    if kind is float:
        return True
    return typing.get_origin(kind) in (Union, types.UnionType) and float in typing.get_args(kind)


def check_values(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` checked against the fields of ``cls``: an unknown option name or a value whose type does not
    fit its field's annotation is a :class:`~joy_trainers.errors.UsageError` naming the option, the value and
    what it expects. Returns the values, with a number written as text for a number field (YAML reads
    ``1e-6`` as a string) converted to the number."""
    valid = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - valid)
    if unknown:
        raise UsageError(
            f"unknown {cls.__name__} option(s) {shown(unknown, 200)}; valid: {', '.join(sorted(valid))} "
            "(joy-train --trainer NAME --list-options describes them)"
        )
    hints = typing.get_type_hints(cls)
    defaults = {o.name: o.default for o in config_options(cls)}
    checked = dict(values)
    for name, value in values.items():
        if isinstance(value, str) and _accepts_float(hints[name]) and not _matches(value, hints[name]):
            try:
                checked[name] = value = float(value)
            except ValueError:
                pass
        if not _matches(value, hints[name]):
            default = defaults[name]
            example = format_default(default) if default is not None and default is not dataclasses.MISSING else "..."
            raise UsageError(
                f"option {name} expects {_describe(hints[name])}, got {shown(value)}; write it like its default: "
                f"--set {name}={example}"
            )
    return checked


def rename_old_options(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with each old option name of ``cls.RENAMED`` (old -> new) replaced by its new name, and a
    ``FutureWarning`` saying so (the old names are read for one release)."""
    renamed = getattr(cls, "RENAMED", {})
    if not any(old in values for old in renamed):
        return values
    out = {}
    for name, value in values.items():
        if name in renamed:
            warnings.warn(
                f"option {name} is now called {renamed[name]}; write {renamed[name]} (the old name is read "
                "until the next release)",
                FutureWarning,
                stacklevel=3,
            )
            name = renamed[name]
        out[name] = value
    return out


def config_from_dict(cls: type, values: dict[str, Any]) -> Any:
    """``cls(**values)`` after :func:`rename_old_options` and :func:`check_values`; the dataclass's own
    ``__post_init__`` checks ranges."""
    return cls(**check_values(cls, rename_old_options(cls, values)))


def _extent(value: Any, budget: int) -> tuple[int, int]:
    """``(depth, size)`` of ``value``: how deeply it nests lists and objects (tuples count as lists; 0 for a
    scalar) and a lower bound of its bytes as indented JSON, walked without recursion and given up once the size
    passes ``budget`` (a value that shares its parts, as a YAML file's aliases do, is counted as written out)."""
    deepest, size, stack = 0, 0, [(value, 1)]
    while stack and size <= budget:
        item, level = stack.pop()
        if isinstance(item, dict):
            deepest = max(deepest, level)
            size += 2
            for key, child in item.items():
                size += 2 * level + len(str(key)) + 5  # the newline, the indent, the quoted key and ': '
                stack.append((child, level + 1))
        elif isinstance(item, (list, tuple)):
            deepest = max(deepest, level)
            size += 2
            for child in item:
                size += 2 * level + 1
                stack.append((child, level + 1))
        else:
            size += len(item) + 2 if isinstance(item, str) else 1
    return deepest, size


def options_problem(values: Mapping[str, Any]) -> str | None:
    """Why ``values`` (option name -> value) cannot be the options of a run, or None: an option whose value
    nests lists and objects deeper than :data:`OPTION_DEPTH_MAX`, or options that take more than
    :data:`OPTIONS_MAX_BYTES` as the run's ``config.json`` holds them (the largest one is named). Checked
    without recursion before anything serialises the values."""
    sizes: dict[str, int] = {}
    for name, value in values.items():
        depth, size = _extent(value, OPTIONS_MAX_BYTES)
        if depth > OPTION_DEPTH_MAX:
            return (
                f"option {name} nests lists and objects {depth} levels deep, above the {OPTION_DEPTH_MAX} a run's "
                f"files hold; pass a flatter value"
            )
        sizes[name] = size
    if sum(sizes.values()) <= OPTIONS_MAX_BYTES:
        text = json.dumps(dict(values), indent=2, default=str)  # as config.json holds them
        if len(text) <= OPTIONS_MAX_BYTES:
            return None
        sizes = {name: len(json.dumps(value, indent=2, default=str)) for name, value in values.items()}
    largest = max(sizes, key=sizes.__getitem__)
    return (
        f"option {largest} takes at least {sizes[largest]} bytes as the run's config.json holds it; the options of a "
        f"run take at most {OPTIONS_MAX_BYTES} (what --resume and joy-eval read back): pass a shorter value"
    )
