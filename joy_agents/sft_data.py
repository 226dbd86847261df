"""SFT data from the environment's expert: one chat dataset per role, and the RL task split.

Every agent turn of an expert episode becomes one example for the role that acted: the conversation
that role saw (``messages``, with its ``tools``) as the prompt and the expert's text as the completion.
The master's examples mix single-sub-agent and collaborative routing as ``joy/mixed-v0`` does (about
10:3, the paper's master data); sub-agents learn tool calls, tool results and answers.

The train split is cut in two with :func:`split_train_tasks`: SFT uses per-agent labels of one part;
the other part is kept for RL, where only the query and the final answer are used (as in the paper).

``tokenize_example`` builds ``input_ids`` and ``labels`` (-100 on the prompt: assistant-only loss). The
completion is the expert text followed by the tokenizer's end-of-turn token, tokenised on its own, so
``prompt_ids + completion_ids`` is exactly what the policy sees and produces at rollout time.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import joy_env
from joy_agents.chat import end_of_turn, fit_prompt, prompt_head, render_prompt
from joy_agents.policy import prompt_view
from joy_env.expert import expert_action
from joy_env.protocol import format_turn, parse_action


@dataclass(frozen=True)
class Example:
    """One supervised turn: what ``role`` saw and what the expert wrote."""

    role: str
    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...]
    completion: str
    task_id: str
    domain: str


def split_train_tasks(num_tasks: int, rl_fraction: float = 0.5, seed: int = 0) -> tuple[list[int], list[int]]:
    """Partition train task indices into (SFT indices, RL indices), deterministically.

    Args:
        num_tasks: number of train tasks of the env.
        rl_fraction: share kept for RL (no per-agent labels are read from those tasks).
        seed: shuffling seed.
    """
    if not 0.0 <= rl_fraction < 1.0:
        raise ValueError(f"rl_fraction must be in [0, 1), got {rl_fraction!r}")
    order = list(range(num_tasks))
    random.Random(f"sft-rl-split/{seed}").shuffle(order)
    n_rl = int(round(num_tasks * rl_fraction))
    return sorted(order[n_rl:]), sorted(order[:n_rl])


def weighted_tasks(domains: Sequence[str], num_tasks: int, weights: dict[str, float] | None = None) -> list[int]:
    """Positions of ``num_tasks`` items of ``domains`` (the domain of each candidate task, in order) so that
    each domain's share is its share among the candidates times ``weights[domain]`` (default 1),
    renormalised; within a domain the earliest candidates are taken. Without weights: the first
    ``num_tasks``. A domain short of candidates gives its remainder to the others."""
    if num_tasks < 0:
        raise ValueError(f"num_tasks must be >= 0, got {num_tasks!r}")
    weights = dict(weights or {})
    bad = {d: w for d, w in weights.items() if not isinstance(w, (int, float)) or w < 0}
    if bad:
        raise ValueError(f"domain weights must be numbers >= 0, got {bad}")
    if not weights:
        return list(range(min(num_tasks, len(domains))))
    present = sorted(set(domains))
    unknown = sorted(set(weights) - set(present))
    if unknown:
        raise ValueError(f"domain weights name unknown domain(s) {unknown}; domains: {', '.join(present)}")
    count = {d: domains.count(d) for d in present}
    mass = {d: count[d] * float(weights.get(d, 1.0)) for d in present}
    if sum(mass.values()) <= 0:
        raise ValueError(f"domain weights {weights} leave no task to choose")
    # largest-remainder apportionment of num_tasks; a domain whose share exceeds its candidates takes them all
    quota = {d: 0 for d in present}
    left = min(num_tasks, sum(count[d] for d in present if mass[d] > 0))
    open_ = [d for d in present if mass[d] > 0]
    while left > 0:
        share = sum(mass[d] for d in open_)
        exact = {d: left * mass[d] / share for d in open_}
        full = [d for d in open_ if exact[d] >= count[d]]
        if full:
            for d in full:
                left -= count[d]
                quota[d] = count[d]
            open_ = [d for d in open_ if d not in full]
            continue
        for d in open_:
            quota[d] = int(exact[d])
        rest = left - sum(quota[d] for d in open_)
        for d in sorted(open_, key=lambda d: (quota[d] - exact[d], present.index(d)))[:rest]:
            quota[d] += 1
        left = 0
    out = []
    for i, d in enumerate(domains):
        if quota.get(d, 0) > 0:
            out.append(i)
            quota[d] -= 1
    return out


RECOVERY_TAG = "#recovery"
"""Suffix of the ``task_id`` of a recovery example (it forms its own one-turn conversation)."""


def expert_examples(env: Any, task_indices: Iterable[int], recovery_rate: float = 0.0, seed: int = 0) -> list[Example]:
    """Play the expert on ``task_indices`` of ``env`` and return one :class:`Example` per agent turn.

    With ``recovery_rate`` > 0, about that share of turns also yields a *recovery* example: from the
    snapshot before the turn, the env plays a broken version of the expert's action (see
    :func:`broken_action`), and the example is what the role then sees (its broken turn and the env's error
    message) with the expert's action as the completion. The episode itself goes on from the snapshot, so
    the expert never plays from a broken state. A model that only ever saw perfect conversations repeats
    its mistake when it makes one; these examples teach it to read the error and correct itself.
    """
    if not 0.0 <= recovery_rate <= 1.0:
        raise ValueError(f"recovery_rate must be in [0, 1], got {recovery_rate!r}")
    rng = random.Random(f"recovery/{seed}")
    out: list[Example] = []
    for index in task_indices:
        env.reset(options={"task_index": int(index)})
        for agent in env.agent_iter():
            _, _, term, trunc, info = env.last(observe=False)
            if term or trunc:
                env.step(None)
                continue
            action = expert_action(env)
            task_id, domain = env.task.task_id, env.task.domain
            if recovery_rate and rng.random() < recovery_rate:
                recovery = _recovery_example(env, agent, action, info["tools"], rng)
                if recovery is not None:
                    out.append(recovery)
            out.append(Example(agent, tuple(info["messages"]), tuple(info["tools"]), action, task_id, domain))
            env.step(action)
        result = env.episode_breakdown
        if not result["success"]:
            raise RuntimeError(f"the expert failed task {result['task_id']}: {result['accuracy']}")
    return out


def broken_action(action: str, tools: Sequence[dict[str, Any]], other_tools: Sequence[str], rng: random.Random) -> str:
    """A broken version of the well-formed ``action``, of a kind small models produce: the closing tag
    left out, a runaway (the text cut short and followed by one character repeated until the token cap,
    as greedy decoding does when it falls into a loop), a tool of another role called (``other_tools``), or
    a required argument left out."""
    parsed = parse_action(action)
    kinds = ["unclosed", "runaway"]
    if parsed.calls and other_tools:
        kinds.append("other tool")
    required = {_function(t)["name"]: _function(t).get("parameters", {}).get("required", []) for t in tools}
    if parsed.calls and any(a in parsed.calls[0]["arguments"] for a in required.get(parsed.calls[0]["name"], [])):
        kinds.append("missing argument")
    kind = rng.choice(kinds)
    if kind == "unclosed":
        for tag in ("</tool_call>", "</answer>"):
            if action.endswith(tag):
                return action[: -len(tag)]
        return action + "<tool_call>"
    if kind == "runaway":
        cut = rng.randrange(len(action) // 3, max(len(action) // 3 + 1, len(action) - 1))
        return action[:cut] + rng.choice("0123456789 -.,") * rng.randint(20, 80)
    calls = [dict(c, arguments=dict(c["arguments"])) for c in parsed.calls]
    if kind == "other tool":
        calls[0]["name"] = rng.choice(sorted(other_tools))
    else:
        present = [a for a in required[calls[0]["name"]] if a in calls[0]["arguments"]]
        del calls[0]["arguments"][rng.choice(present)]
    return format_turn(calls)


def _function(tool: dict[str, Any]) -> dict[str, Any]:
    """The function part of a tool schema (``{"type": "function", "function": {...}}`` or bare)."""
    return tool.get("function", tool)


def _recovery_example(
    env: Any, agent: str, action: str, tools: Sequence[dict[str, Any]], rng: random.Random
) -> Example | None:
    """The recovery example of ``action`` by ``agent`` with its ``tools`` (see :func:`expert_examples`);
    ``env`` is left as it was."""
    own = {_function(t)["name"] for t in tools}
    world_tools = getattr(getattr(env, "world", None), "tools", {}) or {}
    other = {name for role_tools in world_tools.values() for name in role_tools} | {"call_agent"}
    snapshot = env.snapshot()
    try:
        env.step(broken_action(action, tools, sorted(other - own), rng))
        _, _, term, trunc, info = env.last(observe=False)
        if term or trunc or env.agent_selection != agent:
            return None
        tag = f"{RECOVERY_TAG}{len(info['messages'])}"
        return Example(
            agent, tuple(info["messages"]), tuple(info["tools"]), action, env.task.task_id + tag, env.task.domain
        )
    finally:
        env.restore(snapshot)


ENTITY_WORD = re.compile(r"(?<![A-Za-z0-9_])[A-Z][A-Za-z]{2,}(?![A-Za-z0-9_])")
"""A capitalised word or code of 3+ letters (a name, a city, a currency or stock code)."""
ENTITY_DIGITS = re.compile(r"(?<![0-9])[0-9]{3,}(?![0-9])")
"""A run of 3+ digits (an id, a price, a year, a tool's result)."""
_LOWER_WORD = re.compile(r"(?<![A-Za-z])[a-z]{3,}(?![A-Za-z])")
_CONSONANTS = "bcdfghklmnprstvz"
_VOWELS = "aeiou"


def _episode_key(example: Example) -> str:
    return example.task_id.split(RECOVERY_TAG)[0]


def _fresh_word(word: str, rng: random.Random, taken: set[str]) -> str:
    """A pronounceable random word shaped like ``word`` (its length and case pattern), not in ``taken``."""
    while True:
        if word.isupper():
            new = "".join(rng.choice("ABCDEFGHJKLMNPRSTUVWXYZ") for _ in word)
        else:
            start = rng.random() < 0.5
            letters = [rng.choice(_VOWELS if (i % 2 == 0) == start else _CONSONANTS) for i in range(len(word))]
            new = "".join(letters).capitalize()
        if new not in taken:
            taken.add(new)
            return new


def _fresh_digits(run: str, rng: random.Random, taken: set[str]) -> str:
    """Random digits of the length of ``run`` (no leading zero unless ``run`` has one), not in ``taken``."""
    while True:
        head = "0" if run[0] == "0" else rng.choice("123456789")
        new = head + "".join(rng.choice("0123456789") for _ in run[1:])
        if new not in taken:
            taken.add(new)
            return new


def swap_entities(examples: Sequence[Example], rate: float, seed: int = 0, max_share: float = 0.02) -> list[Example]:
    """``examples`` with the entities of about ``rate`` of their episodes replaced by fresh random ones.

    An entity is a capitalised word of 3+ letters (``Salzburg``, ``KRW``) or a run of 3+ digits (``2161``
    of ``U2161``, a price, a tool's result) that the expert wrote in the episode (in a tool call, a query or
    an answer) and that is rare: it occurs in at most ``max_share`` of the episodes, is not in a system prompt
    or tool schema, and its lower-case form is not a common word (``From``). In a chosen episode each entity
    becomes one fresh word of its shape everywhere it occurs (requests, tool results, the expert's turns, for
    every role), so every copy the expert made is still a copy, and nothing can be predicted from entities
    seen in other episodes.

    Why: the train and test splits share no entities, so a team must copy names, ids and numbers from the
    request and the tool results. A small model trained on the real episodes learns instead to write the
    entities it saw most often (they lower its loss just as well), and solves almost no test task; in a
    swapped episode only copying lowers the loss. Tool results of swapped episodes no longer agree with the
    database or with arithmetic; only the expert's turns are labels (except under ``base_loss="all"``).
    Its effect on the tiny SFT preset is in ``docs/results.md``.
    """
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"entity_swap rate must be in [0, 1], got {rate!r}")
    if not 0.0 < max_share <= 1.0:
        raise ValueError(f"max_share must be in (0, 1], got {max_share!r}")
    if rate == 0.0 or not examples:
        return list(examples)
    episodes: dict[str, list[Example]] = {}
    for ex in examples:
        episodes.setdefault(_episode_key(ex), []).append(ex)

    def texts(ex: Example) -> Iterator[str]:
        for m in ex.messages:
            if isinstance(m.get("content"), str):
                yield m["content"]
        yield ex.completion

    structural: set[str] = set()
    found: Counter[str] = Counter()
    lower: Counter[str] = Counter()
    present: dict[str, set[str]] = {}  # the entity-shaped words of each episode's text
    for key, group in episodes.items():
        seen: set[str] = set()
        low: set[str] = set()
        for ex in group:
            structural.update(str(t) for t in ex.tools)
            for m in ex.messages:
                if m.get("role") == "system":
                    structural.add(str(m.get("content")))
            for text in texts(ex):
                seen.update(ENTITY_WORD.findall(text), ENTITY_DIGITS.findall(text))
                low.update(_LOWER_WORD.findall(text))
        found.update(seen)
        lower.update(low)
        present[key] = seen
    limit = max_share * len(episodes)
    structural_text = "\n".join(structural)
    fixed = {w for w in found if found[w] > limit or lower[w.lower()] > limit or w in structural_text}

    out: list[Example] = []
    for key, group in episodes.items():
        rng = random.Random(f"entity-swap/{seed}/{key}")
        if rng.random() >= rate:
            out.extend(group)
            continue
        written: set[str] = set()
        for ex in group:
            written.update(ENTITY_WORD.findall(ex.completion), ENTITY_DIGITS.findall(ex.completion))
        chosen = sorted(written - fixed)
        if not chosen:
            out.extend(group)
            continue
        taken = set(present[key])
        mapping = {w: (_fresh_digits(w, rng, taken) if w.isdigit() else _fresh_word(w, rng, taken)) for w in chosen}
        words = sorted((w for w in chosen if not w.isdigit()), key=len, reverse=True)
        runs = sorted((w for w in chosen if w.isdigit()), key=len, reverse=True)
        patterns = []
        if words:
            patterns.append(re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(map(re.escape, words)) + r")(?![A-Za-z0-9_])"))
        if runs:
            patterns.append(re.compile(r"(?<![0-9])(" + "|".join(runs) + r")(?![0-9])"))

        def swap(text: str, patterns: list[re.Pattern[str]] = patterns, mapping: dict[str, str] = mapping) -> str:
            for pattern in patterns:
                text = pattern.sub(lambda found: mapping[found.group(1)], text)
            return text

        for ex in group:
            messages = tuple(
                dict(m, content=swap(m["content"]))
                if isinstance(m.get("content"), str) and m.get("role") != "system"
                else m
                for m in ex.messages
            )
            out.append(replace(ex, messages=messages, completion=swap(ex.completion)))
    return out


def styled(examples: Sequence[Example], style: str) -> list[Example]:
    """``examples`` with their prompts in the team's prompt ``style`` (:func:`joy_agents.policy.prompt_view`),
    so SFT trains on exactly the prompts the team renders at rollout time."""
    out = []
    for ex in examples:
        messages, tools = prompt_view(style, ex.role, ex.messages, ex.tools)
        out.append(replace(ex, messages=tuple(messages), tools=tuple(tools or ())))
    return out


def by_role(examples: Sequence[Example], roles: Sequence[str]) -> dict[str, list[Example]]:
    """Group examples by role (every role in ``roles`` gets a list, maybe empty)."""
    out: dict[str, list[Example]] = {r: [] for r in roles}
    for ex in examples:
        out.setdefault(ex.role, []).append(ex)
    return out


def build_sft_examples(
    env_id: str = "joy/mixed-v0",
    num_tasks: int = 1000,
    rl_fraction: float = 0.5,
    seed: int = 0,
    recovery_rate: float = 0.0,
    domain_weights: dict[str, float] | None = None,
    entity_swap: float = 0.0,
    prompt_style: str = "full",
    env_kwargs: Mapping[str, Any] | None = None,
) -> dict[str, list[Example]]:
    """Expert examples per role from ``num_tasks`` tasks of the SFT part of the train split (its first ones,
    or with ``domain_weights`` a reweighted mix of domains, see :func:`weighted_tasks`), with recovery
    examples for about ``recovery_rate`` of the turns (see :func:`expert_examples`) and the entities of about
    ``entity_swap`` of the episodes replaced by fresh ones (see :func:`swap_entities`), prompts in
    ``prompt_style`` (:func:`styled`), of ``joy_env.make(env_id, **env_kwargs)`` (e.g. ``{"source": "tau2"}``)."""
    env = joy_env.make(env_id, split="train", seed=seed, **(env_kwargs or {}))
    sft_indices, _ = split_train_tasks(env.num_tasks, rl_fraction, seed)
    if domain_weights:
        # candidates: the first (max weight + 2) x num_tasks of the SFT part (at least 2x); a domain short of
        # candidates there hands its remainder to the others
        pool = sft_indices[: min(len(sft_indices), num_tasks * max(2, int(max(domain_weights.values())) + 2))]
        picked = weighted_tasks([env.get_task(i).domain for i in pool], num_tasks, domain_weights)
        sft_indices = [pool[p] for p in picked]
    examples = expert_examples(env, sft_indices[:num_tasks], recovery_rate, seed)
    if entity_swap:
        examples = swap_entities(examples, entity_swap, seed)
    examples = styled(examples, prompt_style)
    return by_role(examples, env.possible_agents)


def tokenize_example(tokenizer: Any, example: Example, max_length: int | None = None) -> dict[str, list[int]]:
    """``input_ids`` and ``labels`` (prompt masked with -100) of one example.

    The prompt is the chat template with ``add_generation_prompt=True`` (tools listed in the system message when
    the template ignores them, :func:`joy_agents.chat.render_prompt`); the completion (expert text plus the
    end-of-turn token) is tokenised separately and appended, exactly as generation would produce it. With
    ``max_length``, the prompt leaves out its oldest turns, as at rollout time (:func:`joy_agents.chat.fit_prompt`),
    so the completion always fits.
    """
    messages, tools = list(example.messages), list(example.tools) or None
    prompt_ids = render_prompt(tokenizer, messages, tools)
    completion_ids = tokenizer(example.completion + end_of_turn(tokenizer), add_special_tokens=False)["input_ids"]
    if max_length is not None and len(prompt_ids) + len(completion_ids) > max_length:
        keep = max(0, max_length - len(completion_ids))
        prompt_ids = fit_prompt(tokenizer, messages, tools, keep).ids if keep else []
        completion_ids = completion_ids[:max_length]
    return {
        "input_ids": list(prompt_ids) + list(completion_ids),
        "labels": [-100] * len(prompt_ids) + list(completion_ids),
    }


def conversations(examples: Sequence[Example]) -> list[Example]:
    """The examples that end a conversation: those whose messages are not the start of a later example of
    the same task and role. Each one's messages plus its completion is that role's whole conversation."""
    groups: dict[tuple[str, str], list[Example]] = {}
    for ex in examples:
        groups.setdefault((ex.task_id, ex.role), []).append(ex)
    out = []
    for group in groups.values():
        for ex in group:
            n = len(ex.messages)
            if not any(len(o.messages) > n and o.messages[:n] == ex.messages for o in group):
                out.append(ex)
    return out


def language_model_windows(tokenizer: Any, examples: Sequence[Example], max_length: int) -> list[dict[str, list[int]]]:
    """Causal-LM rows over every token of each whole conversation (system prompt, tools, requests, tool
    results, answers), cut into consecutive windows of at most ``max_length`` tokens: pretraining data for a
    randomly initialised base. Every token but a window's first is a label; windows under 2 tokens are dropped."""
    if max_length < 2:
        raise ValueError(f"max_length must be >= 2, got {max_length!r}")
    rows = []
    for ex in conversations(examples):
        ids = tokenize_example(tokenizer, ex)["input_ids"]
        for start in range(0, len(ids), max_length):
            window = ids[start : start + max_length]
            if len(window) >= 2:
                # the first token has no earlier position to be predicted from
                rows.append({"input_ids": window, "labels": [-100, *window[1:]]})
    return rows


def conversation_rows(tokenizer: Any, examples: Sequence[Example], max_length: int) -> list[dict[str, list[int]]]:
    """Rows that supervise every expert turn of a role's conversation at once: the same labels as one
    :func:`tokenize_example` row per turn, in about half the tokens (each turn's prompt is not repeated).

    A conversation is the examples of one task and role. Its last example's tokens hold every earlier turn
    (the chat template does not drift at turn boundaries), so each turn's completion is a span of them.
    A conversation longer than ``max_length`` is cut as prompts are at rollout time
    (:func:`joy_agents.chat.fit_prompt`): a row ends with the last turn not yet covered and keeps the
    conversation's start, the system message (the role tag of a compact prompt) with its tools and the request,
    when they take at most three quarters of ``max_length``; the middle is left out and the rest of the row is
    the text before the row's end. The row supervises every turn that lies inside; earlier turns go to further
    rows. A turn is never split (unless one alone is longer than a row: its end is kept). Conversations whose
    turns are not a prefix of the last one fall back to one row per turn.
    """
    if max_length < 2:
        raise ValueError(f"max_length must be >= 2, got {max_length!r}")
    groups: dict[tuple[str, str], list[Example]] = {}
    for ex in examples:
        groups.setdefault((ex.task_id, ex.role), []).append(ex)
    rows = []
    for group in groups.values():
        group.sort(key=lambda e: len(e.messages))
        whole = tokenize_example(tokenizer, group[-1])["input_ids"]
        spans: list[tuple[int, int]] = []  # [start, end) of each turn's completion in `whole`
        for ex in group:
            turn = tokenize_example(tokenizer, ex)
            end = len(turn["input_ids"])
            if whole[:end] != turn["input_ids"]:
                spans = []
                break
            spans.append((end - sum(1 for v in turn["labels"] if v != -100), end))
        if not spans:
            rows += [tokenize_example(tokenizer, ex, max_length) for ex in group]
            continue
        last = group[-1]
        head = prompt_head(tokenizer, list(last.messages), list(last.tools) or None)
        if len(head) > max_length - max(1, max_length // 4):
            head = []  # too long to keep: rows are the text before their end
        while spans:
            end = spans[-1][1]
            lead = head if end > max_length else []  # the middle is cut: keep the conversation's start
            start = max(0, end - max_length + len(lead))
            inside = [s for s in spans if s[0] >= start] or [spans[-1]]  # a turn longer than a row: its end
            labels = [-100] * (len(lead) + end - start)
            for a, b in inside:
                for j in range(max(a, start), b):
                    labels[len(lead) + j - start] = whole[j]
            rows.append({"input_ids": list(lead) + whole[start:end], "labels": labels})
            spans = spans[: len(spans) - len(inside)]
    return rows
