"""tau2's ``calculate`` without ``eval``: the expression is parsed and evaluated with Python's semantics, and
oversized powers are refused; the retail and airline tools share it (see :mod:`joy_env.domains.tau2`)."""

from __future__ import annotations

import ast
import operator
import warnings
from collections.abc import Callable
from typing import Any

_CALC_CHARS = frozenset("0123456789+-*/(). ")
MAX_POW_BITS = 100_000
"""``calculate`` refuses an integer power whose result would have more bits than this."""


def _pow(base: Any, exponent: Any) -> Any:
    if type(base) is int and type(exponent) is int and exponent > 0 and abs(base) > 1:
        if exponent * abs(base).bit_length() > MAX_POW_BITS:
            raise ValueError("result too large to compute")
    return base**exponent


_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: _pow,
}
_UNOPS: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}


def _not_callable(value: Any) -> TypeError:
    return TypeError(f"'{type(value).__name__}' object is not callable")


def _evaluate(tree: ast.Expression) -> Any:
    """Evaluate an expression tree of numbers, ``+ - * / // **``, parentheses (and what else Python's parser
    makes of those characters) with Python's semantics, iteratively (unary chains can be 2,000 deep)."""
    values: list[Any] = []
    stack: list[tuple[ast.AST, bool]] = [(tree.body, False)]
    while stack:
        node, ready = stack.pop()
        if isinstance(node, ast.Constant) and (node.value is Ellipsis or type(node.value) in (int, float)):
            values.append(node.value)
        elif isinstance(node, ast.Tuple) and not node.elts:
            values.append(())
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            if ready:
                right, left = values.pop(), values.pop()
                values.append(_BINOPS[type(node.op)](left, right))
            else:
                stack += [(node, True), (node.right, False), (node.left, False)]
        elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNOPS:
            if ready:
                values.append(_UNOPS[type(node.op)](values.pop()))
            else:
                stack += [(node, True), (node.operand, False)]
        elif isinstance(node, ast.Call) and not node.keywords:
            # what "(2)(3)" parses to: Python evaluates the callee and the arguments, then fails
            if ready:
                args = [values.pop() for _ in node.args][::-1]
                func = values.pop()
                for arg, value in zip(node.args, args, strict=True):
                    if isinstance(arg, ast.Starred) and not isinstance(value, tuple):
                        raise TypeError(f"{func!r} argument after * must be an iterable, not {type(value).__name__}")
                raise _not_callable(func)
            stack.append((node, True))
            for arg in reversed(node.args):
                stack.append((arg.value if isinstance(arg, ast.Starred) else arg, False))
            stack.append((node.func, False))
        else:
            raise ValueError("unsupported expression")
    return values.pop()


def calculate_expression(expression: str) -> str:
    """tau2's ``calculate``: the value of ``expression`` rounded to 2 decimals, as text (e.g. ``"10.0"``).

    Raises ``ValueError`` / ``SyntaxError`` / ``ZeroDivisionError`` / ``TypeError`` / ``OverflowError``
    with the messages Python's ``eval`` gives (which tau2 shows); the expression is parsed, never executed.
    """
    if not all(char in _CALC_CHARS for char in expression):
        raise ValueError("Invalid characters in expression")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "(1)(2)": "'int' object is not callable; perhaps you missed a comma?"
        tree = ast.parse(expression.lstrip(" \t"), "<string>", "eval")  # eval strips leading blanks too
    return str(round(float(_evaluate(tree)), 2))
