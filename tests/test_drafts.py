"""Prompt-lookup drafts: the lookup, the acceptance rule, and the continuous engine checking drafts in its decode
forwards (same samples and log-probs as one token per forward, in fewer forwards)."""

from __future__ import annotations

import random

import pytest
import torch

from joy_agents.policy import SamplingConfig
from joy_agents.rollout import RolloutConfig, RolloutEngine
from joy_agents.sampling import continuous as engine_module
from joy_agents.sampling.continuous import ContinuousSampler
from joy_agents.sampling.drafts import PromptLookup, accepted_length, step_width
from joy_agents.sampling.runner import LaneRunner
from joy_agents.sampling.settings import GenerationSettings


def _brute_force_draft(tokens, k, max_ngram, min_ngram):
    for n in range(min(max_ngram, len(tokens)), min_ngram - 1, -1):
        suffix = tokens[len(tokens) - n :]
        for end in range(len(tokens) - 2, n - 2, -1):  # latest earlier occurrence with a token after it
            if tokens[end - n + 1 : end + 1] == suffix:
                return tokens[end + 1 : end + 1 + k]
    return []


def test_lookup_drafts_what_followed_the_latest_occurrence_of_the_longest_suffix():
    lookup = PromptLookup([1, 2, 3, 9, 1, 2, 3, 7, 5, 1, 2, 3], max_ngram=3, min_ngram=2)
    assert lookup.draft(2) == [7, 5]  # (1, 2, 3) last seen before 7 5
    assert lookup.draft(0) == []
    lookup.extend([4])
    assert lookup.draft(3) == []  # (3, 4) and (2, 3, 4) never occurred; unigrams are below min_ngram
    assert PromptLookup([5, 6, 4], min_ngram=1).draft(2) == []  # no token repeats
    assert PromptLookup([5, 6, 5], min_ngram=1).draft(2) == [6, 5]
    with pytest.raises(ValueError, match="min_ngram"):
        PromptLookup([1, 2], max_ngram=2, min_ngram=3)


def test_lookup_matches_a_brute_force_search_as_the_context_grows():
    rng = random.Random(0)
    for trial in range(200):
        max_ngram, min_ngram = rng.choice([(3, 1), (3, 2), (4, 2), (2, 2)])
        tokens = [rng.randrange(4) for _ in range(rng.randrange(1, 12))]
        lookup = PromptLookup(tokens, max_ngram=max_ngram, min_ngram=min_ngram)
        for _ in range(6):
            k = rng.randrange(1, 5)
            assert lookup.draft(k) == _brute_force_draft(tokens, k, max_ngram, min_ngram), (trial, tokens)
            more = [rng.randrange(4) for _ in range(rng.randrange(1, 4))]
            tokens = tokens + more
            lookup.extend(more)


def test_accepted_length_is_the_run_of_samples_that_reproduce_the_draft():
    assert accepted_length([4, 5, 6], [4, 5, 6, 9]) == 3  # all kept; 9 is the extra sample
    assert accepted_length([4, 5, 6], [4, 8, 6, 9]) == 1  # 8 replaces 5 and ends the step
    assert accepted_length([4, 5, 6], [7, 5, 6, 9]) == 0
    assert accepted_length([], [3]) == 0


def test_a_steps_draft_width_is_what_half_of_its_rows_fill():
    assert step_width([3, 1], rows=4) == 1  # two of four rows draft at least 1 token
    assert step_width([3, 2, 1], rows=4) == 2
    assert step_width([3], rows=4) == 0  # one row of four: its draft would be mostly padding
    assert step_width([3], rows=1) == 3 and step_width([3], rows=2) == 3
    assert step_width([], rows=3) == 0


def _prompt(team, role, text):
    return team.encode_prompt(role, [{"role": "system", "content": role}, {"role": "user", "content": text}], None)


def _requests(team):
    # repeated phrases give prompt lookup something to find
    text = "order 8812 of 8812 items: {i} and order 8812 again {i}"
    return [(team.roles[i % 5], _prompt(team, team.roles[i % 5], text.format(i=i))) for i in range(7)]


def _run(team, requests, sampling, **kw):
    """The samples of ``requests`` (one each) by a ContinuousSampler of options ``kw``, and the sampler."""
    with ContinuousSampler(team, sampling, **kw) as sampler:
        for i, (role, prompt) in enumerate(requests):
            sampler.submit(role, prompt, i)
        got = {}
        while sampler.busy:
            got.update(sampler.step())  # (key, sample) pairs
    return [got[i] for i in range(len(requests))], sampler


def _sample(team, requests, sampling, **kw):
    samples, sampler = _run(team, requests, sampling, **kw)
    return samples, sampler.stats


class _Oracle:
    """A drafter that proposes the row's known greedy continuation, with every ``wrong``-th token changed."""

    answers: dict[tuple[int, ...], list[int]] = {}
    wrong = 0

    def __init__(self, tokens):
        self.tokens = list(tokens)
        self.prompt = next(p for p in self.answers if tuple(self.tokens[: len(p)]) == p)

    def extend(self, tokens):
        self.tokens += list(tokens)

    def draft(self, k):
        done = len(self.tokens) - len(self.prompt)
        out = list(self.answers[self.prompt][done : done + k])
        if self.wrong:
            out = [t if (done + j) % self.wrong else t + 1 for j, t in enumerate(out)]
        return out


@pytest.mark.parametrize("wrong, path", [(0, "stacked"), (3, "stacked"), (1, "stacked"), (3, "adapter_names")])
def test_drafted_greedy_samples_equal_plain_decoding_in_fewer_forwards(distinct_team, monkeypatch, wrong, path):
    """Drafts that are all right, right but for every third token, or all wrong: the samples, texts and
    log-probs are those of one token per forward; right drafts save forwards. ``adapter_names``: rows of mixed
    roles through PEFT's own per-row adapters (the path of LoRA variants that StackedLoRA does not cover)."""
    team = distinct_team
    if path == "adapter_names":
        monkeypatch.setattr(LaneRunner, "stacked", lambda self: None)
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=12, stop=("</answer>",))
    requests = _requests(team)
    plain, plain_stats = _sample(team, requests, sampling, draft_tokens=0, max_rows=3)
    monkeypatch.setattr(
        _Oracle, "answers", {tuple(p): s.completion_ids for (_, p), s in zip(requests, plain, strict=True)}
    )
    monkeypatch.setattr(_Oracle, "wrong", wrong)
    monkeypatch.setattr(engine_module, "PromptLookup", _Oracle)
    drafted, stats = _sample(team, requests, sampling, draft_tokens=4, max_rows=3)
    for a, b in zip(drafted, plain, strict=True):
        assert a.completion_ids == b.completion_ids and a.finish_reason == b.finish_reason and a.text == b.text
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4)
    assert stats.draft_tokens > 0
    if wrong == 0:
        assert stats.draft_tokens_kept == stats.draft_tokens
        assert stats.decode_forwards < plain_stats.decode_forwards / 2
    if wrong == 1:
        assert stats.draft_tokens_kept == 0


def _repeating(token):
    """A drafter class that always proposes ``token`` (in place of PromptLookup)."""

    class Repeating:
        def __init__(self, tokens):
            pass

        def extend(self, tokens):
            pass

        def draft(self, k):
            return [token] * k

    return Repeating


def _favourite(team, role, prompt, probability):
    """The likeliest next token of ``prompt`` and the temperature at which it has ``probability``."""
    with torch.no_grad(), team.use_role(role) as model:
        training = model.training
        model.eval()  # no adapter dropout: the engine samples in eval mode
        logits = model(input_ids=torch.tensor([prompt])).logits[0, -1].double()
        model.train(training)
    favourite = int(logits.argmax())
    low, high = 1e-4, 100.0
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if (logits / mid).softmax(-1)[favourite] > probability else (low, mid)
    return favourite, (low + high) / 2


def test_drafted_samples_keep_the_models_distribution(distinct_team, monkeypatch):
    """At temperature > 0 a draft is kept only when the model's own sample equals it: a drafter that always
    proposes the model's likeliest first token leaves that token at the model's probability (0.5 at the
    temperature chosen here), where keeping drafts unchecked would make it certain."""
    team = distinct_team
    prompt = _prompt(team, "qa", "pick a token")
    favourite, temperature = _favourite(team, "qa", prompt, 0.5)
    sampling = SamplingConfig(temperature=temperature, max_new_tokens=2)

    monkeypatch.setattr(engine_module, "PromptLookup", _repeating(favourite))
    rates = {}
    for draft_tokens in (0, 1):
        torch.manual_seed(0)
        samples, stats = _sample(team, [("qa", prompt)] * 400, sampling, draft_tokens=draft_tokens, draft_max_rows=512)
        rates[draft_tokens] = sum(s.completion_ids[0] == favourite for s in samples) / len(samples)
    assert abs(rates[1] - 0.5) < 0.1 and abs(rates[0] - 0.5) < 0.1  # 400 draws: 4 standard deviations
    assert 0 < stats.draft_tokens_kept <= sum(s.completion_ids[0] == favourite for s in samples)


def test_sampled_drafted_logprobs_are_the_teacher_forced_ones(distinct_team, monkeypatch):
    """Sampled rows whose drafts (the greedy continuation) are partly kept: every log-prob is the teacher-forced
    ``log_softmax(logits / temperature)`` of its token."""
    team = distinct_team
    requests = _requests(team)
    greedy, _ = _sample(team, requests, SamplingConfig(temperature=0.0, max_new_tokens=16), draft_tokens=0)
    monkeypatch.setattr(
        _Oracle, "answers", {tuple(p): s.completion_ids for (_, p), s in zip(requests, greedy, strict=True)}
    )
    monkeypatch.setattr(engine_module, "PromptLookup", _Oracle)
    _, temperature = _favourite(team, *requests[0], 0.8)  # greedy tokens likely, not certain
    sampling = SamplingConfig(temperature=temperature, max_new_tokens=16)
    torch.manual_seed(1)
    out, stats = _sample(team, requests, sampling, draft_tokens=3)
    for (role, _), s in zip(requests, out, strict=True):
        (lp,) = team.logprobs(role, [s.prompt_ids], [s.completion_ids], temperature=sampling.temperature)
        # logits / temperature: rounding of the logits (1e-5 here) grows by 1 / temperature
        assert torch.allclose(torch.tensor(s.logprobs), lp, atol=1e-4 / min(1.0, temperature))
    assert 0 < stats.draft_tokens_kept < stats.draft_tokens
    assert any(s.completion_ids != g.completion_ids for s, g in zip(out, greedy, strict=True))


def test_columns_of_rejected_drafts_are_compacted_away(distinct_team, monkeypatch):
    """Rejected drafts leave masked columns; once they are most of the batch, compaction cuts them and the
    samples stay the same."""
    from joy_agents.sampling import kv_slots

    team = distinct_team
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=24)
    requests = _requests(team)[:3]
    plain, _ = _sample(team, requests, sampling, draft_tokens=0)

    monkeypatch.setattr(engine_module, "PromptLookup", _repeating(1))  # never the model's choice here
    monkeypatch.setattr(kv_slots, "MIN_TRIM_COLUMNS", 8)
    widths = []
    original = kv_slots.SlotBatch.compact

    def spy(self):
        original(self)
        widths.append(self.length)

    monkeypatch.setattr(kv_slots.SlotBatch, "compact", spy)
    drafted, stats = _sample(team, requests, sampling, draft_tokens=6)
    assert [s.completion_ids for s in drafted] == [s.completion_ids for s in plain]
    assert stats.draft_tokens_kept == 0 and widths  # compacted at least once
    longest = max(len(p) for _, p in requests) + sampling.max_new_tokens
    assert max(widths) <= longest  # no dead column survives a compaction


def test_rollouts_with_and_without_drafts_play_the_same_greedy_episodes(distinct_team):
    def run(draft_tokens):
        config = RolloutConfig(
            GenerationSettings(max_new_tokens=24, max_cycles=4, max_prompt_tokens=256, draft_tokens=draft_tokens)
        )
        engine = RolloutEngine(distinct_team, "joy/mixed-v0", "validation", 0, config, progress=False)
        trajectories = engine.run(list(range(6)))
        return [[(n.role, n.completion_ids) for n in t.nodes] for t in trajectories], engine.stats

    plain, plain_stats = run(0)
    drafted, stats = run(3)
    assert drafted == plain
    assert stats.draft_tokens > 0 and stats.decode_forwards <= plain_stats.decode_forwards
    with pytest.raises(ValueError, match="draft_tokens"):
        GenerationSettings(draft_tokens=-1)
    with pytest.raises(ValueError, match="draft_max_rows"):
        GenerationSettings(draft_max_rows=0)


def test_a_stop_inside_a_kept_draft_ends_the_row_there(distinct_team, monkeypatch):
    """The drafted tokens after a stop are dropped, and the row's kept cache holds exactly its own tokens (the
    next turn reuses it as it would after plain decoding)."""
    team = distinct_team
    requests = _requests(team)[:4]
    greedy, _ = _sample(team, requests, SamplingConfig(temperature=0.0, max_new_tokens=12), draft_tokens=0)
    stop_text = team.tokenizer.decode(greedy[0].completion_ids[4:5])
    assert stop_text.strip()
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=12, stop=(stop_text,))
    plain, _ = _sample(team, requests, sampling, draft_tokens=0)
    assert plain[0].finish_reason == "stop" and len(plain[0].completion_ids) <= 5
    answers = {tuple(p): s.completion_ids for (_, p), s in zip(requests, greedy, strict=True)}
    monkeypatch.setattr(_Oracle, "answers", answers)  # drafts run past the stop
    monkeypatch.setattr(engine_module, "PromptLookup", _Oracle)
    got, sampler = _run(team, requests, sampling, draft_tokens=6)
    prefixes = [e for lane in sampler._lanes.values() for e in lane.prefixes]
    for i, want in enumerate(plain):
        assert got[i].completion_ids == want.completion_ids and got[i].finish_reason == want.finish_reason
    assert sampler.stats.draft_tokens_kept > 0
    for entry in prefixes:
        assert all(k.shape[1] == len(entry.tokens) for k in entry.keys + entry.values)
