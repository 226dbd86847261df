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
    """The gold action of the agent whose turn it is in ``env`` (a :class:`joy_env.env.JoyEnv`); in a dialogue
    (``env.dialogue``) the customer's too, when it is an agent of the env."""
    frame = env.current_frame
    task = env.task
    if frame is None or task is None:
        raise RuntimeError("expert_action needs an env whose episode is running; call env.reset() first")
    dialogue = getattr(env, "dialogue", None)
    if dialogue is not None:
        return _dialogue_action(env, dialogue, frame, task)
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


def _dialogue_action(env: Any, dialogue: Any, frame: Any, task: Any) -> str:
    """In a dialogue: the customer's expert turn; the master forwards the customer's opening message to the gold
    route's first sub-agent; the agent holding the conversation plays ``Dialogue.service_expert``."""
    if env.agent_selection == env.customer:
        if dialogue.expert is None:
            raise RuntimeError("this env's dialogue has no expert for the customer (Dialogue.expert)")
        info = env.infos[env.customer]
        return dialogue.expert({"messages": info["messages"], "tools": info["tools"], "task": task})
    if frame.agent == "master" and task.route:
        return format_turn([{"name": "call_agent", "arguments": {"agent": task.route[0].agent}}])
    if dialogue.service_expert is None:
        raise RuntimeError("this env's dialogue has no expert for the service side (Dialogue.service_expert)")
    return dialogue.service_expert(task, frame.turns)


def run_expert_episode(env: Any, policy: Any = expert_action) -> dict[str, Any]:
    """Play one episode with ``policy(env) -> str`` (the expert by default) from the env's current
    state (call ``reset`` first); returns the episode's reward breakdown."""
    for _agent in env.agent_iter():
        _, _, term, trunc, _ = env.last(observe=False)
        env.step(None if term or trunc else policy(env))
    return env.episode_breakdown
