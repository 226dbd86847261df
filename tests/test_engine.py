"""The continuous-batching engine: per-row adapters, rows leaving and joining, log-probs, stops."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from joy_agents.policy import SamplingConfig
from joy_agents.sampling.base import sample_many
from joy_agents.sampling.continuous import ContinuousSampler, continuous_supported
from joy_agents.sampling.settings import GenerationSettings
from joy_agents.sampling.stacked_lora import StackedLoRA


@pytest.fixture
def team(distinct_team):
    return distinct_team


def _prompt(team, role, text):
    return team.encode_prompt(role, [{"role": "system", "content": role}, {"role": "user", "content": text}], None)


def test_stacked_lora_equals_each_rows_own_adapter(team):
    model = team.model_for("master")
    roles = ["math", "qa", "math", "master", "general"]
    ids = torch.randint(10, 200, (len(roles), 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = []
        for i, role in enumerate(roles):
            with team.use_role(role) as m:
                expected.append(m(input_ids=ids[i : i + 1]).logits)
        expected = torch.cat(expected)
        stack = StackedLoRA(model, team.roles)
        assert stack.supported
        stack.set_rows(roles)
        with stack:
            got = model(input_ids=ids).logits
        peft_mixed = model(input_ids=ids, adapter_names=roles).logits
    assert torch.allclose(got, expected, atol=1e-4)
    assert torch.allclose(peft_mixed, expected, atol=1e-4)
    assert "forward" not in vars(model.get_base_model().model.layers[0].self_attn.q_proj)  # restored


def test_sampled_logprobs_are_the_teacher_forced_ones(team):
    requests = [(r, _prompt(team, r, f"what is {i} plus {i}?")) for i, r in enumerate(team.roles)]
    out = sample_many(team, requests, SamplingConfig(temperature=1.0, top_p=0.9, max_new_tokens=10), num_samples=3)
    assert [len(g) for g in out] == [3] * len(requests)
    for (role, prompt), group in zip(requests, out, strict=True):
        lps = team.logprobs(role, [s.prompt_ids for s in group], [s.completion_ids for s in group], 1.0)
        for s, lp in zip(group, lps, strict=True):
            assert s.prompt_ids == prompt and len(s.logprobs) == len(s.completion_ids) == len(lp)
            assert torch.allclose(torch.tensor(s.logprobs), lp, atol=1e-4)


def test_greedy_samples_equal_generate_whatever_joins_when(team):
    """Requests of every role, more than fit at once: rows leave at their stop and waiting ones join."""
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=12, stop=("</answer>",))
    requests = [(team.roles[i % len(team.roles)], _prompt(team, team.roles[i % 5], "q" * (i + 1))) for i in range(9)]
    expected = [team.generate(role, [p], sampling)[0][0] for role, p in requests]
    for max_rows in (2, 64):
        with ContinuousSampler(team, sampling, max_rows=max_rows) as sampler:
            for i, (role, prompt) in enumerate(requests):
                sampler.submit(role, prompt, i)
            got = {}
            while sampler.busy:
                for key, sample in sampler.step():
                    got[key] = sample
        assert sampler.stats.rows_per_forward <= max_rows
        for i, want in enumerate(expected):
            assert got[i].completion_ids == want.completion_ids and got[i].finish_reason == want.finish_reason
            assert got[i].text == want.text
            assert torch.allclose(torch.tensor(got[i].logprobs), torch.tensor(want.logprobs), atol=1e-4)


def test_rows_stop_at_stop_strings_and_token_caps(team, monkeypatch):
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=5, stop=("</answer>",))
    sampler = ContinuousSampler(team, sampling)
    sampler.submit("qa", _prompt(team, "qa", "hi"), "a")
    (key, sample), *_ = [x for _ in range(5) for x in sampler.step()]
    assert key == "a" and len(sample.completion_ids) <= 5
    assert sample.finish_reason == ("length" if len(sample.completion_ids) == 5 else "stop")
    assert not sampler.busy and sampler.stats.tokens_kept == len(sample.completion_ids)


def test_bad_requests_are_refused_in_one_line(team):
    sampler = ContinuousSampler(team, SamplingConfig())
    with pytest.raises(ValueError, match="at least 2 tokens"):
        sampler.submit("qa", [5], 0)
    with pytest.raises(KeyError, match="unknown role"):
        sampler.submit("chef", [5, 6, 7], 0)
    with pytest.raises(ValueError, match="max_rows"):
        ContinuousSampler(team, SamplingConfig(), max_rows=0)
    assert continuous_supported(team)


def _drain(sampler):
    out = {}
    while sampler.busy:
        for key, sample in sampler.step():
            out[key] = sample
    return out


def test_a_prompt_that_extends_a_finished_turn_reuses_its_cache(team):
    """An episode's next turn (its last prompt, the turn, what came back) prefills only what it adds, with the
    samples of a fresh prefill; another role never reuses it."""
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=8)
    first = _prompt(team, "math", "what is 2 plus 3?")
    with ContinuousSampler(team, sampling) as sampler:
        sampler.submit("math", first, "first")
        turn = _drain(sampler)["first"]
        follow = team.tokenizer.encode("\nresult: 5\nso?", add_special_tokens=False)
        second = first + turn.completion_ids + follow
        sampler.submit("math", second, "second")
        sampler.submit("qa", second, "other role")
        got = _drain(sampler)
        stats = sampler.stats
    assert stats.reused_tokens == len(first) + len(turn.completion_ids) - 1  # the first turn's cached tokens
    assert stats.prompt_tokens == len(first) + 2 * len(second)
    for key, role in (("second", "math"), ("other role", "qa")):
        want = team.generate(role, [second], sampling)[0][0]
        assert got[key].completion_ids == want.completion_ids
        assert torch.allclose(torch.tensor(got[key].logprobs), torch.tensor(want.logprobs), atol=1e-4)


def test_kept_prefixes_stay_under_their_token_cap(team):
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=4)
    system = "You answer questions about the shop, its orders, returns and coupons, in one short sentence."
    prompts = [
        team.encode_prompt("qa", [{"role": "system", "content": system}, {"role": "user", "content": f"q{i}?"}], None)
        for i in range(4)
    ]
    cap = len(prompts[0]) + 10  # room for one finished row's tokens, not two
    with ContinuousSampler(team, sampling, prefix_tokens=cap) as sampler:
        for i, p in enumerate(prompts):
            sampler.submit("qa", p, i)
            _drain(sampler)
            lane = next(iter(sampler._lanes.values()))
            assert lane.prefixes.tokens <= cap and len(lane.prefixes) == 1
        # every later prompt shared the role's start with the one kept before it
        assert sampler.stats.reused_tokens >= 3 * 16
    with ContinuousSampler(team, sampling, prefix_tokens=0) as sampler:
        for i, p in enumerate(prompts):
            sampler.submit("qa", p, i)
            _drain(sampler)
        assert sampler.stats.reused_tokens == 0


def test_slot_batch_reuses_free_slots_and_compacts(team):
    """Rows leaving and joining at every step: free slots are refilled in place, and samples stay those of
    generate whatever the batch went through."""
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=6)
    requests = [(team.roles[i % 5], _prompt(team, team.roles[i % 5], "x" * (1 + 7 * i))) for i in range(12)]
    expected = [team.generate(role, [p], sampling)[0][0].completion_ids for role, p in requests]
    with ContinuousSampler(team, sampling, max_rows=4, prefix_tokens=0) as sampler:
        for i, (role, prompt) in enumerate(requests):
            sampler.submit(role, prompt, i)
        got, widths = {}, []
        while sampler.busy:
            for key, sample in sampler.step():
                got[key] = sample.completion_ids
            batch = next(iter(sampler._lanes.values())).batch
            widths.append(len(batch.rows))
    assert [got[i] for i in range(len(requests))] == expected
    assert max(widths) <= 4  # slots are reused: the batch never grows past max_rows


def test_the_batch_width_follows_the_live_rows_not_the_whole_run(team, monkeypatch):
    """Slots refilled as fast as they free up: the leading columns no live row uses are cut, so the width stays
    near the live rows' lengths instead of growing with every step of the run."""
    from joy_agents.sampling import kv_slots

    sampling = SamplingConfig(temperature=0.0, max_new_tokens=6)
    requests = [(team.roles[i % 5], _prompt(team, team.roles[i % 5], "y" * (1 + i % 4))) for i in range(80)]

    def run():
        widths, got = [], {}
        with ContinuousSampler(team, sampling, max_rows=4, prefix_tokens=0) as sampler:
            for i, (role, prompt) in enumerate(requests):  # one request joins per step: rows end at staggered steps
                sampler.submit(role, prompt, i)
                for key, sample in sampler.step():
                    got[key] = sample.completion_ids
                widths.append(next(iter(sampler._lanes.values())).batch.length)
            while sampler.busy:
                for key, sample in sampler.step():
                    got[key] = sample.completion_ids
        return max(widths), got

    monkeypatch.setattr(kv_slots, "MIN_TRIM_COLUMNS", 10**9)
    untrimmed, expected = run()
    monkeypatch.setattr(kv_slots, "MIN_TRIM_COLUMNS", 8)
    trimmed, got = run()
    assert got == expected
    longest = max(len(p) for _, p in requests) + sampling.max_new_tokens
    assert trimmed <= 3 * longest < untrimmed


def test_sampling_under_inference_mode_gives_the_same_samples(team):
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=6)
    requests = [(r, _prompt(team, r, f"hi {r}")) for r in ("qa", "math", "general")]
    expected = [g[0].completion_ids for g in sample_many(team, requests, sampling)]
    with torch.inference_mode():
        got = [g[0].completion_ids for g in sample_many(team, requests, sampling)]
    assert got == expected


def test_a_sampler_kept_across_a_weight_update_samples_the_new_weights(make_distinct_team):
    """Kept prefixes and the stacked adapters hold the old weights: an in-place update drops them."""
    team = make_distinct_team(3)
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=8)
    prompt = _prompt(team, "qa", "what is 2 plus 3? " * 4)  # long enough for its cache to be kept and reused
    with ContinuousSampler(team, sampling) as sampler:
        sampler.submit("qa", prompt, "before")
        sampler.submit("math", _prompt(team, "math", "hi"), "other")
        before = _drain(sampler)["before"]
        with torch.no_grad():
            for p in team.trainable_parameters("qa"):
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(5)) * 0.5)
        want = team.generate("qa", [prompt], sampling)[0][0]
        sampler.submit("qa", prompt, "after")
        sampler.submit("math", _prompt(team, "math", "hi"), "other")
        after = _drain(sampler)["after"]
        assert sampler.stats.reused_tokens == 0  # the prefix kept before the update was not reused
    assert want.completion_ids != before.completion_ids  # the update changed the greedy sample
    assert after.completion_ids == want.completion_ids
    assert torch.allclose(torch.tensor(after.logprobs), torch.tensor(want.logprobs), atol=1e-4)


def test_close_frees_the_rows_kept_prefixes_and_stacked_adapters(team):
    sampler = ContinuousSampler(team, SamplingConfig(temperature=0.0, max_new_tokens=4))
    with sampler:
        sampler.submit("qa", _prompt(team, "qa", "hello " * 10), 0)
        sampler.submit("math", _prompt(team, "math", "hello " * 10), 1)
        _drain(sampler)
        lanes = list(sampler._lanes.values())
        assert any(lane.prefixes for lane in lanes) and any(lane.runner._stack is not None for lane in lanes)
        runners = [weakref.ref(lane.runner) for lane in lanes]
        del lanes
    assert not sampler._lanes and not sampler.busy
    gc.collect()
    assert all(runner() is None for runner in runners)  # their batches and stacked adapters went with them


def test_bad_requests_are_refused_by_name(team):
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=4)
    prompt = _prompt(team, "qa", "hi")
    sampler = ContinuousSampler(team, sampling)
    with pytest.raises(TypeError, match="prompt_ids"):
        sampler.submit("qa", [float(t) for t in prompt], 0)
    with pytest.raises(TypeError, match="prompt_ids"):
        sampler.submit("qa", [True, False, True], 0)
    with pytest.raises(ValueError, match="num_samples must be an int >= 1, got 0"):
        sampler.submit("qa", prompt, 0, num_samples=0)
    assert not sampler.busy
    with pytest.raises(ValueError, match="engine must be one of"):
        sample_many(team, [("qa", prompt)], sampling, settings=GenerationSettings(engine="continous"))
    with pytest.raises(ValueError, match="draft_tokens must be an int >= 0"):
        sample_many(team, [("qa", prompt)], sampling, settings=GenerationSettings(engine="generate", draft_tokens=-1))


def test_a_model_with_a_sliding_window_is_sampled_per_role(tmp_path):
    """A Mistral-style config names its window only by ``sliding_window``: the continuous engine, whose cache
    keeps every column, is not used for it, and sampling falls back to one generate per role."""
    import json

    from joy_agents.policy import TeamConfig, TeamPolicy
    from joy_agents.tiny import build_tiny_llama

    path = build_tiny_llama(tmp_path / "mistral")
    config = json.loads((path / "config.json").read_text())
    config.update(model_type="mistral", architectures=["MistralForCausalLM"], sliding_window=4096)
    (path / "config.json").write_text(json.dumps(config))
    team = TeamPolicy(TeamConfig(model=str(path), lora_r=2, lora_alpha=4))
    assert not continuous_supported(team)
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=4)
    requests = [("qa", _prompt(team, "qa", "hello")), ("math", _prompt(team, "math", "hi"))]
    expected = [team.generate(r, [p], sampling)[0][0].completion_ids for r, p in requests]
    with pytest.warns(UserWarning) as caught:
        got = sample_many(team, requests, sampling)
    assert [g[0].completion_ids for g in got] == expected
    (warning,) = [w for w in caught if "engine continuous" in str(w.message)]  # announced once, in one line
    assert "sampling with engine generate" in str(warning.message) and "\n" not in str(warning.message)


# ------------------------------------------------------------------ the three parts, each alone
def test_the_runner_gives_the_models_own_next_token_logits_for_each_row(team):
    """:class:`LaneRunner` alone: rows prefilled into its slot batch (two roles, prompts of different lengths),
    then one forward gives each row the logits its own role's model gives after its prompt."""
    from types import SimpleNamespace

    from joy_agents.sampling.runner import LaneRunner
    from joy_agents.sampling.stats import EngineStats

    model = team.model_for("qa")
    runner = LaneRunner(team, model, team.tokenizer_for("qa"), EngineStats())
    rows = [SimpleNamespace(role=r, context=_prompt(team, r, "x" * n)) for r, n in (("qa", 3), ("math", 9))]
    for row in rows:
        runner.prefill(row.role, [row])
    with torch.no_grad():
        logits = runner.forward({})
    assert logits.shape[:2] == (2, 1) and runner.stats.decode_forwards == 1
    for i, row in enumerate(rows):
        with torch.no_grad():
            team.activate(row.role)
            want = model(input_ids=torch.tensor([row.context])).logits[0, -1]
        torch.testing.assert_close(logits[i, 0], want, atol=1e-4, rtol=1e-4)


def test_rows_sample_with_their_own_settings_in_one_call_per_setting():
    from joy_agents.sampling.tokens import sample_rows, sample_tokens

    logits = torch.randn(3, 2, 11, generator=torch.Generator().manual_seed(0))
    greedy, hot = SamplingConfig(temperature=0.0), SamplingConfig(temperature=1.0, top_p=0.5)
    tokens, logprobs = sample_rows(logits, [greedy, hot, None])  # a free slot samples with either
    assert tokens.shape == logprobs.shape == (3, 2)
    assert tokens[0].tolist() == logits[0].argmax(-1).tolist()
    torch.testing.assert_close(logprobs[0], torch.log_softmax(logits[0], -1).gather(-1, tokens[0, :, None])[:, 0])
    top = torch.softmax(logits[1], -1).sort(-1, descending=True)
    for position, token in enumerate(tokens[1].tolist()):  # within the nucleus of top_p 0.5
        order = top.indices[position].tolist()
        kept = 1 + int((top.values[position].cumsum(0) < 0.5).sum())
        assert token in order[:kept]
    torch.manual_seed(1)
    one = sample_tokens(logits.reshape(-1, 11), 1.0, 0.5)[0]
    torch.manual_seed(1)
    alike = sample_rows(logits, [hot, hot, hot])[0]  # one setting: exactly sample_tokens over all rows
    assert alike.reshape(-1).tolist() == one.tolist()


def test_a_row_takes_its_tokens_up_to_the_first_that_ends_it(team):
    from joy_agents.sampling.tokens import take_tokens, team_stop_rules

    rules = team_stop_rules(team, "qa", ("</answer>",))
    end = min(rules.end_ids)
    a, b, c = [t for t in range(10, 100) if t not in rules.end_ids][:3]  # ids that end nothing
    tokens, logprobs = [a], [-0.5]
    assert take_tokens(tokens, logprobs, [b, c], [-1.0, -2.0], rules, cap=10) is None
    assert tokens == [a, b, c] and logprobs == [-0.5, -1.0, -2.0]
    assert take_tokens(tokens, logprobs, [end, a], [-0.1, -0.2], rules, cap=10) == "stop"
    assert tokens == [a, b, c, end]  # the token after the stop is not taken
    capped: list[int] = []
    assert take_tokens(capped, [], [a, a, a], [0.0, 0.0, 0.0], rules, cap=2) == "length" and capped == [a, a]
