"""Validation of tool arguments against the JSON-schema subset that tools use.

Supported keywords: ``type`` (object, string, integer, number, boolean, array, null, or a list of
them), ``properties``, ``required``, ``additionalProperties`` (default ``False``: unknown arguments are
errors), ``enum``, ``items``, ``minimum``, ``maximum``, ``maxLength``, ``maxItems``. A schema without
``type`` accepts any JSON value. Booleans are not numbers, and a float is not an integer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from joy_env.protocol import clip

MAX_STRING = 2_000
"""No string argument may be longer than this, whatever the schema says."""
MAX_ITEMS = 100
"""No array argument may have more items than this."""

_PY_TYPES = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def _type_ok(value: Any, name: str) -> bool:
    if name not in _PY_TYPES:
        return True  # unknown type names (e.g. from foreign schemas) constrain nothing
    if isinstance(value, bool) and name not in ("boolean",):
        return False
    return isinstance(value, _PY_TYPES[name])


def validate(value: Any, schema: Mapping[str, Any], path: str = "arguments") -> list[str]:
    """Every way ``value`` breaks ``schema``; an empty list when it conforms."""
    errors: list[str] = []
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_type_ok(value, n) for n in names):
            return [f"{path} must be {' or '.join(names)}, got {type(value).__name__} {clip(repr(value), 60)}"]
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{path} must be a finite number, got {value}"]
    if "enum" in schema and value not in schema["enum"]:
        options = ", ".join(repr(v) for v in list(schema["enum"])[:12])
        errors.append(f"{path} must be one of {options}; got {clip(repr(value), 60)}")
    if isinstance(value, str):
        limit = min(int(schema.get("maxLength", MAX_STRING)), MAX_STRING)
        if len(value) > limit:
            errors.append(f"{path} is {len(value)} characters long; the limit is {limit}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path} must be >= {schema['minimum']}, got {clip(repr(value), 40)}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path} must be <= {schema['maximum']}, got {clip(repr(value), 40)}")
    if isinstance(value, list):
        limit = min(int(schema.get("maxItems", MAX_ITEMS)), MAX_ITEMS)
        if len(value) > limit:
            return errors + [f"{path} has {len(value)} items; the limit is {limit}"]
        item_schema = schema.get("items")
        if isinstance(item_schema, Mapping):
            for i, item in enumerate(value):
                errors.extend(validate(item, item_schema, f"{path}[{i}]"))
    if isinstance(value, dict):
        props = schema.get("properties", {}) or {}
        for key in schema.get("required", ()) or ():
            if key not in value:
                errors.append(f"{path} is missing the required argument {key!r}")
        extra = schema.get("additionalProperties", False)
        for key, item in value.items():
            if key in props:
                errors.extend(validate(item, props[key], f"{path}.{clip(key, 40)}"))
            elif extra is False and (props or schema.get("type") == "object"):
                known = ", ".join(sorted(props)) or "none"
                errors.append(f"{path} has an unknown argument {clip(key, 40)!r} (known: {known})")
    return errors
