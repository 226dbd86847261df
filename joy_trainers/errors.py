"""``UsageError``: a mistake in what the user asked for (an option's value, a path, a run directory).

Its message is one line naming the option, the value seen and the fix; ``joy-train`` and ``joy-eval``
print it to stderr and exit with status 2. It subclasses ``ValueError``, so library callers catch it as one.
"""

from __future__ import annotations


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
