"""joy_trainers: trainer plugins (``sft``, ``mappo``, ``grpo``, ``joyagents_grpo``) on Accelerate.

The registry maps trainer names to ``"module:Class"`` strings; it is filled as the trainers land.
"""

TRAINERS: dict[str, str] = {}

__all__ = ["TRAINERS"]
