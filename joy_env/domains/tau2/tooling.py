"""How every tau2 domain declares its tools: a :class:`ToolSpec` per tool (its body, argument schema, description
and whether tau2 marks it a write), argument schemas built from the helpers here, and :func:`make_tools`, which
names each tool after its body and wraps the body in the domain's per-call session (see :mod:`joy_env.domains.tau2`).

A domain's ``schemas`` module reads, for each tool::

    spec(tools.cancel_reservation, params(reservation_id=string("six-character reservation id")),
         "Cancel a reservation ...", writes=True)
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from joy_env.core import Tool


def string(description: str) -> dict[str, Any]:
    """A string argument."""
    return {"type": "string", "description": description}


def strings(description: str) -> dict[str, Any]:
    """A list of strings."""
    return {"type": "array", "items": {"type": "string"}, "description": description}


def number(description: str) -> dict[str, Any]:
    """A number argument."""
    return {"type": "number", "description": description}


def boolean(description: str) -> dict[str, Any]:
    """A boolean argument."""
    return {"type": "boolean", "description": description}


def integer(description: str, limit: int) -> dict[str, Any]:
    """An integer argument within ``[-limit, limit]``."""
    return {"type": "integer", "minimum": -limit, "maximum": limit, "description": description}


def enum(values: Iterable[str], description: str) -> dict[str, Any]:
    """A string argument that takes one of ``values``."""
    return {"type": "string", "enum": list(values), "description": description}


def objects(fields: dict[str, dict[str, Any]], description: str) -> dict[str, Any]:
    """A list of objects with ``fields``, all required; other keys are allowed and ignored (as tau2 does)."""
    item = {"type": "object", "properties": fields, "required": list(fields), "additionalProperties": True}
    return {"type": "array", "items": item, "description": description}


def params(optional: Iterable[str] = (), **properties: dict[str, Any]) -> dict[str, Any]:
    """A tool's argument schema: an object of ``properties``, all required except those named in ``optional``."""
    skip = set(optional)
    return {"type": "object", "properties": properties, "required": [name for name in properties if name not in skip]}


@dataclass(frozen=True)
class ToolSpec:
    """A tool before it is made: its body ``body(session, **arguments)``, its argument schema, its description, and
    whether tau2 marks it a write. The tool takes the body's name."""

    body: Callable[..., Any]
    parameters: dict[str, Any]
    description: str
    writes: bool = False

    @property
    def name(self) -> str:
        return self.body.__name__


def spec(body: Callable[..., Any], parameters: dict[str, Any], description: str, writes: bool = False) -> ToolSpec:
    """A :class:`ToolSpec`; its schema is copied, so that no two tools share parts of one."""
    return ToolSpec(body, copy.deepcopy(parameters), description, writes)


def make_tools(specs: Iterable[ToolSpec], wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> tuple[Tool, ...]:
    """The tools of ``specs``, in order, each body wrapped by ``wrap`` (the domain's per-call session) into a tool
    function ``fn(ctx, **arguments)``."""
    return tuple(Tool(s.name, s.description, s.parameters, wrap(s.body), writes=s.writes) for s in specs)
