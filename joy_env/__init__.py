"""joy_env: a PettingZoo AEC environment where a team of LLM agents solves tool-calling tasks.

Quick start::

    import joy_env
    env = joy_env.make("joy/mixed-v0", split="train")
    env.reset(seed=0)
    for agent in env.agent_iter():
        obs, reward, terminated, truncated, info = env.last()
        action = None if terminated or truncated else joy_env.expert_action(env)  # or your LLM
        env.step(action)
    print(env.episode_breakdown["R"])

Documentation: :mod:`joy_env.env` (agents, protocol, observation, reward), :mod:`joy_env.builtin`
(env ids), :mod:`joy_env.rewards` (reward module and scoring functions), :mod:`joy_env.registry`
(custom domains), and one module or package per domain under :mod:`joy_env.domains`.
"""

from joy_env import builtin
from joy_env.core import (
    AGENTS,
    SPLITS,
    SUB_AGENTS,
    Domain,
    SubTask,
    Task,
    TaskSourceBase,
    Tool,
    ToolContext,
    ToolError,
)
from joy_env.env import EnvSnapshot, JoyEnv
from joy_env.expert import expert_action, run_expert_episode
from joy_env.registry import EnvSpec, list_envs, make, register_env
from joy_env.rewards import RewardConfig, score_answer, score_calls

builtin.register_builtin_envs()


def tau2_simulation(env: JoyEnv, simulation_id: str = "joy") -> dict:
    """A finished ``joy/tau2-v0`` episode as tau2's ``SimulationRun`` dict, for tau2's own evaluator
    (:func:`joy_env.domains.tau2.export.tau2_simulation`)."""
    from joy_env.domains.tau2.export import tau2_simulation as export

    return export(env, simulation_id)


__version__ = "0.1.0"

__all__ = [
    "AGENTS",
    "SPLITS",
    "SUB_AGENTS",
    "Domain",
    "EnvSnapshot",
    "EnvSpec",
    "JoyEnv",
    "RewardConfig",
    "SubTask",
    "Task",
    "TaskSourceBase",
    "Tool",
    "ToolContext",
    "ToolError",
    "expert_action",
    "list_envs",
    "make",
    "register_env",
    "run_expert_episode",
    "tau2_simulation",
    "score_answer",
    "score_calls",
]
