"""joy_trainers: trainer plugins (``sft``, ``mappo``, ``grpo``, ``joyagents_grpo``) on Accelerate.

A trainer is one class with a ``name``, a ``config_class`` (a dataclass with ``from_dict``), ``presets``
(name -> dict of config values), ``__init__(config)`` and ``train() -> results dict`` (the ``results.json``
contents), the shape :class:`Trainer` states; ``joy-train`` runs subclasses of
:class:`joy_trainers.base.BaseTrainer` only. ``TRAINERS`` maps the built-in names to
``"module:Class"`` strings; other packages add theirs through the entry-point group ``joy_trainers``::

    [project.entry-points.joy_trainers]
    reinforce = "joy_reinforce:ReinforceTrainer"

and run them with ``joy-train --trainer reinforce`` (see ``examples/custom_trainer/``). Every trainer
subclasses :class:`joy_trainers.base.BaseTrainer` (the run directory, evaluation and results; its Config
extends :class:`joy_trainers.run_config.RunConfig`) and writes ``run_training``; an RL trainer subclasses
:class:`joy_trainers.rl.RLTrainer`, which provides all of this but its ``step``.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any, Protocol

TRAINERS: dict[str, str] = {
    "sft": "joy_trainers.sft:SFTTrainer",
    "grpo": "joy_trainers.grpo:GRPOTrainer",
    "joyagents_grpo": "joy_trainers.joyagents_grpo:JoyAgentsGRPOTrainer",
    "mappo": "joy_trainers.mappo:MAPPOTrainer",
}

ENTRY_POINT_GROUP = "joy_trainers"


class Trainer(Protocol):
    """What ``joy-train`` needs from a trainer class (and its instances)."""

    name: str
    config_class: type
    presets: dict[str, dict[str, Any]]

    def __init__(self, config: Any) -> None: ...

    def train(self) -> dict[str, Any]: ...


def available_trainers() -> dict[str, str]:
    """Built-in trainers plus those installed under the ``joy_trainers`` entry-point group (name -> target).

    A plugin cannot replace a built-in name.
    """
    found = dict(TRAINERS)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep.value)
    return found


__all__ = ["ENTRY_POINT_GROUP", "TRAINERS", "Trainer", "available_trainers"]
