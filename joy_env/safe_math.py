"""A safe, exact arithmetic evaluator for the ``calculator`` tool.

:func:`evaluate` parses an expression with ``ast.parse(mode="eval")`` and walks a whitelist of nodes; it
never calls ``eval`` or ``exec``. Arithmetic is exact (:class:`fractions.Fraction`), so ``0.1 + 0.2`` is
``0.3``; only ``sqrt`` of a non-square and fractional powers fall back to floats.

Supported syntax
================

| Kind            | Allowed                                                                 |
|-----------------|-------------------------------------------------------------------------|
| numbers         | ``12``, ``3.5``, ``.25``, ``1e3``, ``1_000`` (no complex numbers, no bools)|
| operators       | ``+ - * / // % **``, unary ``+``/``-``, parentheses                     |
| functions       | ``round(x)``, ``round(x, n)``, ``abs(x)``, ``min(a, b, ...)``, ``max(a, b, ...)``, |
|                 | ``sqrt(x)``, ``floor(x)``, ``ceil(x)``                                  |

Everything else (names, attributes, other calls, strings, lambdas, comparisons, subscripts, keyword
arguments, ``^``) raises :class:`SafeMathError` with a message that says what is not allowed.

Rules and limits
================

* ``round`` rounds half away from zero on the exact value (``round(0.125, 2) == 0.13``, ``round(2.5) == 3``),
  as people round money; ``n`` must be an integer between -18 and 12.
* ``/`` is exact division, ``//`` floor division and ``%`` the Python modulo; dividing by zero is an error.
* Powers: the exponent must have magnitude <= 100 and the result must stay within the magnitude limit
  (checked before computing, so ``9**9**9`` costs nothing).
* Every number, intermediate result and final result must have magnitude <= 1e18.
* The expression must be printable ASCII of at most 500 characters, with at most 50 levels of parentheses
  and an AST at most 200 levels deep (a long chain like ``1 + 2 + ... + 99`` counts as one level).

Results render through :func:`format_number`: integers without ``.0``, other values rounded to 6 decimal
places with trailing zeros trimmed (``1/3 -> "0.333333"``, ``0.1+0.2 -> "0.3"``).
"""

from __future__ import annotations

import ast
import math
import re
import warnings
from decimal import Decimal
from fractions import Fraction

__all__ = [
    "MAX_DEPTH",
    "MAX_LENGTH",
    "MAX_PARENS",
    "MAX_MAGNITUDE",
    "SafeMathError",
    "calculate",
    "evaluate",
    "evaluate_exact",
    "format_number",
    "parse_number",
]

MAX_LENGTH = 500
MAX_DEPTH = 200
MAX_PARENS = 50
MAX_MAGNITUDE = 10**18
MAX_EXPONENT = 100
MAX_ARGS = 20
# Fractions whose denominator grows beyond this many bits continue as floats (keeps work bounded).
_MAX_DENOMINATOR_BITS = 256
_DECIMALS = 6

Number = Fraction | float

_FUNCTIONS = ("round", "abs", "min", "max", "sqrt", "floor", "ceil")
_FLOAT_LITERAL = re.compile(r"(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?")
_OPERATOR_NAMES = {
    ast.BitXor: "'^' is not supported; use ** for powers",
    ast.BitAnd: "'&' is not supported",
    ast.BitOr: "'|' is not supported",
    ast.LShift: "'<<' is not supported",
    ast.RShift: "'>>' is not supported",
    ast.MatMult: "'@' is not supported",
    ast.Invert: "'~' is not supported",
    ast.Not: "'not' is not supported",
}


class SafeMathError(ValueError):
    """The expression is not allowed or cannot be evaluated; the message says why."""


def evaluate_exact(expression: str) -> Number:
    """Evaluate ``expression`` exactly: a :class:`~fractions.Fraction`, or a float when inexact.

    Raises:
        SafeMathError: for any expression outside the supported syntax or limits.
    """
    tree = _parse(expression)
    try:
        return _check(_eval(tree.body, expression))
    except SafeMathError:
        raise
    except ZeroDivisionError:
        raise SafeMathError("division by zero") from None
    except RecursionError:
        raise SafeMathError(f"expression is nested too deeply (max depth {MAX_DEPTH})") from None
    except (OverflowError, MemoryError):
        raise SafeMathError(f"result is too large (magnitude limit {MAX_MAGNITUDE:.0e})") from None
    except (ValueError, TypeError, ArithmeticError) as exc:  # defensive: any other arithmetic failure
        raise SafeMathError(f"cannot evaluate expression: {exc}") from None


def evaluate(expression: str) -> int | float:
    """Evaluate ``expression``: an ``int`` when the exact result is a whole number, else a ``float``.

    Raises:
        SafeMathError: for any expression outside the supported syntax or limits.
    """
    value = evaluate_exact(expression)
    if isinstance(value, Fraction):
        return int(value) if value.denominator == 1 else float(value)
    return int(value) if value.is_integer() else value


def calculate(expression: str) -> str:
    """Evaluate ``expression`` and render the result with :func:`format_number`."""
    return format_number(evaluate_exact(expression))


def format_number(x: int | float | Fraction | Decimal | str) -> str:
    """Render a number: integers without ``.0``, otherwise at most 6 decimals, trailing zeros trimmed.

    Values that round to zero at 6 decimals but are not zero use 6 significant digits (``1e-07``).
    Strings are parsed with :func:`parse_number` first.
    """
    if isinstance(x, str):
        x = parse_number(x)
    if isinstance(x, bool):
        raise SafeMathError("booleans are not numbers")
    if isinstance(x, float):
        if not math.isfinite(x):
            raise SafeMathError(f"cannot format non-finite number {x!r}")
        x = Fraction(x)
    elif isinstance(x, (int, Decimal)):
        try:
            x = Fraction(x)
        except (ValueError, OverflowError):
            raise SafeMathError(f"cannot format {x!r}") from None
    if not isinstance(x, Fraction):
        raise SafeMathError(f"cannot format {type(x).__name__}")
    if abs(x) > 10**100:
        raise SafeMathError("cannot format a number larger than 1e100")
    if x.denominator == 1:
        return str(x.numerator)
    rounded = _round_half_up(x, _DECIMALS)
    if rounded == 0:
        return f"{float(x):.6g}"
    if rounded.denominator == 1:
        return str(rounded.numerator)
    text = f"{Decimal(rounded.numerator) / Decimal(rounded.denominator):.{_DECIMALS}f}"
    return text.rstrip("0").rstrip(".")


def parse_number(text: str) -> Fraction:
    """Parse a plain decimal number such as ``"1,234.50"``, ``"$12"``, ``"-3"``, ``"2.5e3"`` exactly.

    Dollar signs, thousands commas, underscores and surrounding whitespace are ignored.

    Raises:
        SafeMathError: when ``text`` is not such a number or is out of range.
    """
    if not isinstance(text, str):
        raise SafeMathError(f"expected a string, got {type(text).__name__}")
    cleaned = text.strip().replace(",", "").replace("_", "").replace("$", "")
    sign = 1
    if cleaned[:1] in "+-" and cleaned:
        sign = -1 if cleaned[0] == "-" else 1
        cleaned = cleaned[1:].strip()
    if len(cleaned) > MAX_LENGTH or not cleaned:
        raise SafeMathError(f"not a number: {text[:40]!r}")
    return sign * _checked_literal(_decimal_literal(cleaned, text), text)


# --------------------------------------------------------------------------------------------- internals


def _parse(expression: str) -> ast.Expression:
    if not isinstance(expression, str):
        raise SafeMathError(f"expression must be a string, got {type(expression).__name__}")
    if len(expression) > MAX_LENGTH:
        raise SafeMathError(f"expression is too long ({len(expression)} characters, max {MAX_LENGTH})")
    if not expression.strip():
        raise SafeMathError("expression is empty")
    bad = next((c for c in expression if not (" " <= c <= "~" or c == "\t")), None)
    if bad is not None:
        raise SafeMathError(
            f"expression contains a character that is not printable ASCII ({ascii(bad)}); "
            "use digits, + - * / // % ** ( ) and the functions " + ", ".join(_FUNCTIONS)
        )
    depth = deepest = 0
    for c in expression:
        depth += (c in "([{") - (c in ")]}")
        deepest = max(deepest, depth)
    if deepest > MAX_PARENS:
        raise SafeMathError(f"expression is nested too deeply (max {MAX_PARENS} levels of parentheses)")
    try:
        with warnings.catch_warnings():  # "1or 2" warns; treat every parser warning as invalid syntax
            warnings.simplefilter("error", SyntaxWarning)
            warnings.simplefilter("error", DeprecationWarning)
            tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise SafeMathError(f"invalid syntax: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError, OverflowError, SyntaxWarning, DeprecationWarning):
        raise SafeMathError("invalid expression (cannot be parsed)") from None
    _check_depth(tree)
    return tree


def _check_depth(tree: ast.AST) -> None:
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise SafeMathError(f"expression is nested too deeply (max depth {MAX_DEPTH})")
        for child in ast.iter_child_nodes(node):
            # a left-associative chain (1 + 2 + 3 ...) is evaluated iteratively: it adds no depth
            flat = isinstance(node, ast.BinOp) and child is node.left and isinstance(child, ast.BinOp)
            stack.append((child, depth if flat else depth + 1))


def _check(value: Number) -> Number:
    """Enforce the magnitude limit; keep Fractions bounded (continue as float when they grow)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SafeMathError(f"result is not finite or too large (magnitude limit {MAX_MAGNITUDE:.0e})")
        if abs(value) > MAX_MAGNITUDE:
            raise SafeMathError(f"result is too large (magnitude limit {MAX_MAGNITUDE:.0e})")
        return value
    if abs(value) > MAX_MAGNITUDE:
        raise SafeMathError(f"result is too large (magnitude limit {MAX_MAGNITUDE:.0e})")
    if value.denominator.bit_length() > _MAX_DENOMINATOR_BITS:
        return float(value)
    return value


def _decimal_literal(body: str, original: str) -> Fraction:
    match = _FLOAT_LITERAL.fullmatch(body)
    if match is None or not (match.group(1) or match.group(2)):
        raise SafeMathError(f"not a number: {original[:40]!r}")
    whole, frac, exp = match.group(1), match.group(2) or "", match.group(3)
    mantissa = int(whole + frac or "0")
    exponent = (int(exp) if exp else 0) - len(frac)
    if mantissa == 0:
        return Fraction(0)
    # digits + exponent bound the magnitude without building a huge power of ten
    if len(str(mantissa)) + exponent > 19:
        raise SafeMathError(f"number {original[:40]!r} is too large (magnitude limit {MAX_MAGNITUDE:.0e})")
    if exponent < -400:
        raise SafeMathError(f"number {original[:40]!r} is too small to represent")
    return Fraction(mantissa) * Fraction(10) ** exponent


def _checked_literal(value: Fraction, original: str) -> Fraction:
    if abs(value) > MAX_MAGNITUDE:
        raise SafeMathError(f"number {original[:40]!r} is too large (magnitude limit {MAX_MAGNITUDE:.0e})")
    return value


def _constant(node: ast.Constant, source: str) -> Number:
    value = node.value
    if isinstance(value, bool) or value is None or value is Ellipsis:
        raise SafeMathError(f"{value!r} is not a number")
    if isinstance(value, (str, bytes)):
        raise SafeMathError("strings are not allowed; use numbers only")
    if isinstance(value, complex):
        raise SafeMathError("complex numbers are not allowed")
    if isinstance(value, int):
        if abs(value) > MAX_MAGNITUDE:
            raise SafeMathError(f"number is too large (magnitude limit {MAX_MAGNITUDE:.0e})")
        return Fraction(value)
    if isinstance(value, float):
        text = ast.get_source_segment(source, node) or repr(value)
        text = text.replace("_", "")
        return _checked_literal(_decimal_literal(text, text), text)
    raise SafeMathError(f"unsupported constant of type {type(value).__name__}")


def _eval(node: ast.AST, source: str) -> Number:
    if isinstance(node, ast.Constant):
        return _constant(node, source)
    if isinstance(node, ast.UnaryOp):
        if isinstance(node.op, ast.USub):
            return -_eval(node.operand, source)
        if isinstance(node.op, ast.UAdd):
            return +_eval(node.operand, source)
        raise SafeMathError(_OPERATOR_NAMES.get(type(node.op), "unsupported unary operator"))
    if isinstance(node, ast.BinOp):
        chain = []  # walk the left spine iteratively so long sums do not recurse
        while isinstance(node, ast.BinOp):
            chain.append(node)
            node = node.left
        value = _eval(node, source)
        for binop in reversed(chain):
            value = _check(_binop(binop.op, value, _eval(binop.right, source)))
        return value
    if isinstance(node, ast.Call):
        return _check(_call(node, source))
    raise SafeMathError(_describe(node))


def _describe(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return f"unknown name {node.id!r}; only numbers and the functions {', '.join(_FUNCTIONS)} are allowed"
    if isinstance(node, ast.Attribute):
        return "attribute access ('.name') is not allowed"
    if isinstance(node, (ast.Compare, ast.BoolOp)):
        return "comparisons and boolean operators are not allowed"
    if isinstance(node, ast.Tuple):
        return "commas are not allowed outside function arguments (write 1234, not 1,234)"
    if isinstance(node, ast.Lambda):
        return "lambda is not allowed"
    if isinstance(node, ast.Subscript):
        return "indexing ('[...]') is not allowed"
    if isinstance(node, (ast.JoinedStr, ast.FormattedValue)):
        return "strings are not allowed; use numbers only"
    return f"{type(node).__name__} expressions are not allowed; use numbers, + - * / // % ** and parentheses"


def _binop(op: ast.operator, left: Number, right: Number) -> Number:
    if isinstance(op, ast.Add):
        return left + right
    if isinstance(op, ast.Sub):
        return left - right
    if isinstance(op, ast.Mult):
        return left * right
    if isinstance(op, (ast.Div, ast.FloorDiv, ast.Mod)):
        if right == 0:
            raise SafeMathError("division by zero" if not isinstance(op, ast.Mod) else "modulo by zero")
        if isinstance(op, ast.Div):
            return left / right
        if isinstance(op, ast.FloorDiv):
            return Fraction(math.floor(left / right))
        return left % right
    if isinstance(op, ast.Pow):
        return _power(left, right)
    raise SafeMathError(_OPERATOR_NAMES.get(type(op), f"operator {type(op).__name__} is not supported"))


def _power(base: Number, exponent: Number) -> Number:
    if abs(exponent) > MAX_EXPONENT:
        raise SafeMathError(f"exponent {_short(exponent)} is too large (|exponent| <= {MAX_EXPONENT})")
    if base == 0:
        if exponent < 0:
            raise SafeMathError("zero cannot be raised to a negative power (division by zero)")
        return Fraction(1) if exponent == 0 else Fraction(0)
    magnitude = math.log10(abs(float(base))) * float(exponent)
    if magnitude > 18.5:
        raise SafeMathError(f"result is too large (magnitude limit {MAX_MAGNITUDE:.0e})")
    integral = isinstance(exponent, Fraction) and exponent.denominator == 1
    if integral and isinstance(base, Fraction):
        if magnitude < -400:  # tiny: continue as float instead of building a huge denominator
            return float(base) ** int(exponent)
        return base ** int(exponent)
    if base < 0 and not (isinstance(exponent, float) and exponent.is_integer()) and not integral:
        raise SafeMathError("a negative number cannot be raised to a fractional power")
    if isinstance(base, Fraction) and isinstance(exponent, Fraction):
        exact = _exact_root_power(base, exponent)
        if exact is not None:
            return exact
    return float(base) ** float(exponent)


def _exact_root_power(base: Fraction, exponent: Fraction) -> Fraction | None:
    """``base ** exponent`` exactly when it is rational and small (e.g. ``4 ** 0.5``, ``8 ** (2/3)``)."""
    if exponent.denominator > 12 or base <= 0:
        return None
    root = _int_root(base.numerator, exponent.denominator), _int_root(base.denominator, exponent.denominator)
    if root[0] is None or root[1] is None:
        return None
    return Fraction(root[0], root[1]) ** exponent.numerator


def _int_root(n: int, k: int) -> int | None:
    if k == 1:
        return n
    guess = round(n ** (1.0 / k)) if n.bit_length() < 1000 else None
    if guess is None:
        return None
    for candidate in (guess - 1, guess, guess + 1):
        if candidate >= 0 and candidate**k == n:
            return candidate
    return None


def _call(node: ast.Call, source: str) -> Number:
    if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
        if isinstance(node.func, ast.Name):
            raise SafeMathError(f"function {node.func.id!r} is not allowed; allowed functions: {', '.join(_FUNCTIONS)}")
        raise SafeMathError(f"only the functions {', '.join(_FUNCTIONS)} may be called")
    name = node.func.id
    if node.keywords:
        raise SafeMathError(f"{name}() takes no keyword arguments")
    if any(isinstance(arg, ast.Starred) for arg in node.args):
        raise SafeMathError(f"{name}() does not accept *arguments")
    if len(node.args) > MAX_ARGS:
        raise SafeMathError(f"{name}() takes at most {MAX_ARGS} arguments")
    args = [_eval(arg, source) for arg in node.args]
    if name in ("min", "max"):
        if not args:
            raise SafeMathError(f"{name}() needs at least one argument")
        return min(args) if name == "min" else max(args)
    if name == "round":
        if len(args) not in (1, 2):
            raise SafeMathError("round() takes 1 or 2 arguments: round(x) or round(x, n)")
        digits = 0
        if len(args) == 2:
            n = args[1]
            if isinstance(n, float) and n.is_integer():
                n = Fraction(int(n))
            if not isinstance(n, Fraction) or n.denominator != 1 or not -18 <= n <= 12:
                raise SafeMathError("round(x, n): n must be a whole number between -18 and 12")
            digits = int(n)
        x = args[0]
        return _round_half_up(Fraction(x) if isinstance(x, float) else x, digits)
    if len(args) != 1:
        raise SafeMathError(f"{name}() takes exactly one argument")
    x = args[0]
    if name == "abs":
        return abs(x)
    if name == "floor":
        return Fraction(math.floor(x))
    if name == "ceil":
        return Fraction(math.ceil(x))
    # sqrt
    if x < 0:
        raise SafeMathError("sqrt() of a negative number is not defined")
    if isinstance(x, Fraction):
        exact = _exact_root_power(x, Fraction(1, 2)) if x > 0 else Fraction(0)
        if exact is not None:
            return exact
    return math.sqrt(float(x))


def _round_half_up(x: Fraction, digits: int) -> Fraction:
    """Round half away from zero to ``digits`` decimal places, exactly."""
    scale = Fraction(10) ** digits
    scaled = abs(x) * scale
    whole = math.floor(scaled)
    if scaled - whole >= Fraction(1, 2):
        whole += 1
    result = Fraction(whole) / scale
    return -result if x < 0 else result


def _short(value: Number) -> str:
    try:
        return format_number(value)
    except SafeMathError:  # pragma: no cover - defensive
        return "?"
