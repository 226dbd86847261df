"""joy_trainers: trainer plugins (``sft``, ``mappo``, ``grpo``, ``joyagents_grpo``) on Accelerate.

``TRAINERS`` maps a trainer name to ``"module:Class"``; the class has ``config_class`` (a dataclass
with ``from_dict``), ``presets`` (name -> dict of config values) and ``train() -> results dict``.
Run one with ``joy-train --trainer NAME --preset tiny`` (see :mod:`joy_trainers.cli`).
"""

TRAINERS: dict[str, str] = {
    "sft": "joy_trainers.sft:SFTTrainer",
    "grpo": "joy_trainers.grpo:GRPOTrainer",
    "joyagents_grpo": "joy_trainers.joyagents_grpo:JoyAgentsGRPOTrainer",
}

__all__ = ["TRAINERS"]
