"""The valid range of every numeric option, declared next to each Config dataclass and checked when the
config is built (``__post_init__``), so that ``--set batch_size=0`` is one line before any long work.

    RANGES = {"batch_size": Range(1, integer=True), "lr": Range(0, low_open=True)}
    # --set batch_size=0: "option batch_size=0 is out of range: valid values are an integer >= 1 (e.g. ...)"

A Config lists its ranges in a class attribute ``RANGES`` (``ClassVar[dict[str, Range]]``); a subclass
extends its base's (``RANGES = {**RLConfig.RANGES, "gamma": Range(0, 1)}``). Every option has a finite upper
bound too (an absurdly large value is one line, not an allocator traceback after the data was built). A test
walks every numeric option of every trainer's config with 0, negative and absurdly large values.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from joy_trainers.errors import shown


@dataclass(frozen=True)
class Range:
    """Valid values of a numeric option: ``low`` <= value <= ``high`` (either bound ``None``: unbounded;
    ``*_open``: the bound itself excluded); ``integer``: whole numbers only; ``none_ok``: ``None`` allowed;
    ``words``: strings allowed besides numbers (e.g. ``top_k="all"``)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False
    none_ok: bool = False
    words: tuple[str, ...] = ()

    def describe(self) -> str:
        """The range in words: "an integer >= 1", "a number in [0, 1)", ..."""
        kind = "an integer" if self.integer else "a number"
        if self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            text = f"{kind} in {left}{_num(self.low)}, {_num(self.high)}{right}"
        elif self.low is not None:
            text = f"{kind} {'>' if self.low_open else '>='} {_num(self.low)}"
        elif self.high is not None:
            text = f"{kind} {'<' if self.high_open else '<='} {_num(self.high)}"
        else:
            text = kind
        extras = [repr(w) for w in self.words] + (["null"] if self.none_ok else [])
        return text + "".join(f" or {e}" for e in extras)

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` lies in the range."""
        if value is None:
            return self.none_ok
        if isinstance(value, str):
            return value in self.words
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if isinstance(value, float) and not math.isfinite(value):  # nan, inf (a huge int stays exact)
            return False
        if self.integer and not isinstance(value, int):
            return False
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        if self.high is not None and (value > self.high or (self.high_open and value == self.high)):
            return False
        return True

    def example(self) -> str:
        """A valid value to show in the fix."""
        if self.low is None:
            return "0" if self.high is None or self.high >= 0 else _num(self.high)
        if not self.low_open:
            return _num(self.low)
        if self.integer:
            return _num(self.low + 1)
        return _num((self.low + self.high) / 2 if self.high is not None else self.low + 1)


def _num(value: Any) -> str:
    if isinstance(value, str):
        return value
    return str(int(value)) if float(value).is_integer() else repr(value)


def check_ranges(config: Any, ranges: dict[str, Range] | None = None) -> None:
    """Check every option of ``config`` named in ``ranges`` (default: ``type(config).RANGES``); the first one
    out of range is a ``ValueError`` naming the option, the value seen and the valid values."""
    defaults = {f.name: f.default for f in dataclasses.fields(config)} if dataclasses.is_dataclass(config) else {}
    for name, valid in (ranges if ranges is not None else getattr(type(config), "RANGES", {})).items():
        value = getattr(config, name)
        if not valid.accepts(value):
            default = defaults.get(name)
            example = _num(default) if valid.accepts(default) and default is not None else valid.example()
            raise ValueError(
                f"option {name}={shown(value)} is out of range: valid values are {valid.describe()} "
                f"(e.g. --set {name}={example})"
            )


SEED_MAX = 2**31 - 1
"""The largest seed (a run adds its process rank and, on resume, step counts to it; NumPy takes 32 bits)."""
TOKENS_MAX = 2**24
"""The largest token count of one sequence or batch an option may name (16M tokens): beyond any model's context;
the model's own context is checked against the run's options before any work (:mod:`joy_trainers.checks`)."""
COUNT_MAX = 10**6
"""The largest count of tasks, rows, steps or samples an option may name (a run of more is not a run)."""
EPOCHS_MAX = 1000
"""The largest number of epochs or passes."""


def positive_int(high: int = COUNT_MAX) -> Range:
    """An integer in [1, ``high``] (a count that cannot be zero)."""
    return Range(1, high, integer=True)


def count(high: int = COUNT_MAX) -> Range:
    """An integer in [0, ``high``] (a count where 0 means none / skip)."""
    return Range(0, high, integer=True)


def positive(high: float | None = None) -> Range:
    """A number > 0 (a rate or a scale), at most ``high`` when given."""
    return Range(0, high, low_open=True)


def learning_rate() -> Range:
    """A learning rate: a number in (0, 1]."""
    return Range(0, 1, low_open=True)


def seed_range() -> Range:
    """A seed: an integer in [0, :data:`SEED_MAX`]."""
    return Range(0, SEED_MAX, integer=True)


def tokens(low: int = 1) -> Range:
    """A token count: an integer in [``low``, :data:`TOKENS_MAX`]."""
    return Range(low, TOKENS_MAX, integer=True)


def epochs() -> Range:
    """A number of epochs: a number in [0, :data:`EPOCHS_MAX`]."""
    return Range(0, EPOCHS_MAX)


def share() -> Range:
    """A number in [0, 1]."""
    return Range(0, 1)
