"""Expert SFT data: examples per role, the SFT / RL task split."""

import random

import pytest

import joy_env
from joy_agents.sft_data import build_sft_examples, by_role, expert_examples, split_train_tasks, weighted_tasks


def test_split_train_tasks_is_a_deterministic_partition():
    sft, rl = split_train_tasks(1000, 0.3, seed=1)
    assert len(rl) == 300 and len(sft) == 700
    assert not set(sft) & set(rl) and set(sft) | set(rl) == set(range(1000))
    assert split_train_tasks(1000, 0.3, seed=1) == (sft, rl)
    assert split_train_tasks(1000, 0.3, seed=2) != (sft, rl)


def test_weighted_tasks_reweight_domain_shares_and_keep_the_earliest_tasks():
    domains = ["a", "b", "c", "d"] * 50  # 50 candidates each
    assert weighted_tasks(domains, 20) == list(range(20))
    picked = weighted_tasks(domains, 40, {"a": 2.0, "c": 0.5})
    counts = {d: sum(domains[i] == d for i in picked) for d in "abcd"}
    assert counts == {"a": 18, "b": 9, "c": 4, "d": 9}  # 17.8, 8.9, 4.4, 8.9
    assert picked == sorted(picked) and len(set(picked)) == 40
    # within a domain, the earliest candidates
    assert [i for i in picked if domains[i] == "c"] == [2, 6, 10, 14]
    # a weight of 0 drops a domain; a domain short of candidates hands its rest to the others
    assert all(domains[i] != "b" for i in weighted_tasks(domains, 40, {"b": 0}))
    short = ["a"] * 3 + ["b"] * 100
    assert len(weighted_tasks(short, 20, {"a": 10.0})) == 20
    assert sum(short[i] == "a" for i in weighted_tasks(short, 20, {"a": 10.0})) == 3
    with pytest.raises(ValueError, match="unknown domain"):
        weighted_tasks(domains, 10, {"e": 1.0})
    with pytest.raises(ValueError, match=">= 0"):
        weighted_tasks(domains, 10, {"a": -1.0})


def test_domain_weights_shift_the_sft_examples_between_roles():
    plain = build_sft_examples("joy/mixed-v0", 52)
    weighted = build_sft_examples("joy/mixed-v0", 52, domain_weights={"general": 3.0, "math": 0.0})
    assert sum(len(v) for v in weighted.values()) > 0
    assert len(weighted["general"]) > 2 * len(plain["general"])
    # math examples remain only from collaborative tasks that route through math
    assert all(ex.domain == "collaborative" for ex in weighted["math"])
    assert {ex.task_id for v in weighted.values() for ex in v} != {ex.task_id for v in plain.values() for ex in v}


def test_expert_examples_cover_every_turn_and_role():
    env = joy_env.make("joy/mixed-v0", split="train")
    examples = expert_examples(env, range(26))
    roles = by_role(examples, env.possible_agents)
    assert set(roles) == set(env.possible_agents) and all(roles[r] for r in env.possible_agents)
    for ex in examples:
        assert ex.messages[0]["role"] == "system" and ex.messages[-1]["role"] in ("user", "tool")
        assert ex.completion.startswith(("<tool_call>", "<answer>"))
        assert ex.tools
    # the master's examples: one call_agent turn per sub-agent call, plus the final answer
    tasks = [env.get_task(i) for i in range(26)]
    assert len(roles["master"]) == sum(len(t.route) + 1 for t in tasks)
    collab = [t for t in tasks if t.domain == "collaborative"]
    assert len(collab) == 6  # 26 tasks = 2 blocks of 10 single + 3 collaborative


def test_conversations_keep_each_roles_whole_conversation_once(tiny_dir):
    from transformers import AutoTokenizer

    from joy_agents.sft_data import conversations, language_model_windows, tokenize_example

    env = joy_env.make("joy/mixed-v0", split="train")
    examples = expert_examples(env, range(13))
    convs = conversations(examples)
    assert {(c.task_id, c.role) for c in convs} == {(e.task_id, e.role) for e in examples}
    for ex in examples:  # every turn is inside exactly one kept conversation of its task and role
        holders = [
            c
            for c in convs
            if (c.task_id, c.role) == (ex.task_id, ex.role) and c.messages[: len(ex.messages)] == ex.messages
        ]
        assert len(holders) == 1

    tok = AutoTokenizer.from_pretrained(str(tiny_dir))
    rows = language_model_windows(tok, examples, 64)
    assert rows and all(2 <= len(r["input_ids"]) <= 64 and r["labels"] == [-100, *r["input_ids"][1:]] for r in rows)
    total = sum(len(tokenize_example(tok, c)["input_ids"]) for c in convs)
    assert total - len(convs) < sum(len(r["input_ids"]) for r in rows) <= total  # every token, at most once


def test_conversation_rows_supervise_every_turn_once_with_its_own_context(tiny_dir):
    from transformers import AutoTokenizer

    from joy_agents.sft_data import conversation_rows, tokenize_example

    env = joy_env.make("joy/mixed-v0", split="train")
    examples = expert_examples(env, range(13))
    tok = AutoTokenizer.from_pretrained(str(tiny_dir))
    turns = [tokenize_example(tok, ex) for ex in examples]

    def labelled(row):
        return [v for v in row["labels"] if v != -100]

    for max_length in (4096, 160):
        rows = conversation_rows(tok, examples, max_length)
        assert all(len(r["input_ids"]) <= max_length and len(r["labels"]) == len(r["input_ids"]) for r in rows)
        # the same supervised tokens as one row per turn, in fewer tokens
        assert sorted(t for r in rows for t in labelled(r)) == sorted(t for r in turns for t in labelled(r))
        assert sum(len(r["input_ids"]) for r in rows) < sum(len(r["input_ids"]) for r in turns)
        # every label is predicted from the tokens that preceded it in that turn's own prompt
        for row in rows:
            for j, label in enumerate(row["labels"]):
                if label != -100 and (j == 0 or row["labels"][j - 1] == -100):
                    context = row["input_ids"][:j]
                    assert any(
                        t["input_ids"][: len(t["input_ids"]) - len(labelled(t))][-len(context) :] == context
                        for t in turns
                        if context
                    )
    assert len(conversation_rows(tok, examples, 4096)) < len(turns)


def test_recovery_examples_show_a_broken_turn_and_its_error_then_the_expert_action():
    from joy_agents.sft_data import RECOVERY_TAG, broken_action
    from joy_env.protocol import parse_action

    env = joy_env.make("joy/mixed-v0", split="train")
    plain = expert_examples(env, range(20))
    mixed = expert_examples(env, range(20), recovery_rate=0.5, seed=3)
    regular = [e for e in mixed if RECOVERY_TAG not in e.task_id]
    recovery = [e for e in mixed if RECOVERY_TAG in e.task_id]
    assert regular == plain  # the episodes themselves are untouched
    assert 0.3 * len(plain) < len(recovery) < 0.7 * len(plain)
    for ex in recovery:
        task_id = ex.task_id.split(RECOVERY_TAG)[0]
        broken = max(i for i, m in enumerate(ex.messages) if m["role"] == "assistant")
        # the same prompt without the broken turn is a regular example with the same expert action
        twin = [e for e in plain if e.task_id == task_id and e.role == ex.role and e.messages == ex.messages[:broken]]
        assert len(twin) == 1 and twin[0].completion == ex.completion
        after = " ".join(str(m["content"]) for m in ex.messages[broken + 1 :])
        assert ex.messages[broken]["content"] != ex.completion and "error" in after.lower()
    kinds = {
        broken_action(
            '<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>',
            [{"name": "f", "parameters": {"required": ["x"]}}],
            ["g"],
            random.Random(i),
        )
        for i in range(30)
    }
    action = '<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>'
    runaway = {k for k in kinds if len(k) > len(action) and len(set(k[-20:])) == 1}
    for k in runaway:  # a prefix of the action, then one character repeated
        prefix = k.rstrip(k[-1])
        assert action.startswith(prefix) and len(prefix) < len(action) - 1 and parse_action(k).errors
    assert kinds - runaway == {
        '<tool_call>{"name": "f", "arguments": {"x": 1}}',
        '<tool_call>{"name": "g", "arguments": {"x": 1}}</tool_call>',
        '<tool_call>{"name": "f", "arguments": {}}</tool_call>',
    }
    assert len(runaway) >= 3
    assert all(parse_action(k).calls for k in kinds - runaway - {'<tool_call>{"name": "f", "arguments": {"x": 1}}'})
    with pytest.raises(ValueError, match="recovery_rate"):
        expert_examples(env, range(1), recovery_rate=1.5)


def test_swap_entities_replaces_rare_entities_consistently_in_whole_episodes():
    from joy_agents.sft_data import ENTITY_DIGITS, ENTITY_WORD, conversations, swap_entities
    from joy_env.protocol import parse_action

    env = joy_env.make("joy/mixed-v0", split="train")
    examples = expert_examples(env, range(60))
    swapped = swap_entities(examples, 1.0, seed=0)
    assert len(swapped) == len(examples)
    assert [(e.role, e.task_id) for e in swapped] == [(e.role, e.task_id) for e in examples]
    changed = 0
    for before, after in zip(examples, swapped, strict=True):
        # structure is untouched: the same tools, system prompt, message roles and tool names
        assert after.tools == before.tools and after.messages[0] == before.messages[0]
        assert [m["role"] for m in after.messages] == [m["role"] for m in before.messages]
        old, new = parse_action(before.completion), parse_action(after.completion)
        assert [c["name"] for c in old.calls] == [c["name"] for c in new.calls]
        assert [sorted(c["arguments"]) for c in old.calls] == [sorted(c["arguments"]) for c in new.calls]
        changed += after.completion != before.completion
    assert changed > len(examples) // 3
    # one mapping per episode: an entity the expert wrote is replaced by the same word everywhere in the
    # episode, for every role, and the words it was replaced by occur in what the role saw (still a copy)
    by_task: dict[str, dict[str, set[str]]] = {}
    for before, after in zip(examples, swapped, strict=True):
        old_words = ENTITY_WORD.findall(before.completion) + ENTITY_DIGITS.findall(before.completion)
        new_words = ENTITY_WORD.findall(after.completion) + ENTITY_DIGITS.findall(after.completion)
        assert len(old_words) == len(new_words)
        seen_before = " ".join(m["content"] for m in before.messages)
        seen_after = " ".join(m["content"] for m in after.messages)
        for o, n in zip(old_words, new_words, strict=True):
            by_task.setdefault(before.task_id, {}).setdefault(o, set()).add(n)
            if o in seen_before:
                assert n in seen_after  # a copy stays a copy
    assert all(len(news) == 1 for words in by_task.values() for news in words.values())
    assert any(o not in news for words in by_task.values() for o, news in words.items())
    # the conversations keep their prefix structure (conversation rows still apply)
    assert len(conversations(swapped)) == len(conversations(examples))
    # deterministic; rate 0 is the identity; rate 0.5 swaps part of the episodes
    assert swap_entities(examples, 1.0, seed=0) == swapped
    assert swap_entities(examples, 0.0) == examples
    half = swap_entities(examples, 0.5, seed=0)
    touched = {b.task_id for b, a in zip(examples, half, strict=True) if a != b}
    assert 0 < len(touched) < len({e.task_id for e in examples})
    with pytest.raises(ValueError, match="entity_swap"):
        swap_entities(examples, 1.5)


def test_swap_entities_keeps_common_words_and_structure():
    from joy_agents.sft_data import swap_entities

    env = joy_env.make("joy/mixed-v0", split="train")
    examples = expert_examples(env, range(60))
    swapped = swap_entities(examples, 1.0, seed=0)
    text_before = " ".join(e.completion for e in examples)
    text_after = " ".join(e.completion for e in swapped)
    # words every episode uses (tool names, argument names, frequent English words) stay as they are
    for word in ("call_agent", "search_kb", '"arguments"', "<answer>", "The "):
        assert text_before.count(word) == text_after.count(word), word


def test_compact_prompts_replace_the_system_prompt_and_tools_and_match_the_team(tiny_dir):
    from joy_agents.policy import TeamConfig, TeamPolicy, prompt_view
    from joy_agents.sft_data import styled, tokenize_example

    env = joy_env.make("joy/mixed-v0", split="train")
    examples = expert_examples(env, range(6))
    ex = next(e for e in examples if e.role == "ecommerce" and e.tools)
    messages, tools = prompt_view("compact", ex.role, ex.messages, ex.tools)
    assert messages[0] == {"role": "system", "content": "ecommerce"} and tools is None
    assert messages[1:] == [dict(m) for m in ex.messages[1:]]
    assert prompt_view("full", ex.role, ex.messages, ex.tools) == ([dict(m) for m in ex.messages], list(ex.tools))
    assert prompt_view("compact", "qa", [{"role": "user", "content": "hi"}], None)[0][0] == {
        "role": "system",
        "content": "qa",
    }
    with pytest.raises(ValueError, match="prompt style must be one of"):
        prompt_view("short", "qa", [], None)

    team = TeamPolicy(TeamConfig(model=str(tiny_dir), lora_r=2, lora_alpha=4, prompt_style="compact"))
    for e, s in zip(examples, styled(examples, "compact"), strict=True):
        assert s.tools == () and s.messages[0]["content"] == e.role
        row = tokenize_example(team.tokenizer, s)
        prompt = row["input_ids"][: row["labels"].index(next(v for v in row["labels"] if v != -100))]
        # SFT trains on exactly what rollouts render
        assert prompt == team.encode_prompt(e.role, list(e.messages), list(e.tools) or None)
    full = TeamPolicy(TeamConfig(model=str(tiny_dir), lora_r=2, lora_alpha=4))
    assert (
        len(team.encode_prompt(ex.role, list(ex.messages), list(ex.tools)))
        < len(full.encode_prompt(ex.role, list(ex.messages), list(ex.tools))) / 2
    )
    noted = team.tokenizer.decode(team.encode_prompt(ex.role, list(ex.messages), list(ex.tools), note="\n\nMemory: x"))
    assert noted.startswith("<|im_start|>system\necommerce\n\nMemory: x<|im_end|>")
