"""Chat prompts for any tokenizer: tools that a chat template drops, and truncation that keeps the system prompt.

Every prompt of the team (rollouts, evaluation, SFT rows) is rendered here, so that a role sees the same
text in training and at rollout time whatever model it runs on.

Tools. A role's tool schemas are passed to the tokenizer's chat template (``tools=``), as Qwen2.5 and the
embedded tiny model expect. Many instruct models' templates ignore ``tools`` (SmolLM2's, for one, renders only
``role`` and ``content``), and then the role would silently never see its tools. :func:`template_renders_tools`
finds this out once per tokenizer by rendering a probe conversation with a probe tool: when the tool's name does
not appear (or the template fails on ``tools``), :func:`render_prompt` appends the project's own tool listing
(:func:`tools_text`, the text the tiny model's template writes: a ``# Tools`` header, how to call a tool, one
line per tool such as ``- get_order_details(order_id: string)``, ``?`` marking an optional argument) to the
system message and renders without ``tools``, with one warning per template::

    UserWarning: the chat template of <model> ignores `tools`; tool schemas are listed in the system message instead

Truncation. :func:`fit_prompt` cuts a prompt that is longer than a limit by leaving out the *oldest turns of the
conversation* (an assistant turn and the tool results or messages after it), never the system message (with
the tools) nor the request (the first user message): a role keeps its instructions, its tools and its task, and
loses the oldest steps of its work. Only when the system message, the request and the latest turn alone do
not fit are tokens cut, from the middle: the system message and the request are kept whole and the prompt's
end fills the rest (at least a quarter of the limit; else the request is cut too and only the system message
is kept); and only when the system message alone is longer than the limit does the prompt keep its last
tokens (a limit set too low for the role's instructions and tools: a warning names the fix). A compact prompt
(``prompt_style="compact"``: the role's name as system message, no tools) is cut the same way: it keeps its
role tag and its request, and loses the middle of its conversation.
The result says whether the prompt was cut (``FittedPrompt.truncated``), which the rollout engine counts
(``prompts_truncated`` in evaluation metrics, ``prompts/truncated`` in RL step logs).

>>> from joy_agents.chat import fit_prompt
>>> fitted = fit_prompt(tokenizer, messages, tools, max_tokens=1024)
>>> fitted.ids, fitted.truncated, fitted.dropped_messages
"""

from __future__ import annotations

import json
import warnings
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["FittedPrompt", "fit_prompt", "prompt_head", "render_prompt", "template_renders_tools", "tools_text"]

TOOLS_HEADER = '\n\n# Tools\nCall a tool with <tool_call>{"name": ..., "arguments": {...}}</tool_call>.'
"""First lines of :func:`tools_text` (the same as the tiny model's chat template)."""
DEFAULT_SYSTEM = "You are a helpful assistant."
"""System message written when a conversation without one needs the tool listing."""

_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "joy_probe_lookup",
        "description": "Probe tool: does the chat template render tools?",
        "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
    },
}
_PROBE_MESSAGES = [{"role": "system", "content": "probe"}, {"role": "user", "content": "probe"}]
_RENDERS_TOOLS: weakref.WeakKeyDictionary[Any, tuple[str, bool]] = weakref.WeakKeyDictionary()


def _type_name(schema: Any) -> str:
    if not isinstance(schema, dict):
        return "any"
    t = schema.get("type", "any")
    if t == "array" and isinstance(schema.get("items"), dict) and isinstance(schema["items"].get("type"), str):
        return f"array[{schema['items']['type']}]"
    if isinstance(t, (list, tuple)):
        return "|".join(str(x) for x in t)
    return str(t)


def tools_text(tools: Sequence[dict[str, Any]]) -> str:
    """The project's own tool listing, appended to a system message: :data:`TOOLS_HEADER`, then one line per
    tool, ``- name(arg: type, optional_arg?: type)`` (the same text as the tiny model's chat template)."""
    parts = [TOOLS_HEADER]
    for tool in tools:
        f = tool.get("function", tool) if isinstance(tool, dict) else {}
        params = f.get("parameters") or {}
        required = params.get("required") or []
        args = ", ".join(
            f"{name}{'' if name in required else '?'}: {_type_name(p)}"
            for name, p in (params.get("properties") or {}).items()
        )
        parts.append(f"\n- {f.get('name', '?')}({args})")
    return "".join(parts)


def _template_id(tokenizer: Any) -> str:
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        return json.dumps(template, sort_keys=True)
    return str(template)


def template_renders_tools(tokenizer: Any) -> bool:
    """Whether ``tokenizer``'s chat template writes the ``tools`` it is given into the prompt (a probe
    conversation rendered with a probe tool holds the tool's name). Computed once per tokenizer and template."""
    key = _template_id(tokenizer)
    cached = _RENDERS_TOOLS.get(tokenizer)
    if cached is not None and cached[0] == key:
        return cached[1]
    try:
        text = tokenizer.apply_chat_template(
            _PROBE_MESSAGES, tools=[_PROBE_TOOL], add_generation_prompt=True, tokenize=False
        )
        ok = isinstance(text, str) and _PROBE_TOOL["function"]["name"] in text
    except Exception:  # a template that fails on `tools` does not render them either
        ok = False
    try:
        _RENDERS_TOOLS[tokenizer] = (key, ok)
    except TypeError:  # not weak-referenceable: probe again next time
        pass
    return ok


_END_OF_TURN: weakref.WeakKeyDictionary[Any, tuple[str, str]] = weakref.WeakKeyDictionary()
_TURN_PROBE = "Probe answer 7."


def end_of_turn(tokenizer: Any) -> str:
    """The token text that ends an assistant turn, as the chat template writes it (``<|im_end|>`` in ChatML,
    ``<|eot_id|>`` in Llama 3): the first special token the template puts after an assistant message's content.

    Taken from the template, not from ``tokenizer.eos_token``: a converter may call another token EOS (the GGUF
    reader of transformers 5.17 names SmolLM2's ``<|im_start|>``), and training completions must end as the
    template ends a turn. A template that ends a turn without a special token gives ``eos_token`` (or ``""``).
    Computed once per tokenizer and template."""
    key = _template_id(tokenizer)
    try:
        cached = _END_OF_TURN.get(tokenizer)
    except TypeError:
        cached = None
    if cached is not None and cached[0] == key:
        return cached[1]
    found = tokenizer.eos_token or ""
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "Probe?"}, {"role": "assistant", "content": _TURN_PROBE}], tokenize=False
        )
    except Exception:  # no usable template: the tokenizer's own EOS
        text = None
    if isinstance(text, str) and _TURN_PROBE in text:
        after = text[text.rindex(_TURN_PROBE) + len(_TURN_PROBE) :]
        specials = sorted({str(t) for t in tokenizer.all_special_tokens} | set(tokenizer.get_added_vocab()), key=len)
        hits = [(after.find(t), -len(t), t) for t in specials if t and t in after]
        if hits:
            found = min(hits)[2]  # the earliest, the longest there
    try:
        _END_OF_TURN[tokenizer] = (key, found)
    except TypeError:
        pass
    return found


def _with_tools_in_system(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    out = [dict(m) for m in messages]
    listing = tools_text(tools)
    if out and out[0].get("role") == "system":
        out[0]["content"] = str(out[0].get("content") or "") + listing
    else:
        out.insert(0, {"role": "system", "content": DEFAULT_SYSTEM + listing})
    return out


def _as_ids(out: Any) -> list[int]:
    if isinstance(out, dict) or hasattr(out, "keys"):
        out = out["input_ids"]
    if hasattr(out, "tolist"):
        out = out.tolist()
    return [int(t) for t in out]


def render_prompt(
    tokenizer: Any,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None,
    add_generation_prompt: bool = True,
) -> list[int]:
    """Token ids of ``messages`` with ``tools`` through ``tokenizer``'s chat template; when the template ignores
    tools, they are listed in the system message instead (:func:`tools_text`, one warning per template)."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            f"the tokenizer of {getattr(tokenizer, 'name_or_path', '?')!r} has no chat_template; use an instruct "
            "model's tokenizer or set tokenizer.chat_template"
        )
    messages = [dict(m) for m in messages]
    tools = list(tools) if tools else None
    if tools and not template_renders_tools(tokenizer):
        warnings.warn(
            f"the chat template of {getattr(tokenizer, 'name_or_path', '') or 'this tokenizer'} ignores `tools`; "
            "tool schemas are listed in the system message instead",
            UserWarning,
            stacklevel=2,
        )
        messages, tools = _with_tools_in_system(messages, tools), None
    out = tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=True, return_dict=False
    )
    return _as_ids(out)


@dataclass(frozen=True)
class FittedPrompt:
    """A prompt cut to a token limit by :func:`fit_prompt`."""

    ids: list[int]
    truncated: bool = False
    """Whether anything was left out."""
    dropped_messages: int = 0
    """Messages of the conversation left out (the oldest turns)."""
    cut_tokens: int = 0
    """Tokens cut from the middle when leaving turns out was not enough."""
    system_cut: bool = False
    """The system message with its tools alone was longer than the limit, so the prompt kept its last tokens
    (the only case in which the system message or tools are cut; a warning says so)."""


def _turn_starts(messages: Sequence[dict[str, Any]], first: int) -> list[int]:
    """Start indices of the droppable turns of ``messages[first:]``: each assistant message opens a turn that
    holds it and the messages after it up to the next assistant message; messages before the first assistant
    message form a turn of their own."""
    starts = []
    for i in range(first, len(messages)):
        if i == first or messages[i].get("role") == "assistant":
            starts.append(i)
    return starts


def fit_prompt(
    tokenizer: Any,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None,
    max_tokens: int,
    add_generation_prompt: bool = True,
) -> FittedPrompt:
    """The prompt of ``messages`` (+ ``tools``) in at most ``max_tokens`` tokens, leaving out the oldest turns
    first, then tokens from the middle, and never the system message, its tools or the request (see the module
    documentation).

    When the system message with its tools alone is longer than ``max_tokens`` (a limit set too low), the prompt
    keeps its last ``max_tokens`` tokens, with a warning, and ``system_cut`` says so.
    """
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be an int >= 1, got {max_tokens!r}")
    messages = [dict(m) for m in messages]

    def render(ms: Sequence[dict[str, Any]]) -> list[int]:
        return render_prompt(tokenizer, ms, tools, add_generation_prompt)

    ids = render(messages)
    if len(ids) <= max_tokens:
        return FittedPrompt(ids)
    head, first = _head_ends(messages)
    starts = _turn_starts(messages, first)
    kept = messages
    # drop the k oldest turns (k = 1 .. all but the last); binary search for the smallest k that fits
    lo, hi, best = 1, len(starts) - 1, None
    while lo <= hi:
        k = (lo + hi) // 2
        candidate = messages[:first] + messages[starts[k] :]
        cand_ids = render(candidate)
        if len(cand_ids) <= max_tokens:
            best, hi = (k, cand_ids), k - 1
        else:
            lo = k + 1
    if best is not None:
        k, ids = best
        return FittedPrompt(ids, True, starts[k] - first)
    if len(starts) > 1:
        kept = messages[:first] + messages[starts[-1] :]
        ids = render(kept)
    dropped = len(messages) - len(kept)
    # the head (the system message with its tools, then the request; or the system block alone when the request
    # leaves too little room for the prompt's end) and the prompt's last tokens: the middle is cut
    head_too_long = False
    for head_messages, min_room in ((messages[:first], max(1, max_tokens // 4)), (messages[:head], 1)):
        head_ids: list[int] = []
        if head_messages or tools:
            head_ids = _head_block(tokenizer, head_messages, tools)
            if not head_ids or ids[: len(head_ids)] != head_ids:
                continue  # a template that does not write these messages first (alone)
        room = max_tokens - len(head_ids)
        if room >= min_room:
            return FittedPrompt(head_ids + ids[len(ids) - room :], True, dropped, len(ids) - len(head_ids) - room)
        head_too_long = True
    if not head_too_long:  # nothing to keep at the start: the prompt's last tokens
        return FittedPrompt(ids[len(ids) - max_tokens :], True, dropped, len(ids) - max_tokens)
    warnings.warn(
        f"the system message and tools of a prompt are longer than the prompt limit of {max_tokens} tokens: "
        f"the prompt keeps its last {max_tokens} tokens and loses them; raise the limit "
        "(max_prompt_tokens / max_length) or use prompt_style='compact'",
        UserWarning,
        stacklevel=2,
    )
    return FittedPrompt(ids[len(ids) - max_tokens :], True, dropped, len(ids) - max_tokens, system_cut=True)


def _head_ends(messages: Sequence[dict[str, Any]]) -> tuple[int, int]:
    """How many first messages are the system message (0 or 1), and how many are it and the request."""
    head = 1 if messages and messages[0].get("role") == "system" else 0
    first = head + 1 if len(messages) > head and messages[head].get("role") == "user" else head
    return head, first


def prompt_head(
    tokenizer: Any, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None
) -> list[int]:
    """The ids that start the prompt of ``messages`` (+ ``tools``) for the system message with its tools and the
    request (the first user message): what truncation always keeps. [] when the template does not write them
    first on their own."""
    first = _head_ends(messages)[1]
    if not first:
        return []
    head_ids = _head_block(tokenizer, messages[:first], tools)
    whole = render_prompt(tokenizer, messages, tools, add_generation_prompt=False)
    return head_ids if head_ids and whole[: len(head_ids)] == head_ids else []


def _head_block(tokenizer: Any, head: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None) -> list[int]:
    """The ids the template writes for the first messages ``head`` (the system message with its tools, and maybe
    the request) alone, without a generation prompt ([] if it cannot render them)."""
    try:
        return render_prompt(tokenizer, head, tools, add_generation_prompt=False)
    except Exception:  # e.g. a template that needs a user message
        return []
