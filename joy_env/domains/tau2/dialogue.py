"""tau2-bench's interactive protocol: the customer's instructions, the scripted customer, and the expert's side of
the conversation (see :mod:`joy_env.domains.tau2`, "The interactive protocol").

The scripted customer (:func:`scripted_customer`) is a deterministic function of the task and of the customer's
conversation so far, so it needs no state of its own (an env snapshot taken mid-dialogue restores it). It reads
the service side's messages the way the expert writes them: an action is named by its tool name followed by its
arguments as a JSON object (``cancel_pending_order {"order_id": "#W1", "reason": "no longer needed"}``). Its
rules, in order, for the service side's last message:

1. a transfer to a human agent (the message names both) -> ``###TRANSFER###``;
2. a request to act on the phone (telecom: it names one of the customer's tools) -> it calls that tool (one per
   turn: asked for several, it says it can do one at a time), then reports the result in its next message;
3. a request for confirmation (the message says "confirm") -> ``yes`` when it names a write of the task's gold
   actions with the same arguments, ``no`` for any other write, a request to name the change if it names none;
4. the end of the service (a message that is not a question, or one that asks "anything else") -> ``###STOP###``
   once the task's goals are met (every gold write confirmed, every gold phone action done, every
   ``communicate_info`` heard), else it restates what it still needs;
5. any other question -> what it knows (the scenario's ``known_info``, in the first person), the first time;
   asked again, that it has no other information (tau2's guidelines: information the scenario does not give is
   unknown). It never tells its ``unknown_info``.

Its opening message is the scenario's reason for the call, in the first person.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from joy_env.protocol import format_turn, parse_action

GREETING = "Hi! How can I help you today?"
"""The service side's first message (tau2's)."""
STOP, TRANSFER, OUT_OF_SCOPE = "###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###"
TRANSFER_MESSAGE = "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON."
"""What the service side tells the customer after ``transfer_to_human_agents`` (tau2's policies ask for it)."""

GUIDELINES = """# Playing the customer

You are a customer contacting a customer-service agent. Act out the scenario below, one message at a time, as a
real customer would.

- Follow the scenario's instructions. Never make up information it does not give you: what it does not give is
  unknown to you. Do not recite the instructions word for word; say things in your own words.
- Tell things progressively: wait for the agent to ask before giving a piece of information.
{tools}- When your request is fulfilled, write ###STOP### to end the conversation. If the agent has transferred you to
  another agent (and said so), write ###TRANSFER###. If the scenario does not give you enough to go on, write
  ###OUT-OF-SCOPE###.
- Write your message as <answer>...</answer>.
"""
"""The customer's guidelines in our words (the same rules as tau2's), used when tau2's own files are absent."""

_TOOL_RULES = """- You have tools to act on your own phone. Call one only when the agent asks you to (or to answer its
  question), as <tool_call>{"name": ..., "arguments": {...}}</tool_call>; a turn is either tool calls or a
  message, never both. Report what the tools show; never make up their results. Asked for several actions at
  once, say you can do one at a time. The agent does not see your tool calls, only your messages.
"""


def guidelines(root: Path | None, with_tools: bool) -> str:
    """The customer's guidelines: tau2's own files (``data/tau2/user_simulator`` beside the domain's data, when
    present), else :data:`GUIDELINES` in our words; both followed by the message format of this env."""
    name = "simulation_guidelines_tools.md" if with_tools else "simulation_guidelines.md"
    if root is not None:
        path = root.parent.parent / "user_simulator" / name
        if path.is_file():
            return path.read_text(encoding="utf-8").strip() + (
                "\n\nIn this conversation, write your message to the agent as <answer>...</answer>"
                + (' and a tool call as <tool_call>{"name": ..., "arguments": {...}}</tool_call>' if with_tools else "")
                + "."
            )
    return GUIDELINES.format(tools=_TOOL_RULES if with_tools else "").strip()


def scenario_text(user_scenario: Mapping[str, Any]) -> str:
    """The customer's scenario laid out as tau2 gives it to its user simulator (persona, then the instructions:
    domain, reason for the call, known and unknown info, task instructions)."""
    lines = []
    persona = user_scenario.get("persona")
    if persona:
        lines += ["Persona:", _indent(str(persona))]
    instructions = user_scenario.get("instructions") or {}
    if isinstance(instructions, str):
        body = instructions
    else:
        parts = [f"Domain: {instructions.get('domain', '')}"]
        parts.append("Reason for call:\n" + _indent(str(instructions.get("reason_for_call") or "")))
        for key, title in (("known_info", "Known info"), ("unknown_info", "Unknown info")):
            if instructions.get(key) is not None:
                parts.append(f"{title}:\n" + _indent(str(instructions[key])))
        parts.append("Task instructions:\n" + _indent(str(instructions.get("task_instructions") or "")))
        body = "\n".join(parts)
    lines += ["Instructions:", _indent(body)]
    return "\n".join(lines)


def _indent(text: str) -> str:
    return "\n".join("\t" + line if line else line for line in text.split("\n"))


def customer_prompt(guidance: str, scenario: str) -> str:
    """The customer's system prompt: the guidelines, then ``<scenario>...</scenario>`` (tau2's layout)."""
    return f"{guidance}\n\n<scenario>\n{scenario}\n</scenario>"


# -------------------------------------------------------------------------------------------- the first person

_PRONOUNS = (
    (r"\bYou are\b", "I am"),
    (r"\byou are\b", "I am"),
    (r"\bYou're\b", "I'm"),
    (r"\byou're\b", "I'm"),
    (r"\bYou have\b", "I have"),
    (r"\byou have\b", "I have"),
    (r"\bYou were\b", "I was"),
    (r"\byou were\b", "I was"),
    (r"\bYourself\b", "Myself"),
    (r"\byourself\b", "myself"),
    (r"\bYours\b", "Mine"),
    (r"\byours\b", "mine"),
    (r"\bYour\b", "My"),
    (r"\byour\b", "my"),
    (r"\bYou\b", "I"),
    (r"\byou\b", "I"),
)


def first_person(text: str) -> str:
    """A scenario sentence written to the customer ("You are ...") as the customer says it ("I am ...")."""
    out = " ".join(str(text).split())
    for pattern, replacement in _PRONOUNS:
        out = re.sub(pattern, replacement, out)
    return out


# ------------------------------------------------------------------------------------------ reading a message


def named_call(text: str, names: Collection[str]) -> tuple[dict[str, Any] | None, int]:
    """The first of ``names`` that ``text`` names as an action (the name, then optionally its arguments as a JSON
    object), and how many distinct ``names`` the text names. Arguments that do not parse are ``{}``."""
    found: list[tuple[int, str]] = []
    for name in names:
        match = re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", text)
        if match:
            found.append((match.start(), name))
    if not found:
        return None, 0
    found.sort()
    start, name = found[0]
    rest = text[start + len(name) :]
    arguments: dict[str, Any] = {}
    brace = rest.find("{")
    if brace != -1 and not rest[:brace].strip(" `:'\"").strip():  # the JSON object right after the name
        try:
            value, _ = json.JSONDecoder().raw_decode(rest[brace:])
        except ValueError:
            value = None
        if isinstance(value, dict):
            arguments = value
    return {"name": name, "arguments": arguments}, len(found)


def _proposes(gold: Mapping[str, Any], call: Mapping[str, Any]) -> bool:
    """Whether ``call`` is the gold write ``gold``: the same name, and every gold argument with the same value."""
    if call.get("name") != gold.get("name"):
        return False
    arguments = call.get("arguments") or {}
    return all(k in arguments and arguments[k] == v for k, v in (gold.get("arguments") or {}).items())


def _is_transfer(text: str) -> bool:
    low = text.lower()
    return "transfer" in low and ("human" in low or "another agent" in low)


def _asks_confirmation(text: str) -> bool:
    return "confirm" in text.lower()


def _wraps_up(text: str) -> bool:
    return "?" not in text or "anything else" in text.lower()


# ------------------------------------------------------------------------------------------ the scripted customer


def _text_of(content: str) -> str:
    """A tool message's text (a JSON string decoded)."""
    try:
        value = json.loads(content)
    except ValueError:
        return content
    return value if isinstance(value, str) else content


def _gold(task: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The task's gold writes the customer confirms and the gold actions it makes itself (telecom's phone)."""
    writes = set(task.meta.get("write_tools") or ())
    actions = task.meta.get("actions") or ()
    customer = [a for a in actions if a.get("requestor") == "user"]
    confirm = [a for a in actions if a.get("requestor") != "user" and a["name"] in writes]
    return confirm, customer


def _history(messages: Sequence[Mapping[str, Any]]) -> tuple[list[tuple[str, str | None]], list[dict[str, Any]]]:
    """The service side's messages each with the customer's reply (``None`` for the last, unanswered one), and
    the calls the customer made."""
    said: list[tuple[str, str | None]] = []
    calls: list[dict[str, Any]] = []
    for m in messages[1:]:  # after the system prompt
        if m.get("role") == "user" and not str(m.get("content", "")).startswith("Format error:"):
            said.append((str(m.get("content", "")), None))
        elif m.get("role") == "assistant":
            parsed = parse_action(str(m.get("content", "")))
            if parsed.calls and parsed.answer is None:
                calls.extend(parsed.calls)
            elif parsed.answer is not None and said and said[-1][1] is None:
                said[-1] = (said[-1][0], parsed.answer)
    return said, calls


def scripted_customer(view: Mapping[str, Any]) -> str:
    """The scripted customer's next turn (a ``Dialogue.policy``): ``view`` holds its ``messages`` (its
    conversation: the service side's messages as ``user`` messages), its tool schemas and the ``task``."""
    task = view["task"]
    messages = view["messages"]
    tools = [t.get("function", t).get("name") for t in view.get("tools") or ()]
    said, calls = _history(messages)
    known = first_person(task.meta.get("known_info") or "")
    if len(said) <= 1 and said and said[-1][1] is None and said[-1][0] == GREETING:
        return format_turn(answer=first_person(task.meta.get("reason_for_call") or "I need help."))
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":  # report what the phone showed
        return format_turn(answer=f"Done. My phone shows: {_text_of(str(last.get('content', '')))}")
    if not said:
        return format_turn(answer=first_person(task.meta.get("reason_for_call") or "I need help."))
    text = said[-1][0]
    if _is_transfer(text):
        return format_turn(answer=TRANSFER)
    request, count = named_call(text, tools)
    if request is not None and last.get("role") == "user":
        if count > 1:
            return format_turn(answer="I can only do one thing at a time on my phone. Which one should I do first?")
        return format_turn([request])
    confirm, own = _gold(task)
    if _asks_confirmation(text):
        proposal, _ = named_call(text, set(task.meta.get("write_tools") or ()))
        if proposal is None:
            return format_turn(answer="Could you tell me exactly which change you would make, with its details?")
        if any(_proposes(g, proposal) for g in confirm):
            return format_turn(answer="Yes, I confirm.")
        return format_turn(answer="No, I do not want that.")
    if _wraps_up(text):
        if _goals_met(task, said, calls, confirm, own):
            return format_turn(answer=f"Thank you, that is all I needed. {STOP}")
        reason = first_person(task.meta.get("reason_for_call") or "")
        return format_turn(answer=f"My request is not resolved yet. {reason}".strip())
    told = any(reply is not None and reply.startswith("Here is what I know") for _, reply in said[:-1])
    if known and not told:
        return format_turn(answer=f"Here is what I know: {known}")
    return format_turn(answer="I'm sorry, I don't have any other information.")


def _goals_met(
    task: Any,
    said: Sequence[tuple[str, str | None]],
    calls: Sequence[Mapping[str, Any]],
    confirm: Sequence[Mapping[str, Any]],
    own: Sequence[Mapping[str, Any]],
) -> bool:
    confirmed = []
    for message, reply in said:
        if reply is not None and reply.startswith("Yes") and _asks_confirmation(message):
            proposal, _ = named_call(message, {g["name"] for g in confirm})
            if proposal is not None:
                confirmed.append(proposal)
    if not all(any(_proposes(g, p) for p in confirmed) for g in confirm):
        return False
    if not all(any(_proposes(g, c) for c in calls) for g in own):
        return False
    heard = " ".join(message for message, _ in said).lower().replace(",", "")
    return all(str(info).lower() in heard for info in task.facts)


# ------------------------------------------------------------------------------------------ the expert's script


def expert_script(task_meta: Mapping[str, Any], final_answer: str, write_tools: Collection[str]) -> list[dict]:
    """The service agent's turns in the expert's dialogue, one per turn: ``{"say": text}`` (a message to the
    customer) or ``{"call": {"name", "arguments"}}``. It asks what the customer knows, then follows the gold
    actions in order: a read or a generic call at once; a write after the customer confirms it (the message names
    the call as the scripted customer reads it); a phone action (telecom) by asking the customer to make it; a
    transfer to a human agent, then the transfer message. It ends with ``final_answer`` (the writes done and the
    facts to communicate) and the question whether there is anything else."""
    steps: list[dict[str, Any]] = [
        {"say": "I can help with that. First, could you tell me who you are and the details of your request?"}
    ]
    for action in task_meta.get("actions") or ():
        call = {"name": action["name"], "arguments": action["arguments"]}
        described = f"{action['name']} {json.dumps(action['arguments'])}"
        if action.get("requestor") == "user":
            steps.append({"say": f"Please do this on your phone and tell me what it shows: {described}"})
        elif action["name"] in write_tools:
            steps.append({"say": f"To do this I will run {described}. Do you confirm (yes/no)?"})
            steps.append({"call": call})
        elif action["name"] == "transfer_to_human_agents":
            steps.append({"call": call})
            steps.append({"say": TRANSFER_MESSAGE})
            return steps
        else:
            steps.append({"call": call})
    steps.append({"say": f"{final_answer} Is there anything else I can help you with?"})
    return steps


def expert_turn(script: Sequence[Mapping[str, Any]], done: int) -> str:
    """The expert service agent's turn after ``done`` turns of its conversation (past the script's end it closes
    the conversation with tau2's agent stop)."""
    if done >= len(script):
        return format_turn(answer=f"Thank you for contacting us. {STOP}")
    step = script[done]
    if "call" in step:
        return format_turn([step["call"]])
    return format_turn(answer=step["say"])
