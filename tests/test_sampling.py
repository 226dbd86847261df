"""The sampling layer: one interface and a factory for the engines, one settings object that travels through
``results.json`` to ``joy-eval``, the fallback said in one line, and a continuous engine that runs out of memory
without losing a request."""

from __future__ import annotations

import ast
import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch

from joy_agents.config import Sample, SamplingConfig
from joy_agents.sampling import continuous
from joy_agents.sampling.base import Sampler, drain, make_sampler, sample_many
from joy_agents.sampling.continuous import ContinuousSampler
from joy_agents.sampling.generate import GenerateSampler
from joy_agents.sampling.settings import GenerationSettings, VLLMConfig
from joy_trainers.cli import eval_main
from joy_trainers.generation import saved_settings
from joy_trainers.grpo import GRPOConfig
from joy_trainers.rundir import run_results

ROOT = Path(__file__).resolve().parent.parent
GREEDY = SamplingConfig(temperature=0.0, max_new_tokens=10)


def _prompt(team, role, text):
    return team.encode_prompt(role, [{"role": "system", "content": role}, {"role": "user", "content": text}], None)


def _requests(team):
    return [(role, _prompt(team, role, f"question {i} for {role}")) for i, role in enumerate(team.roles * 2)]


# ------------------------------------------------------------------------------------------ the factory
def test_the_factory_makes_each_engines_sampler_and_each_is_a_sampler(distinct_team):
    continuous_sampler = make_sampler(distinct_team, GenerationSettings(max_batch_rows=7, draft_tokens=2), GREEDY)
    assert type(continuous_sampler) is ContinuousSampler
    assert (continuous_sampler.max_rows, continuous_sampler.draft_tokens) == (7, 2)
    generate_sampler = make_sampler(distinct_team, GenerationSettings(engine="generate"), GREEDY)
    assert type(generate_sampler) is GenerateSampler
    for sampler in (continuous_sampler, generate_sampler):
        assert isinstance(sampler, Sampler)
    with pytest.raises(TypeError, match="GenerationSettings"):
        make_sampler(distinct_team, {"engine": "generate"}, GREEDY)


def test_the_engine_table_holds_every_engine_and_each_row_makes_its_sampler(distinct_team, monkeypatch):
    """The engine names meet code in one table: one row per engine name, used by the factory, the checks and the
    start of a run's own engine."""
    from joy_agents.sampling import base
    from joy_agents.sampling.settings import ENGINES

    assert tuple(base.ENGINE_TABLE) == ENGINES
    assert [name for name in ENGINES if base.serves_from_own_engine(name)] == ["vllm"]
    made = []
    row = base.Engine(lambda team, settings, sampling: made.append(sampling) or GenerateSampler(team, sampling))
    monkeypatch.setitem(base.ENGINE_TABLE, "generate", row)
    assert type(make_sampler(distinct_team, GenerationSettings(engine="generate"), GREEDY)) is GenerateSampler
    assert made == [GREEDY]
    monkeypatch.setattr(base.generation_settings, "vllm_available", lambda: False)
    with pytest.raises(ValueError, match="rollout_engine=vllm needs vLLM, which is not installed"):
        base.check_engine("vllm", installed=True, name="rollout_engine")
    base.check_engine("vllm", name="rollout_engine")  # a known name, whether installed or not


def test_every_engine_gives_the_same_greedy_samples_through_the_interface(distinct_team):
    requests = _requests(distinct_team)
    out = {}
    for engine in ("continuous", "generate"):
        with make_sampler(distinct_team, GenerationSettings(engine=engine), GREEDY) as sampler:
            for i, (role, prompt) in enumerate(requests):
                sampler.submit(role, prompt, i)
            done = drain(sampler)
            assert not sampler.busy and sampler.stats.samples == len(requests)
        out[engine] = {key: s.completion_ids for key, s in done}
    assert out["continuous"] == out["generate"] and sorted(out["generate"]) == list(range(len(requests)))


class _ScriptedPolicy:
    """A policy that is not a TeamPolicy: any object with ``generate``."""

    calls: list[tuple[str, int]] = []

    def generate(self, role, prompts, sampling, num_samples=1):
        self.calls.append((role, len(prompts)))
        return [[Sample(list(p), [7], [0.0], f"{role}:{p[0]}", "stop")] for p in prompts]


def test_the_continuous_fallback_is_said_in_one_warning_line():
    policy = _ScriptedPolicy()
    with pytest.warns(UserWarning) as caught:
        sampler = make_sampler(policy, GenerationSettings(), GREEDY)
    assert type(sampler) is GenerateSampler
    (warning,) = [w for w in caught if "engine continuous" in str(w.message)]
    text = str(warning.message)
    assert "engine continuous" in text and "engine generate" in text and "\n" not in text
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # naming generate itself falls back to nothing: no warning
        make_sampler(policy, GenerationSettings(engine="generate"), GREEDY)


def test_node_wise_sampling_groups_each_roles_requests_into_one_call():
    policy = _ScriptedPolicy()
    policy.calls = []
    out = sample_many(
        policy, [("qa", [1, 2]), ("math", [3]), ("qa", [4])], GREEDY, 2, GenerationSettings(engine="generate")
    )
    assert policy.calls == [("qa", 4), ("math", 2)]  # one generate per role, its requests x samples
    assert [[s.text for s in group] for group in out] == [["qa:1"] * 2, ["math:3"] * 2, ["qa:4"] * 2]


# ------------------------------------------------------------------------------------------ the settings
def test_settings_are_frozen_checked_and_read_back_from_their_dict():
    settings = GenerationSettings(max_new_tokens=40, engine="generate", vllm=VLLMConfig(seed=3))
    assert GenerationSettings.from_dict(json.loads(json.dumps(settings.to_dict()))) == settings
    with pytest.raises(AttributeError):
        settings.engine = "vllm"
    for bad, message in (
        ({"engine": "fast"}, "engine must be one of continuous, generate, vllm, got 'fast'"),
        ({"max_new_tokens": 0}, "max_new_tokens must be an int >= 1, got 0"),
        ({"top_p": 0}, "top_p must be in (0, 1]"),
        ({"speed": 1}, "unknown generation setting(s) ['speed']"),
    ):
        with pytest.raises(ValueError) as exc:
            GenerationSettings.from_dict(bad)
        assert message in str(exc.value) and "\n" not in str(exc.value)


def test_each_setting_has_one_default_that_the_configs_point_at():
    default = GenerationSettings()
    from joy_trainers.rl.update import UpdateConfig
    from joy_trainers.sft import SFTConfig

    assert SFTConfig().max_new_tokens == GRPOConfig().max_new_tokens == UpdateConfig().max_new_tokens
    assert (
        SamplingConfig().max_new_tokens == default.max_new_tokens == GRPOConfig().generation_settings().max_new_tokens
    )
    assert GRPOConfig().generation_settings() == default  # a run without options samples with the defaults
    names = ("max_new_tokens", "max_cycles", "max_prompt_tokens", "draft_tokens", "draft_max_rows", "prefix_tokens")
    for name in names:
        literals = [
            path.relative_to(ROOT)
            for package in ("joy_agents", "joy_trainers")
            for path in (ROOT / package).rglob("*.py")
            if path.name != "stats.py"  # counters of what a sampler did, named like the settings
            and any(_default_literal(node, name) for node in ast.walk(ast.parse(path.read_text())))
        ]
        assert literals == [Path("joy_agents/sampling/settings.py")], name


def _default_literal(node, name):
    """Whether ``node`` gives ``name`` a literal number as a default (a dataclass field or an argument)."""

    def literal(value):
        return isinstance(value, ast.Constant) and isinstance(value.value, (int, float))

    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
        return literal(node.value)
    if isinstance(node, ast.arguments):
        args = node.args[len(node.args) - len(node.defaults) :] + node.kwonlyargs
        defaults = list(node.defaults) + list(node.kw_defaults)
        return any(a.arg == name and literal(d) for a, d in zip(args, defaults, strict=False))
    return False


def test_no_module_compares_engine_names_and_no_private_name_crosses_modules():
    """Engine names meet code in one table (``ENGINE_TABLE``), never in a comparison."""
    engines = {"continuous", "generate", "vllm"}
    comparing, private = set(), []
    for package in ("joy_agents", "joy_trainers"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Compare):
                    names = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant)]
                    if engines & {n for n in names if isinstance(n, str)}:
                        comparing.add(str(path.relative_to(ROOT)))
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("joy_agents"):
                    private += [f"{path.name}: {a.name}" for a in node.names if a.name.startswith("_")]
                if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                    owner = node.value
                    if isinstance(owner, ast.Attribute):
                        owner = ast.Name(owner.attr)
                    if isinstance(owner, ast.Name) and owner.id in {"team", "policy"}:
                        private.append(f"{path.name}: {owner.id}.{node.attr}")
    assert comparing == set()
    assert not private


def test_results_hold_the_generation_settings_and_joy_eval_reads_them_back(sft_run, tmp_path, monkeypatch):
    from joy_trainers import cli

    cfg = GRPOConfig(max_new_tokens=8, max_cycles=2, max_prompt_tokens=128, draft_tokens=1, eval_tasks=1)
    results = run_results("grpo", cfg, steps=0, metrics=None)
    assert results["generation"] == cfg.generation_settings().to_dict()
    assert saved_settings(json.loads(json.dumps(results))) == cfg.generation_settings()
    run = tmp_path / "run"
    shutil.copytree(sft_run, run)
    (run / "results.json").write_text(json.dumps({**results, "env_id": "joy/math-v0"}))
    seen = []
    monkeypatch.setattr(cli, "evaluate_team", lambda *a, **kw: seen.append(kw["settings"]) or {"success_rate": 0.0})
    eval_main([str(run), "--tasks", "1"])
    eval_main([str(run), "--tasks", "1", "--engine", "generate", "--temperature", "0.5", "--draft-tokens", "0"])
    assert seen[0] == cfg.generation_settings()
    assert seen[1] == cfg.generation_settings().replace(engine="generate", temperature=0.5, draft_tokens=0)


# ------------------------------------------------------------------------------------------ out of memory
def _run_continuous(team, requests, **kw):
    with ContinuousSampler(team, GREEDY, prefix_tokens=0, **kw) as sampler:
        for i, (role, prompt) in enumerate(requests):
            sampler.submit(role, prompt, i)
        done = dict(drain(sampler))
    return {k: (s.completion_ids, s.finish_reason) for k, s in done.items()}, sampler.stats


def _failing_once(monkeypatch, model, when, nth):
    """Make ``model``'s forward raise ``torch.OutOfMemoryError`` the ``nth`` time ``when(input_ids)`` holds."""
    original, seen, fired = model.forward, [], []

    def forward(*args, **kwargs):
        if not fired and when(kwargs["input_ids"]):
            seen.append(1)
            if len(seen) == nth:
                fired.append(kwargs["input_ids"].shape)
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "forward", forward)
    return fired


@pytest.mark.parametrize(
    "where, when, nth",
    [
        ("decode", lambda ids: ids.shape[0] > 2 and ids.shape[1] == 1, 3),  # the third decode step: rows have tokens
        ("prefill", lambda ids: ids.shape[0] >= 2 and ids.shape[1] > 4, 1),  # the first prefill of several prompts
    ],
)
def test_out_of_memory_requeues_halves_and_loses_nothing(distinct_team, monkeypatch, where, when, nth):
    requests = _requests(distinct_team)
    expected, _ = _run_continuous(distinct_team, requests, draft_tokens=0)
    fired = _failing_once(monkeypatch, distinct_team.model_for("master"), when, nth)
    with pytest.warns(RuntimeWarning) as caught:
        got, stats = _run_continuous(distinct_team, requests, draft_tokens=0)
    assert fired and stats.oom_retries == 1
    assert got == expected  # every request came back, with the samples of a run that had the memory
    (warning,) = [w for w in caught if "out of memory" in str(w.message)]
    text = str(warning.message)
    assert f"in a {where} step" in text and "queued again" in text and "\n" not in text
    assert ("admitting at most" if where == "prefill" else "decoding at most") in text


def test_out_of_memory_with_one_row_left_is_a_one_line_error(distinct_team, monkeypatch):
    model = distinct_team.model_for("master")
    monkeypatch.setattr(model, "forward", lambda *a, **kw: (_ for _ in ()).throw(torch.OutOfMemoryError("oom")))
    sampler = ContinuousSampler(distinct_team, GREEDY, max_rows=1)
    sampler.submit("qa", _prompt(distinct_team, "qa", "hello"), 0)
    with pytest.raises(torch.OutOfMemoryError) as exc:
        sampler.step()
    message = str(exc.value)
    assert "out of memory sampling one row of" in message and "max_prompt_tokens" in message and "\n" not in message
    assert continuous.ContinuousSampler is ContinuousSampler


def test_drawn_tokens_follow_the_distribution_and_never_take_a_zero_entry():
    from joy_agents.sampling.tokens import DRAW_BLOCK, draw_tokens

    vocab = 2 * DRAW_BLOCK + 37  # not a multiple of the block: the last block is padded
    gen = torch.Generator().manual_seed(0)
    weights = torch.rand(vocab, generator=gen) ** 4
    weights[::5] = 0.0  # entries that must never be drawn
    weights[vocab - 1] = 0.0
    weights[DRAW_BLOCK - 1] = 5.0  # heavy tokens at block edges
    weights[DRAW_BLOCK] = 3.0
    rows = 40_000
    probs = (weights / weights.sum() * 7.0).expand(rows, -1)  # rows need not sum to 1
    drawn = draw_tokens(probs, torch.Generator().manual_seed(1))
    assert drawn.shape == (rows,) and drawn.dtype == torch.long
    assert int(drawn.min()) >= 0 and int(drawn.max()) < vocab
    assert not bool((weights[drawn] == 0).any())
    counts = torch.bincount(drawn, minlength=vocab).double()
    expected = weights.double() / weights.sum() * rows
    for token in (DRAW_BLOCK - 1, DRAW_BLOCK):  # a frequent token: within 5 standard deviations
        assert abs(counts[token] - expected[token]) < 5 * expected[token].sqrt()
    # the mass of each tenth of the vocabulary, across block boundaries
    for part_counts, part_expected in zip(counts.chunk(10), expected.chunk(10), strict=True):
        assert abs(part_counts.sum() - part_expected.sum()) < 5 * part_expected.sum().sqrt() + 1
    again = draw_tokens(probs, torch.Generator().manual_seed(1))
    assert torch.equal(drawn, again)  # the generator decides every draw
    one_hot = torch.zeros(3, vocab)
    one_hot[torch.arange(3), torch.tensor([0, DRAW_BLOCK, vocab - 2])] = 1.0
    assert draw_tokens(one_hot).tolist() == [0, DRAW_BLOCK, vocab - 2]


# ------------------------------------------------------------------------------------------ settings per request
SHORT = SamplingConfig(temperature=0.0, max_new_tokens=3)
HOT = SamplingConfig(temperature=1.5, top_p=0.9, max_new_tokens=12)


@pytest.mark.parametrize("engine", ["continuous", "generate"])
def test_one_sampler_serves_requests_of_different_settings_side_by_side(distinct_team, engine):
    """Greedy requests sampled beside hot ones (and beside a shorter cap) give what a greedy-only sampler gives; each
    request keeps its own token cap; the sampler's own setting serves a request that brings none."""
    requests = _requests(distinct_team)
    settings = GenerationSettings(engine=engine)
    with make_sampler(distinct_team, settings, GREEDY) as alone:
        for i, (role, prompt) in enumerate(requests):
            alone.submit(role, prompt, i)
        greedy = {key: s.completion_ids for key, s in drain(alone)}
    with make_sampler(distinct_team, settings, GREEDY) as mixed:
        for i, (role, prompt) in enumerate(requests):
            mixed.submit(role, prompt, ("greedy", i))  # the sampler's own: GREEDY
            mixed.submit(role, prompt, ("hot", i), num_samples=2, sampling=HOT)
            mixed.submit(role, prompt, ("short", i), sampling=SHORT)
        done = drain(mixed)
    got: dict[str, dict[int, list]] = {"greedy": {}, "hot": {}, "short": {}}
    for (kind, i), sample in done:
        got[kind].setdefault(i, []).append(sample)
    assert {i: s.completion_ids for i, (s,) in got["greedy"].items()} == greedy
    for i, (s,) in got["short"].items():
        assert s.completion_ids == greedy[i][:3] and len(s.completion_ids) <= 3
    assert all(len(group) == 2 and all(len(s.completion_ids) <= 12 for s in group) for group in got["hot"].values())
    hot_tokens = [t for group in got["hot"].values() for s in group for t in s.completion_ids]
    assert hot_tokens != [t for i in sorted(greedy) for t in greedy[i]]  # sampled at T = 1.5, not greedy


def test_a_request_refuses_sampling_that_is_not_a_sampling_config(distinct_team):
    role, prompt = _requests(distinct_team)[0]
    for engine in ("continuous", "generate"):
        with make_sampler(distinct_team, GenerationSettings(engine=engine), GREEDY) as sampler:
            with pytest.raises(TypeError, match="a request's sampling must be a SamplingConfig or None, got dict"):
                sampler.submit(role, prompt, 0, sampling={"temperature": 0.0})


def test_sample_many_and_rollouts_share_one_sampler_and_its_kept_prefixes(distinct_team):
    """An RL step's phases on one sampler: the node samples reuse the prefixes the episodes left in its cache, and
    a sampler given to a call stays open for the next."""
    from joy_agents.rollout import RolloutConfig, RolloutEngine

    settings = GenerationSettings(max_new_tokens=16, max_cycles=3)
    engine = RolloutEngine(distinct_team, "joy/mixed-v0", "train", 0, RolloutConfig(settings), progress=False)
    with make_sampler(distinct_team, settings, GREEDY) as sampler:
        episodes = engine.run([0, 1, 2], GREEDY, sampler)
        assert not sampler.busy and sampler.stats.samples == sum(len(t.nodes) for t in episodes)
        reused = sampler.stats.reused_tokens
        nodes = [n for t in episodes for n in t.nodes]
        again = sample_many(distinct_team, [(n.role, n.prompt_ids) for n in nodes], GREEDY, 2, sampler=sampler)
        assert sampler.stats.reused_tokens - reused >= sum(len(n.prompt_ids) for n in nodes) // 2
    assert [[s.completion_ids for s in group] for group in again] == [[n.completion_ids] * 2 for n in nodes]
    with pytest.raises(ValueError, match="idle sampler"):
        with make_sampler(distinct_team, settings, GREEDY) as busy:
            busy.submit(nodes[0].role, nodes[0].prompt_ids, "waiting")
            sample_many(distinct_team, [(nodes[0].role, nodes[0].prompt_ids)], GREEDY, sampler=busy)
