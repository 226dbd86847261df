"""joy_trainers: trainer plugins (``sft``, ``mappo``, ``grpo``, ``joyagents_grpo``) on Accelerate.

A trainer is a subclass of :class:`joy_trainers.base.BaseTrainer` with a ``name``, a ``config_class`` (a
dataclass extending :class:`joy_trainers.run_config.RunConfig`) and ``presets`` (name -> dict of config
values); ``joy-train`` runs nothing else. ``TRAINERS`` maps the built-in names to ``"module:Class"`` strings;
other packages add theirs through the entry-point group ``joy_trainers``::

    [project.entry-points.joy_trainers]
    reinforce = "joy_reinforce:ReinforceTrainer"

and run them with ``joy-train --trainer reinforce`` (see ``examples/custom_trainer/``). ``BaseTrainer.train()``
owns the lifecycle (claim the run directory, train, evaluate, write the results, on one or several processes)
and a trainer writes ``run_training``; an RL trainer subclasses :class:`joy_trainers.rl.RLTrainer`, which
provides all of this but its ``step``.
"""

from __future__ import annotations

from importlib.metadata import entry_points

TRAINERS: dict[str, str] = {
    "sft": "joy_trainers.sft:SFTTrainer",
    "grpo": "joy_trainers.grpo:GRPOTrainer",
    "joyagents_grpo": "joy_trainers.joyagents_grpo:JoyAgentsGRPOTrainer",
    "mappo": "joy_trainers.mappo:MAPPOTrainer",
}

ENTRY_POINT_GROUP = "joy_trainers"


def available_trainers() -> dict[str, str]:
    """Built-in trainers plus those installed under the ``joy_trainers`` entry-point group (name -> target).

    A plugin cannot replace a built-in name.
    """
    found = dict(TRAINERS)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep.value)
    return found


__all__ = ["ENTRY_POINT_GROUP", "TRAINERS", "available_trainers"]
