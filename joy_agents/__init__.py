"""joy_agents: LLM policies for the JoyAgents team (one per role), prompts and memory.

This package is filled by the policy work; for now it exposes the scripted expert policy of the
environment under the policy interface ``policy(env) -> str``.
"""

from joy_env.expert import expert_action as expert_policy

__all__ = ["expert_policy"]
