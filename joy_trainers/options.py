"""A trainer's options as data: every field of its Config dataclass with its type, its default and its
documentation (the docstring written under the field), for ``joy-train --list-options`` and the options
tables of ``docs/trainers/<name>.md``.

    >>> from joy_trainers.grpo import GRPOConfig
    >>> [o.name for o in config_options(GRPOConfig)][:3]
    ['model', 'sft_run', 'sft_overrides']
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from dataclasses import dataclass
from typing import Any


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
