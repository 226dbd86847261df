"""``UsageError``: a mistake in what the user asked for (an option's value, a path, a run directory).

Its message is one line naming the option, the value seen and the fix; ``joy-train`` and ``joy-eval``
print it to stderr and exit with status 2. It subclasses ``ValueError``, so library callers catch it as one.
"""

from __future__ import annotations

import reprlib
from typing import Any

SHOWN_CHARS = 80
"""The most characters of a value an error message quotes (:func:`shown`)."""


class UsageError(ValueError):
    """A user mistake; the message says which option or path, the value seen and how to fix it."""


class WriteError(UsageError):
    """Writing a run's file failed (no space left on the device, a quota, a read-only filesystem): the message
    names the path, what was being written and the OS's reason; nothing half-written is left behind, and
    ``--resume`` continues the run once the cause is fixed. Printed as one line like a :class:`UsageError`."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (what schedulers and containers send to stop a job), handled as Ctrl-C is: the run stops, with a
    checkpoint where a Ctrl-C leaves one, and the message is the one line ``joy-train`` prints before it exits
    with 143 (128 + SIGTERM)."""


class _ShortRepr(reprlib.Repr):
    """``repr`` that stops early: a few levels, a few items, and an integer too long to print as its size."""

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 256:  # str() of an int over 4,300 digits raises; anything this long is not read anyway
            return f"<an integer of about {int(x.bit_length() * 0.30103) + 1} digits>"
        return super().repr_int(x, level)


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` for an error message: at most ``limit`` characters, then ``...``. Safe on any value (a
    deeply nested one, a huge string, an integer of thousands of digits), and always one line."""
    short = _ShortRepr()
    short.maxlevel, short.maxstring, short.maxother = 3, limit + 8, limit + 8
    short.maxdict = short.maxlist = short.maxtuple = short.maxset = 8
    text = " ".join(short.repr(value).split())
    return text if len(text) <= limit else text[:limit] + "..."
