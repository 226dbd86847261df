"""Tests of joy_agents.policy on a throwaway tiny Qwen2 model built offline (random init, BPE tokenizer)."""

from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from joy_agents.policy import (  # noqa: E402
    Sample,
    SamplingConfig,
    TeamConfig,
    TeamPolicy,
    parameter_bytes,
)

ROLES = ("master", "qa", "ecommerce", "general", "math")
CHAT_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n<tools>' }}{%- for t in tools %}{{- '\\n' }}{{- t | tojson }}{%- endfor %}"
    "{{- '\\n</tools><|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}{%- if not (tools and loop.first and m['role'] == 'system') %}"
    "{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def _build_tokenizer():
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    lines = [
        f"user asks about order {i}: the price of item {i * 7 % 13} is {i * 3.5} dollars, answer politely."
        for i in range(300)
    ]
    lines += ['<tool_call>{"name": "search", "arguments": {"query": "shoes"}}</tool_call>', "<answer>42</answer>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(lines, trainer)
    tok.add_tokens(
        [
            AddedToken(t, special=False, normalized=False)
            for t in ("<tool_call>", "</tool_call>", "<answer>", "</answer>")
        ]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )


def _save_model(path, tokenizer, hidden: int, seed: int, with_tokenizer: bool = True) -> str:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    Qwen2ForCausalLM(cfg).save_pretrained(str(path))
    if with_tokenizer:
        tokenizer.save_pretrained(str(path))
    return str(path)


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    tok = _build_tokenizer()
    root = tmp_path_factory.mktemp("tiny_policy")
    base = _save_model(root / "base", tok, hidden=32, seed=0)
    big = _save_model(root / "big", tok, hidden=48, seed=1, with_tokenizer=False)  # uses the shared tokenizer
    return base, big


def _perturb(team: TeamPolicy, seed: int, scale: float = 0.5) -> None:
    """Make every role's adapter different (peft initialises LoRA B to zero)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for k, role in enumerate(team.roles):
            for p in team.trainable_parameters(role):
                p.add_(scale * (1 + k / 5) * torch.randn(p.shape, generator=gen).to(p.dtype))


@pytest.fixture(scope="module")
def team(model_dirs):
    t = TeamPolicy(TeamConfig(model=model_dirs[0], lora_r=4))
    _perturb(t, seed=123)
    return t


@pytest.fixture(scope="module")
def greedy_qa(team):
    """Greedy 16-token completions of the three prompts by role qa, without stop strings."""
    return _flat(team.generate("qa", _prompts(team), SamplingConfig(temperature=0, max_new_tokens=16, stop=())))


def _prompts(team: TeamPolicy, role: str = "math") -> list[list[int]]:
    sys = {"role": "system", "content": "You answer questions about orders."}
    tools = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
    return [
        team.encode_prompt(role, [sys, {"role": "user", "content": "price of item 3?"}], None),
        team.encode_prompt(role, [{"role": "user", "content": "hi"}], None),
        team.encode_prompt(role, [sys, {"role": "user", "content": "order 12 status please, politely"}], tools),
    ]


def _flat(groups: list[list[Sample]]) -> list[Sample]:
    return [s for g in groups for s in g]


# ---------------------------------------------------------------------------------------------- configs
def test_sampling_config_validation():
    assert SamplingConfig(stop=["</answer>"]).stop == ("</answer>",)
    with pytest.raises(ValueError, match="temperature"):
        SamplingConfig(temperature=-0.1)
    with pytest.raises(ValueError, match="top_p"):
        SamplingConfig(top_p=0.0)
    with pytest.raises(ValueError, match="top_p"):
        SamplingConfig(top_p=1.5)
    with pytest.raises(ValueError, match="max_new_tokens"):
        SamplingConfig(max_new_tokens=0)
    with pytest.raises(TypeError, match="stop"):
        SamplingConfig(stop="</answer>")
    with pytest.raises(ValueError, match="non-empty"):
        SamplingConfig(stop=("",))


def test_team_config_validation():
    assert TeamConfig(model="x", roles=["a", "b"]).roles == ("a", "b")
    with pytest.raises(ValueError, match="duplicates"):
        TeamConfig(model="x", roles=("a", "a"))
    with pytest.raises(ValueError, match="not in roles"):
        TeamConfig(model="x", separate_models={"boss": "y"})
    with pytest.raises(ValueError, match="dtype"):
        TeamConfig(model="x", dtype="float64")
    with pytest.raises(ValueError, match="lora_r"):
        TeamConfig(model="x", lora_r=0)
    with pytest.raises(ValueError, match="'.'"):
        TeamConfig(model="x", roles=("a.b",))
    with pytest.raises(ValueError, match="device"):
        TeamConfig(model="x", device="gpu0")


def test_unknown_role_lists_roles(team):
    with pytest.raises(KeyError, match="unknown role 'boss'.*master.*math"):
        team.generate("boss", [[1, 2]], SamplingConfig())
    with pytest.raises(KeyError, match="qa"):
        team.trainable_parameters("boss")


def test_encode_prompt_uses_chat_template(team):
    tok = team.tokenizer
    with_tools, plain = _prompts(team)[2], _prompts(team)[1]
    assert all(isinstance(t, int) for t in with_tools)
    text = tok.decode(with_tools)
    assert text.startswith("<|im_start|>system\nYou answer questions about orders.\n\n# Tools\n<tools>")
    assert '"name": "search"' in text and text.endswith("<|im_start|>assistant\n")
    assert tok.decode(plain) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


# ---------------------------------------------------------------------------------------------- sampling
def test_result_layout_and_ids(team):
    prompts = _prompts(team)
    torch.manual_seed(0)
    out = team.generate("qa", prompts, SamplingConfig(temperature=1.0, max_new_tokens=10), num_samples=3)
    assert len(out) == 3 and all(len(g) == 3 for g in out)
    for prompt, group in zip(prompts, out, strict=True):
        for s in group:
            assert s.prompt_ids == prompt
            assert len(s.completion_ids) == len(s.logprobs) >= 1
            assert s.finish_reason in ("stop", "length")
            assert (s.finish_reason == "length") == (len(s.completion_ids) == 10 and not _ends(team, s))
            assert all(lp <= 0 for lp in s.logprobs)
    assert len({tuple(s.completion_ids) for s in _flat(out)}) > 1  # sampled rows differ
    assert team.generate("qa", [], SamplingConfig()) == []
    with pytest.raises(ValueError, match="empty"):
        team.generate("qa", [[]], SamplingConfig())
    with pytest.raises(ValueError, match="num_samples"):
        team.generate("qa", prompts, SamplingConfig(), num_samples=0)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        team.generate("qa", prompts, SamplingConfig(max_new_tokens=600))


def _ends(team: TeamPolicy, s: Sample) -> bool:
    last = s.completion_ids[-1]
    eos = {team.tokenizer.eos_token_id, team.tokenizer.convert_tokens_to_ids("</answer>")}
    return last in eos or team.tokenizer.convert_tokens_to_ids("</tool_call>") == last


def test_batched_greedy_equals_one_by_one(team):
    prompts = _prompts(team)
    assert len({len(p) for p in prompts}) == 3  # different lengths -> left padding is exercised
    cfg = SamplingConfig(temperature=0.0, max_new_tokens=8, stop=())
    batched = _flat(team.generate("general", prompts, cfg, num_samples=2))
    for i, p in enumerate(prompts):
        alone = team.generate("general", [p], cfg)[0][0]
        for s in batched[2 * i : 2 * i + 2]:
            assert s.completion_ids == alone.completion_ids
            assert max(abs(a - b) for a, b in zip(s.logprobs, alone.logprobs, strict=True)) < 1e-5


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sample_logprobs_equal_teacher_forced(team, temperature):
    prompts = _prompts(team)
    torch.manual_seed(1)
    samples = _flat(
        team.generate("ecommerce", prompts, SamplingConfig(temperature, top_p=0.9, max_new_tokens=10), num_samples=3)
    )
    with torch.no_grad():
        tf = team.logprobs(
            "ecommerce", [s.prompt_ids for s in samples], [s.completion_ids for s in samples], temperature=temperature
        )
    assert len({len(s.completion_ids) for s in samples}) > 1 or len(samples) == 9
    for s, lp in zip(samples, tf, strict=True):
        assert lp.shape == (len(s.completion_ids),)
        assert torch.allclose(torch.tensor(s.logprobs), lp, atol=1e-4, rtol=0)
    # the same tokens under another role's adapter have other log-probs (adapters differ per role)
    with torch.no_grad():
        other = team.logprobs("math", [samples[0].prompt_ids], [samples[0].completion_ids], temperature)[0]
    assert (other - tf[0]).abs().max() > 1e-3


def test_greedy_ids_round_trip_and_logprobs(team, greedy_qa):
    """Greedy completion ids are exactly the argmax of a teacher-forced pass on prompt + completion ids."""
    samples = greedy_qa
    model = team.model_for("qa")
    with team.use_role("qa"), torch.no_grad():
        for s in samples:
            ids = torch.tensor([s.prompt_ids + s.completion_ids])
            logits = model(input_ids=ids).logits[0, len(s.prompt_ids) - 1 : -1]
            assert logits.argmax(-1).tolist() == s.completion_ids
            ref = torch.log_softmax(logits.float(), -1).gather(-1, ids[0, len(s.prompt_ids) :, None])[:, 0]
            assert torch.allclose(torch.tensor(s.logprobs), ref, atol=1e-4, rtol=0)
    with torch.no_grad():  # temperature 0 in logprobs means temperature 1, as for greedy samples
        lp0 = team.logprobs("qa", [samples[0].prompt_ids], [samples[0].completion_ids], temperature=0)[0]
    assert torch.allclose(torch.tensor(samples[0].logprobs), lp0, atol=1e-4, rtol=0)


def _first_hit(tok, tokens: list[int], stops: tuple[str, ...]) -> int | None:
    for m in range(1, len(tokens) + 1):
        text = tok.decode(tokens[:m], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if any(s in text for s in stops):
            return m
    return None


def _ascii_piece(tok, tokens: list[int], start: int, width: int) -> str | None:
    for k in range(start, len(tokens) - width):
        piece = tok.decode(tokens[k : k + width], skip_special_tokens=False)
        if piece.isascii() and piece.strip() and "<|" not in piece:
            if width > 1 or tok.encode(piece, add_special_tokens=False) == tokens[k : k + 1]:
                return piece
    return None


@pytest.mark.parametrize("width", [1, 2])
def test_stop_strings_cut_after_first_stop(team, greedy_qa, width):
    tok = team.tokenizer
    prompts = _prompts(team)
    base = greedy_qa
    stop = _ascii_piece(tok, base[0].completion_ids, 3, width)
    assert stop is not None
    if width == 1:
        assert len(tok.encode(stop, add_special_tokens=False)) == 1  # single-token stop: an extra eos id
    else:
        assert len(tok.encode(stop, add_special_tokens=False)) > 1  # multi-token stop: decoded-tail check
    cut = _flat(team.generate("qa", prompts, SamplingConfig(temperature=0, max_new_tokens=16, stop=(stop,))))
    eos = tok.eos_token_id
    for full, s in zip(base, cut, strict=True):
        expect = _first_hit(tok, full.completion_ids, (stop,))
        if eos in full.completion_ids:
            e = full.completion_ids.index(eos) + 1
            expect = e if expect is None else min(expect, e)
        if expect is None:
            assert s.finish_reason == "length" and s.completion_ids == full.completion_ids
        else:
            assert s.finish_reason == "stop"
            assert s.completion_ids == full.completion_ids[:expect]
            assert s.logprobs == pytest.approx(full.logprobs[:expect], abs=1e-5)
    assert cut[0].finish_reason == "stop" and stop in cut[0].text


def test_added_token_stops_end_rows_by_id_without_decoding(team, monkeypatch):
    import joy_agents.sampling.generate as generate

    seen = []

    class Spy(generate.StopCriterion):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            seen.append(self)

    monkeypatch.setattr(generate, "StopCriterion", Spy)
    team.generate("qa", _prompts(team)[:1], SamplingConfig(temperature=0, max_new_tokens=4, stop=("</answer>", "zz")))
    answer_end = team.tokenizer.convert_tokens_to_ids("</answer>")
    assert seen[0].stop_strings == ("zz",)  # only the plain-text stop is looked for in the decoded tail
    assert answer_end in seen[0].stop_ids.tolist()


def test_eos_from_generation_config_ends_rows_but_content_tokens_stay_in_the_text(team, greedy_qa):
    tok = team.tokenizer
    prompts = _prompts(team)[:1]
    cfg = SamplingConfig(temperature=0, max_new_tokens=16, stop=())
    full = greedy_qa[0]
    assert len(full.completion_ids) == 16
    extra = full.completion_ids[5]
    hf = team.model_for("qa").get_base_model()
    saved = hf.generation_config.eos_token_id
    hf.generation_config.eos_token_id = [tok.eos_token_id, extra]
    try:
        s = team.generate("qa", prompts, cfg)[0][0]
    finally:
        hf.generation_config.eos_token_id = saved
    m = full.completion_ids.index(extra) + 1
    assert s.finish_reason == "stop" and s.completion_ids == full.completion_ids[:m]
    assert s.completion_ids[-1] == extra  # the eos token is kept in the ids ...
    # ... and in the text unless it is a special (end-of-turn / padding) token: the tiny model's
    # generation_config stops on </answer>, which must reach the env
    expected = full.completion_ids[:m] if extra not in tok.all_special_ids else full.completion_ids[: m - 1]
    assert s.text == tok.decode(expected, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    assert hf.generation_config.eos_token_id == saved


def test_answer_end_token_listed_as_eos_stays_in_the_text(team):
    tok = team.tokenizer
    end = tok.convert_tokens_to_ids("</answer>")
    hf = team.model_for("qa").get_base_model()
    saved = hf.generation_config.eos_token_id
    hf.generation_config.eos_token_id = [tok.eos_token_id, end]  # as the embedded tiny model ships
    lm_head = hf.lm_head

    def favour_end(module, inputs, output):
        output = output.clone()
        output[..., end] += 1e4
        return output

    handle = lm_head.register_forward_hook(favour_end)
    try:
        s = team.generate("qa", _prompts(team)[:1], SamplingConfig(temperature=0, max_new_tokens=8))[0][0]
    finally:
        handle.remove()
        hf.generation_config.eos_token_id = saved
    assert s.completion_ids == [end] and s.finish_reason == "stop" and s.text == "</answer>"


def test_text_keeps_special_tokens_except_eos(team):
    tok = team.tokenizer
    torch.manual_seed(3)
    samples = _flat(team.generate("qa", _prompts(team), SamplingConfig(max_new_tokens=12), num_samples=4))
    for s in samples:
        ids = [t for t in s.completion_ids if t not in (tok.eos_token_id, tok.pad_token_id)]
        assert s.text == tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    assert any(s.completion_ids[-1] == tok.eos_token_id for s in samples if s.finish_reason == "stop") or all(
        s.finish_reason == "length" for s in samples
    )


def test_stop_criterion_matches_multi_token_spelling(team):
    """A stop that is one added token also ends a row that spells it with several ordinary tokens."""
    from joy_agents.sampling.tokens import StopCriterion

    tok = team.tokenizer
    answer_end = tok.convert_tokens_to_ids("</answer>")
    pieces = tok.encode("</", add_special_tokens=False) + tok.encode("answer>", add_special_tokens=False)
    assert answer_end not in pieces and len(pieces) > 1
    filler = tok.encode(" price", add_special_tokens=False)[:1] * (len(pieces) + 2)
    rows = [
        pieces + filler,  # spelled out: stops at the last piece
        filler[:2] + [answer_end] + filler,  # the added token itself
        filler[:3] + [tok.eos_token_id] + filler,  # eos
        filler + filler,  # never stops
    ]
    width = max(len(r) for r in rows)
    rows = [r + filler * width for r in rows]
    prompt = [1, 5, 9]
    crit = StopCriterion(tok, [tok.eos_token_id, answer_end], ("</answer>",), len(prompt), 4, torch.device("cpu"))
    ids = torch.tensor([prompt + r[:width] for r in rows])
    for n in range(1, width + 1):
        done = crit(ids[:, : len(prompt) + n])
    assert crit.stop_len.tolist() == [len(pieces), 3, 4, -1]
    assert done.tolist() == [True, True, True, False]


def _next_token_probs(team: TeamPolicy, role: str, prompt: list[int], temperature: float) -> torch.Tensor:
    vocab = len(team.tokenizer)
    with torch.no_grad():
        lp = team.logprobs(role, [prompt] * vocab, [[v] for v in range(vocab)], temperature=temperature)
    return torch.cat(lp).exp()


def test_sampling_distribution_temperature_and_top_p(team):
    prompt = _prompts(team)[0]
    n = 1500
    probs = _next_token_probs(team, "qa", prompt, 0.5)
    assert probs.sum().item() == pytest.approx(1.0, abs=1e-4)
    torch.manual_seed(5)
    first = [g.completion_ids[0] for g in team.generate("qa", [prompt], SamplingConfig(0.5, max_new_tokens=1), n)[0]]
    counts = torch.bincount(torch.tensor(first), minlength=len(probs)).float() / n
    for v in probs.argsort(descending=True)[:5].tolist():
        p = probs[v].item()
        assert abs(counts[v].item() - p) < 4.5 * (p * (1 - p) / n) ** 0.5 + 1e-3
    # top-p: every sampled token lies in the nucleus; the nucleus is renormalised
    probs1 = _next_token_probs(team, "qa", prompt, 1.0)
    order = probs1.argsort(descending=True)
    before = torch.cumsum(probs1[order], 0) - probs1[order]
    nucleus = set(order[before < 0.3].tolist())
    torch.manual_seed(6)
    first = [
        g.completion_ids[0] for g in team.generate("qa", [prompt], SamplingConfig(1.0, 0.3, max_new_tokens=1), n)[0]
    ]
    assert set(first) <= nucleus and len(set(first)) > 1
    top = order[0].item()
    p_top = probs1[top].item() / probs1[list(nucleus)].sum().item()
    assert abs(first.count(top) / n - p_top) < 4.5 * (p_top * (1 - p_top) / n) ** 0.5 + 1e-3
    # a vanishing nucleus is greedy
    greedy = team.generate("qa", [prompt], SamplingConfig(0, max_new_tokens=6, stop=()))[0][0]
    tiny = team.generate("qa", [prompt], SamplingConfig(1.0, 1e-6, max_new_tokens=6, stop=()), 2)[0]
    assert all(s.completion_ids == greedy.completion_ids for s in tiny)


def test_generate_restores_mode_and_generation_config(team):
    model = team.model_for("qa")
    hf = model.get_base_model()
    hf.generation_config.top_k = 3  # model defaults must not leak into sampling
    hf.generation_config.repetition_penalty = 5.0
    model.train()
    try:
        torch.manual_seed(2)
        s = team.generate("qa", _prompts(team)[:1], SamplingConfig(1.0, max_new_tokens=10), num_samples=4)
        assert model.training
        with torch.no_grad():
            flat = _flat(s)
            model.eval()
            tf = team.logprobs("qa", [x.prompt_ids for x in flat], [x.completion_ids for x in flat], 1.0)
        for x, lp in zip(flat, tf, strict=True):  # a leaked repetition penalty would change these
            assert torch.allclose(torch.tensor(x.logprobs), lp, atol=1e-4, rtol=0)
        # a leaked top_k=3 would keep every sampled token among the 3 most likely
        with team.use_role("qa"), torch.no_grad():
            ranks = []
            for x in flat:
                logits = model(input_ids=torch.tensor([x.prompt_ids + x.completion_ids])).logits[0]
                logits = logits[len(x.prompt_ids) - 1 : -1]
                chosen = logits.gather(-1, torch.tensor(x.completion_ids)[:, None])
                ranks += (logits > chosen).sum(-1).tolist()
        assert max(ranks) >= 3
    finally:
        hf.generation_config.top_k = None
        hf.generation_config.repetition_penalty = None
        model.eval()
    assert hf.generation_config.top_k is None


# ---------------------------------------------------------------------------------------------- adapters
def test_shared_base_one_peft_model_distinct_adapters(team):
    shared = team.model_for("master")
    assert all(team.model_for(r) is shared for r in ROLES)
    assert sorted(shared.peft_config) == sorted(ROLES)
    params = {r: {id(p) for p in team.trainable_parameters(r)} for r in ROLES}
    for a in ROLES:
        assert params[a] and all(params[a].isdisjoint(params[b]) for b in ROLES if b != a)
        assert all(p.requires_grad for p in team.trainable_parameters(a))
    base = [p for n, p in shared.named_parameters() if "lora_" not in n]
    assert base and not any(p.requires_grad for p in base)
    prompts = _prompts(team)
    cfg = SamplingConfig(temperature=0, max_new_tokens=6, stop=())
    outs = {r: [s.completion_ids for s in _flat(team.generate(r, prompts, cfg))] for r in ROLES}
    assert len({json.dumps(v) for v in outs.values()}) == len(ROLES)


def test_use_role_activates_and_restores(team):
    shared = team.model_for("qa")
    team.generate("math", _prompts(team)[:1], SamplingConfig(max_new_tokens=2))
    assert shared.active_adapter == "math"
    with team.use_role("qa") as m:
        assert m is shared and shared.active_adapter == "qa"
    assert shared.active_adapter == "math"
    with pytest.raises(KeyError, match="unknown role"), team.use_role("boss"):
        pass


def test_backward_reaches_only_the_roles_adapter(team):
    prompts = _prompts(team)
    comps = [p[-5:] + [7, 8, 9] for p in prompts]
    params = {r: team.trainable_parameters(r) for r in ROLES}
    shared = team.model_for("qa")
    base = [p for n, p in shared.named_parameters() if "lora_" not in n]

    def clear():
        for p in shared.parameters():
            p.grad = None

    clear()
    lp = team.logprobs("qa", prompts, comps, temperature=0.7)
    assert all(t.requires_grad for t in lp)
    torch.stack([t.sum() for t in lp]).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in params["qa"])
    assert all(p.grad is None for r in ROLES if r != "qa" for p in params[r])
    assert all(p.grad is None for p in base)
    # a joint loss over two roles (forwards one after the other) reaches both and nobody else
    clear()
    joint = team.logprobs("qa", prompts, comps, 1.0)[0].sum() + team.logprobs("math", prompts, comps, 1.0)[1].sum()
    joint.backward()
    for r in ROLES:
        got = [p.grad is not None and p.grad.abs().sum() > 0 for p in params[r]]
        assert all(got) if r in ("qa", "math") else not any(got)
    clear()
    with torch.no_grad():
        assert not team.logprobs("qa", prompts, comps, 1.0)[0].requires_grad


def test_logprobs_validation(team):
    with pytest.raises(ValueError, match="one completion per prompt"):
        team.logprobs("qa", [[1, 2]], [[3], [4]], 1.0)
    with pytest.raises(ValueError, match="out of range"):
        team.logprobs("qa", [[1, 2]], [[10**6]], 1.0)
    assert team.logprobs("qa", [[1, 2]], [[]], 1.0)[0].numel() == 0
    mixed = team.logprobs("qa", [[1, 2], [1, 2, 3]], [[], [4, 5]], 1.0)
    assert [t.numel() for t in mixed] == [0, 2]


# ---------------------------------------------------------------------------------------------- memory
def test_parameter_bytes_five_adapters_on_one_base(team, model_dirs):
    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_pretrained(model_dirs[0], dtype=torch.float32)
    plain_bytes = parameter_bytes(plain)
    lora_bytes = sum(p.numel() * p.element_size() for r in ROLES for p in team.trainable_parameters(r))
    assert team.parameter_bytes() == plain_bytes + lora_bytes  # base storage counted once
    small = TeamPolicy(TeamConfig(model=model_dirs[0], lora_r=1, lora_target_modules=("q_proj", "v_proj")))
    assert small.parameter_bytes() / plain_bytes <= 1.2
    full = TeamPolicy(TeamConfig(model=model_dirs[0], roles=("qa", "math"), use_lora=False))
    assert full.parameter_bytes() == 2 * plain_bytes  # without LoRA every role holds its own copy


def test_qwen25_05b_sized_team_within_1_2x():
    """Five r=16 adapters on every projection of a Qwen2.5-0.5B-sized model (meta device, bf16 base)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from joy_agents.adapters import QWEN2_5_0_5B_SHAPE, meta_team_memory_ratio

    with torch.device("meta"):
        base = parameter_bytes(Qwen2ForCausalLM(Qwen2Config(**QWEN2_5_0_5B_SHAPE)).to(torch.bfloat16))
    assert 480e6 < base / 2 < 500e6
    assert 1.0 < meta_team_memory_ratio(config=TeamConfig(model="unused", roles=ROLES)) <= 1.2


# ---------------------------------------------------------------------------------------------- save / load
def test_save_load_reproduces_outputs(tmp_path, model_dirs):
    base, big = model_dirs
    cfg = TeamConfig(model=base, roles=("master", "qa", "math"), separate_models={"master": big}, lora_r=2)
    team = TeamPolicy(cfg)
    _perturb(team, seed=7)
    assert team.model_for("master") is not team.model_for("qa")
    assert team.model_for("qa") is team.model_for("math")
    assert team.model_for("master").get_input_embeddings().embedding_dim == 48
    prompts = _prompts(team)
    cfg_s = SamplingConfig(temperature=0, max_new_tokens=6, stop=())
    before = {r: _flat(team.generate(r, prompts, cfg_s)) for r in cfg.roles}
    team.save(str(tmp_path / "team"))
    assert sorted(os.listdir(tmp_path / "team")) == ["master", "math", "qa", "team.json"]
    loaded = TeamPolicy.load(str(tmp_path / "team"), device="cpu")
    assert loaded.config == TeamConfig(
        **{**cfg.to_dict(), "model": os.path.abspath(base), "separate_models": {"master": os.path.abspath(big)}}
    )
    for r in cfg.roles:
        after = _flat(loaded.generate(r, prompts, cfg_s))
        assert [s.completion_ids for s in after] == [s.completion_ids for s in before[r]]
        assert [s.logprobs for s in after] == [s.logprobs for s in before[r]]
        a, b = team.trainable_parameters(r), loaded.trainable_parameters(r)
        assert len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
        assert all(p.requires_grad for p in b)
    with pytest.raises(TypeError, match="unknown TeamConfig fields"):
        TeamPolicy.load(str(tmp_path / "team"), colour="red")
    with pytest.raises(FileNotFoundError, match="team.json"):
        TeamPolicy.load(str(tmp_path))


def test_full_finetune_roles_own_copies_save_load(tmp_path, model_dirs):
    team = TeamPolicy(TeamConfig(model=model_dirs[0], roles=("qa", "math"), use_lora=False))
    qa, math_model = team.model_for("qa"), team.model_for("math")
    assert qa is not math_model
    assert team.trainable_parameters("qa") == list(qa.parameters())
    with torch.no_grad():
        for p in team.trainable_parameters("math"):
            p.mul_(1.5)
    prompts = _prompts(team)
    cfg_s = SamplingConfig(temperature=0, max_new_tokens=6, stop=())
    before = {r: _flat(team.generate(r, prompts, cfg_s)) for r in ("qa", "math")}
    assert [s.logprobs for s in before["qa"]] != [s.logprobs for s in before["math"]]
    lp = team.logprobs("math", prompts[:1], [before["math"][0].completion_ids], 1.0)[0]
    lp.sum().backward()
    assert all(p.grad is None for p in qa.parameters())
    assert any(p.grad is not None for p in math_model.parameters())
    team.save(str(tmp_path / "full"))
    loaded = TeamPolicy.load(str(tmp_path / "full"))
    for r in ("qa", "math"):
        after = _flat(loaded.generate(r, prompts, cfg_s))
        assert [s.completion_ids for s in after] == [s.completion_ids for s in before[r]]
        assert [s.logprobs for s in after] == [s.logprobs for s in before[r]]


def test_missing_saved_role_is_a_clear_error(tmp_path, model_dirs):
    team = TeamPolicy(TeamConfig(model=model_dirs[0], roles=("qa",), lora_r=2))
    team.save(str(tmp_path / "t"))
    with pytest.raises(FileNotFoundError, match="role 'math'"):
        TeamPolicy(TeamConfig(model=model_dirs[0], roles=("qa", "math")), adapters_dir=str(tmp_path / "t"))
