"""The scripted expert: follows a task's gold solution, turn by turn.

``expert_action(env)`` returns the text the acting agent should write. The master calls the route's
sub-agents in order and then answers; a sub-agent replays its gold tool-call turns and answers. A
sub-agent called outside the gold route declines. Expert episodes are the SFT demonstrations.

>>> env = joy_env.make("joy/math-v0")
>>> env.reset(seed=0)
>>> breakdown = run_expert_episode(env)
>>> breakdown["success"]
True
"""

from __future__ import annotations

from typing import Any

from joy_env.protocol import format_turn

DECLINE = "I cannot help with that request."


def expert_action(env: Any) -> str:
    """The gold action of the agent whose turn it is in ``env`` (a :class:`joy_env.env.JoyEnv`)."""
    frame = env.current_frame
    task = env.task
    if frame is None or task is None:
        raise RuntimeError("expert_action needs an env whose episode is running; call env.reset() first")
    done_turns = frame.turns
    if frame.agent == "master":
        if done_turns < len(task.route):
            sub = task.route[done_turns]
            arguments = {"agent": sub.agent}
            if sub.query != task.query:  # a request for one sub-agent is forwarded as it is
                arguments["query"] = sub.query
            call = {"name": "call_agent", "arguments": arguments}
            return format_turn([call])
        return format_turn(answer=task.answer)
    if frame.invocation >= len(task.route) or task.route[frame.invocation].agent != frame.agent:
        return format_turn(answer=DECLINE)
    sub = task.route[frame.invocation]
    if done_turns < len(sub.turns):
        return format_turn(list(sub.turns[done_turns]))
    return format_turn(answer=sub.answer)


def run_expert_episode(env: Any, policy: Any = expert_action) -> dict[str, Any]:
    """Play one episode with ``policy(env) -> str`` (the expert by default) from the env's current
    state (call ``reset`` first); returns the episode's reward breakdown."""
    for _agent in env.agent_iter():
        _, _, term, trunc, _ = env.last(observe=False)
        env.step(None if term or trunc else policy(env))
    return env.episode_breakdown
