"""benchmarks/run_baselines.py and benchmarks/run_all.py on tiny settings: equal token budgets, the summary
over seeds, the table and plots, and a rerun that reuses finished runs."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL_RL = [
    "tasks_per_step=2",
    "group_size=2",
    "max_nodes=2",
    "max_new_tokens=12",
    "max_cycles=3",
    "max_prompt_tokens=256",
]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, "benchmarks", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mean_std_and_summary():
    bench = _load("run_baselines")
    assert bench.mean_std([]) == (0.0, 0.0) and bench.mean_std([2.0]) == (2.0, 0.0)
    mu, sd = bench.mean_std([1.0, 2.0, 3.0])
    assert mu == 2.0 and sd == pytest.approx(1.0)
    rows = [
        {
            "method": "a",
            "seed": s,
            "success_rate": v,
            "mean_reward": v,
            "mean_accuracy": 0.0,
            "format_valid_rate": 1.0,
            "generated_tokens": 10 * (s + 1),
            "train_wall_s": 1.0,
            "per_domain": {"qa": v},
        }
        for s, v in ((0, 0.0), (1, 0.5))
    ]
    summary = bench.summarize(rows)
    assert summary["a"]["success_rate"] == 0.25 and summary["a"]["generated_tokens"] == 15
    assert summary["a"]["per_domain_success"] == {"qa": 0.25}
    settings = {"eval_tasks": 2, "budget": 10, "seeds": [0, 1], "ablation_seeds": [0]}
    assert "| a | 2 | 15 |" in bench.table(summary, settings)


@pytest.mark.slow  # four RL runs through the benchmark script; budgets and resume are tested in test_rl.py
def test_baselines_share_the_budget_and_rerun_reuses_finished_runs(sft_run, tmp_path):
    bench = _load("run_baselines")
    out = tmp_path / "bl"
    argv = [
        "--out-dir",
        str(out),
        "--sft-run",
        sft_run,
        "--methods",
        "sft",
        "grpo",
        "joyagents_grpo_k1",
        "--seeds",
        "0",
        "--budget",
        "40",
        "--eval-tasks",
        "2",
    ]
    for item in SMALL_RL:
        argv += ["--set", item]
    report = bench.main(argv)
    runs = {r["method"]: r for r in report["runs"]}
    assert set(runs) == {"sft", "grpo", "joyagents_grpo_k1"}
    assert runs["sft"]["generated_tokens"] == 0
    for method in ("grpo", "joyagents_grpo_k1"):
        run_dir = out / "runs" / f"{method}-s0"
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        assert runs[method]["generated_tokens"] >= 40  # ran until the budget was reached ...
        assert len(rows) == 1 or rows[-2]["charts/tokens_generated_total"] < 40  # ... and stopped there
        assert runs[method]["train_wall_s"] > 0
        saved = json.loads((run_dir / "results.json").read_text())
        assert saved["config"]["token_budget"] == 40 and saved["config"]["max_new_tokens"] == 12
    assert saved["config"]["top_k"] == 1
    for name in ("baselines.json", "baselines.md", "success_vs_tokens.png", "success_vs_wall.png"):
        assert (out / name).is_file(), name
    assert "| joyagents_grpo_k1 |" in (out / "baselines.md").read_text()

    stamp = (out / "runs" / "grpo-s0" / "results.json").stat().st_mtime_ns
    again = bench.main(argv)  # every run is done: nothing is retrained
    assert (out / "runs" / "grpo-s0" / "results.json").stat().st_mtime_ns == stamp
    assert again["summary"] == report["summary"]


def test_run_all_writes_a_summary_and_reports_failures(tmp_path, monkeypatch):
    run_all = _load("run_all")
    fast = ["--episodes", "20", "--pool", "20", "--repeats", "10", "--pz-env", ""]
    monkeypatch.setitem(run_all.BENCHMARKS, "env_speed", {"quick": fast, "full": fast})
    monkeypatch.setitem(run_all.BENCHMARKS, "sampling_cost", {"quick": ["--no-such-option"], "full": []})
    with pytest.raises(SystemExit):  # one benchmark failed: reported in the summary and the exit status
        run_all.main(["--quick", "--only", "env_speed", "sampling_cost", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "summary.json").read_text())
    assert report["status"]["env_speed"]["rc"] == 0 and report["status"]["sampling_cost"]["rc"] != 0
    figures = {f["figure"]: f["value"] for f in report["figures"]}
    assert figures["expert env turns / s (slowest env id)"] > 0
    assert figures["node-wise continuations run"] is None
    assert (tmp_path / "env_speed.json").is_file()
    assert "| sampling_cost | node-wise continuations run | missing |" in (tmp_path / "summary.md").read_text()


def test_sft_rows_reports_the_same_labels_in_fewer_tokens(tmp_path, tiny_dir):
    out = tmp_path / "sft_rows.json"
    args = ["--model", str(tiny_dir), "--tasks", "12", "--batch-size", "4", "--repeats", "1", "--out", str(out)]
    result = _load("sft_rows").main(args)
    rows = result["rows"]
    assert rows["completion"]["labels"] == rows["conversation"]["labels"] > 0
    assert rows["conversation"]["tokens"] < rows["completion"]["tokens"] and result["token_ratio"] > 1
    assert set(result["step_s"]) == {"labelled", "last_keep"} and result["loss_head_speedup"] > 0
    # one role's rows start with its system prompt: batches grouped by prefix run fewer positions
    for kind in ("completion", "conversation"):
        epoch = result["epoch_tokens"][kind]
        assert epoch["shared_prefix"] < epoch["plain"] and epoch["ratio"] > 1
    assert result["shared_prefix_batch"]["prefix_tokens"] >= 16 and result["shared_prefix_speedup"] > 0
    assert json.loads(out.read_text())["token_ratio"] == result["token_ratio"]


def test_copy_probe_scores_the_experts_copied_entities(sft_run, tmp_path):
    import joy_env
    from joy_agents.sft_data import expert_examples

    bench = _load("copy_probe")
    env = joy_env.make("joy/ecommerce-v0", split="test")
    examples = expert_examples(env, range(3))
    first = examples[0]
    spans = bench.copied_spans(first)
    copied = [first.completion[a:b] for a, b in spans]
    # the entities of the expert's first call are all read from the request (a user id, a product's name)
    assert copied and all(word in first.messages[-1]["content"] for word in copied)
    out = tmp_path / "probe.json"
    result = bench.main([str(sft_run), "--tasks", "2", "--out", str(out)])
    assert json.loads(out.read_text())["teams"] == result["teams"]
    for figures in result["teams"][str(sft_run)].values():
        assert figures["tokens"] > figures["entity_tokens"] > 0
        assert 0.0 <= figures["entity_token_accuracy"] <= 1.0 and 0.0 <= figures["token_accuracy"] <= 1.0
    with pytest.raises(SystemExit):
        bench.main([str(tmp_path), "--tasks", "2"])


def test_rl_headroom_pass_at_k_and_a_short_run(sft_run, tmp_path):
    bench = _load("rl_headroom")
    assert bench.pass_at_k(5, 0, 3) == 0.0 and bench.pass_at_k(5, 5, 1) == 1.0
    assert bench.pass_at_k(4, 1, 1) == pytest.approx(0.25) and bench.pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert bench.pass_at_k(4, 3, 2) == 1.0  # two draws from 4 holding a single failure always hit a success
    figures = bench.headroom([[True, False], [False, False]], [False, False], (1, 2))
    assert figures == {
        "greedy_success": 0.0,
        "sample_success": 0.25,
        "pass_at_k": {"1": 0.25, "2": 0.5},
        "mixed_tasks": 0.5,
    }
    with pytest.raises(ValueError, match="k <= n"):
        bench.pass_at_k(2, 1, 3)
    by = bench.grouped(["b", "a", "b"], [[True, True], [False, False], [True, False]], [True, False, False], (1, 2))
    assert list(by) == ["a", "b"]
    assert by["a"] == {
        "n": 1,
        "greedy_success": 0.0,
        "sample_success": 0.0,
        "pass_at_k": {"1": 0.0, "2": 0.0},
        "mixed_tasks": 0.0,
    }
    assert by["b"]["n"] == 2 and by["b"]["greedy_success"] == 0.5 and by["b"]["pass_at_k"]["2"] == 1.0
    with pytest.raises(ValueError, match="one key per task"):
        bench.grouped(["a"], [[True], [False]], [True, False], (1,))
    out = tmp_path / "headroom.json"
    result = bench.main(
        [sft_run, "--tasks", "2", "--samples", "2", "--max-new-tokens", "8", "--max-cycles", "3", "--out", str(out)]
    )
    assert json.loads(out.read_text())["figures"] == result["figures"]
    assert set(result["figures"]["pass_at_k"]) == {"1", "2"}
    assert 0.0 <= result["figures"]["format_valid_rate"] <= 1.0
    for key in ("by_domain", "by_template"):  # the groups partition the tasks
        assert sum(f["n"] for f in result["figures"][key].values()) == 2
    assert all(":" in key for key in result["figures"]["by_template"])
    with pytest.raises(SystemExit):
        bench.main([str(tmp_path)])
    run = tmp_path / "run"  # the run's env and data seed come from its results.json
    shutil.copytree(sft_run, run)
    (run / "results.json").write_text(json.dumps({"config": {"env_id": "joy/qa-v0", "data_seed": 1, "seed": 4}}))
    result = bench.main([str(run), "--tasks", "1", "--samples", "2", "--max-new-tokens", "4", "--max-cycles", "2"])
    assert {k: result["settings"][k] for k in ("env_id", "data_seed")} == {"env_id": "joy/qa-v0", "data_seed": 1}
    # the run's own generation limits, unless an option says otherwise; the validation split too
    generation = {"max_new_tokens": 6, "max_cycles": 2, "max_prompt_tokens": 200}
    (run / "results.json").write_text(json.dumps({"config": {"env_id": "joy/qa-v0"}, "generation": generation}))
    result = bench.main([str(run), "--tasks", "1", "--samples", "2", "--split", "validation", "--max-cycles", "1"])
    assert {k: result["settings"][k] for k in generation} == {**generation, "max_cycles": 1}
    assert result["settings"]["split"] == "validation"


def test_rl_sharpen_trains_only_on_the_mixed_tasks_and_measures_them_again(sft_run, tmp_path, monkeypatch):
    from joy_trainers.rl.state import RunState

    bench = _load("rl_sharpen")
    assert bench.rates([True, False], [[True, False], [False, False]]) == {
        "greedy_success": 0.5,
        "sample_success": 0.25,
    }
    real_play, calls, drawn = bench.play, [], []

    def play(team_dir, env_id, env_kwargs, data_seed, split, tasks, samples, args):
        greedy, runs, outcomes = real_play(team_dir, env_id, env_kwargs, data_seed, split, tasks, samples, args)
        calls.append(list(tasks))
        if len(calls) == 1:  # the first measurement: tasks 0 and 2 of the list made mixed, the rest all failures
            outcomes = [[i in (0, 2) and j == 0 for j in range(samples)] for i in range(len(tasks))]
        return greedy, runs, outcomes

    real_draw = RunState.draw_tasks

    def draw_tasks(self, n):
        out = real_draw(self, n)
        drawn.extend(out)
        return out

    monkeypatch.setattr(bench, "play", play)
    monkeypatch.setattr(RunState, "draw_tasks", draw_tasks)
    small = ["--tasks", "4", "--samples", "2", "--steps", "2", "--max-new-tokens", "8", "--max-cycles", "3"]
    sets = [x for item in SMALL_RL if not item.startswith("max_nodes") for x in ("--set", item)]
    out = tmp_path / "sharpen.json"
    result = bench.main([sft_run, *small, *sets, "--workdir", str(tmp_path / "w"), "--out", str(out)])
    mixed = [calls[0][0], calls[0][2]]
    assert result["mixed_tasks"] == mixed
    assert set(drawn) <= set(mixed) and len(drawn) == 4  # 2 steps of tasks_per_step=2, mixed tasks only
    assert calls[1] == mixed  # measured again on the mixed tasks, with the trained team
    assert (tmp_path / "w" / "rl" / "team" / "team.json").is_file()
    assert result["before"]["sample_success"] == 0.5
    assert set(result["after"]) == {"greedy_success", "sample_success"}
    assert json.loads(out.read_text())["after"] == result["after"]
    monkeypatch.setattr(bench, "play", lambda *a: real_play(*a)[:2] + ([[False, False]] * 4,))
    assert bench.main([sft_run, *small])["after"] is None  # no mixed task: nothing is trained


def test_rollout_throughput_shared_vs_unshared_on_tiny_settings(tmp_path):
    bench = _load("rollout_throughput")
    out = tmp_path / "shared.json"
    result = bench.main(
        [
            "--model",
            "tiny-base",
            "--shared-only",
            "--node-tasks",
            "1",
            "--max-nodes",
            "2",
            "--max-new-tokens",
            "4",
            "--group-size",
            "3",
            "--shared-repeats",
            "2",
            "--out",
            str(out),
        ]
    )
    assert json.loads(out.read_text()) == result
    assert result["group_size"] == 3 and result["branched_nodes"] == 2 and result["mean_node_prompt_tokens"] > 16
    assert len(result["ratio_shared_vs_unshared_per_repeat"]) == 2
    assert result["shared_tokens_per_s"] > 0 and result["unshared_tokens_per_s"] > 0
    lo, hi = sorted(result["ratio_shared_vs_unshared_per_repeat"])
    assert lo <= result["ratio_shared_vs_unshared"] <= hi  # the median of the repeats


def test_rollout_throughput_shared_figure_on_a_saved_team(sft_run, tmp_path):
    bench = _load("rollout_throughput")
    team = os.path.join(sft_run, "team")
    small = ["--node-tasks", "1", "--max-nodes", "1", "--max-new-tokens", "3", "--group-size", "2"]
    result = bench.main(["--shared-only", "--team", team, "--shared-repeats", "1", *small])
    assert result["model"].startswith(f"team {team}") and result["branched_nodes"] == 1
    assert result["shared_tokens"] == result["unshared_tokens"] > 0
    with pytest.raises(SystemExit):
        bench.main(["--shared-only", "--team", str(tmp_path)])


def test_rollout_throughput_compares_the_engines_on_the_same_episodes(sft_run, tmp_path):
    bench = _load("rollout_throughput")
    team = os.path.join(sft_run, "team")
    small = ["--episodes", "4", "--max-new-tokens", "6", "--max-cycles", "3", "--max-prompt-tokens", "192"]
    shared = ["--node-tasks", "1", "--max-nodes", "1", "--group-size", "2", "--shared-repeats", "1"]
    result = bench.main(["--team", team, *small, *shared, "--repeats", "2", "--out", str(tmp_path / "r.json")])
    assert json.loads((tmp_path / "r.json").read_text()) == result
    fast, slow = result["continuous"], result["per_role"]
    # greedy: the same episodes under both engines, so the same tokens kept
    assert result["same_greedy_episodes"] == 1.0 and result["continuous_tokens"] == result["per_role_tokens"]
    assert fast["tokens_kept"] == slow["tokens_kept"] <= slow["tokens_computed"]
    assert fast["tokens_kept"] <= fast["tokens_computed"]
    # every live row in each decode step, against calls per role that each run to their slowest row
    assert fast["decode_forwards"] <= slow["decode_forwards_per_token"] * result["per_role_tokens"]
    # the longest episode's tokens decode one after another: one token per forward needs no fewer forwards;
    # drafts check several tokens of a row per forward, with the same samples
    plain = result["continuous_no_drafts"]
    assert plain["decode_forwards"] >= result["longest_episode_tokens"] > 0
    assert fast["decode_forwards"] <= plain["decode_forwards"] and result["same_greedy_episodes_drafts"] == 1.0
    assert fast["draft_tokens_kept"] <= fast["draft_tokens"] and plain["draft_tokens"] == 0
    assert (
        result["ratio_vs_per_role"] > 0 and result["ratio_vs_generate"] > 0 and result["ratio_drafts_vs_no_drafts"] > 0
    )


def test_decode_step_counts_the_kernels_of_each_way_to_apply_the_adapters(tmp_path):
    bench = _load("decode_step")
    result = bench.main(["--rows", "5", "--context", "8", "--steps", "2", "--out", str(tmp_path / "d.json")])
    assert json.loads((tmp_path / "d.json").read_text()) == result
    kernels = {name: result[name]["kernels"] for name in bench.WAYS}
    assert kernels["base"] == min(kernels.values())
    # StackedLoRA: rows of every role in fewer kernels than PEFT's one adapter, and than its mixed batches
    assert kernels["stacked_one_role"] < kernels["stacked_mixed"] < kernels["peft_one_adapter"] < kernels["peft_mixed"]
    per_layer = result["adapter_kernels_per_layer"]
    assert per_layer["stacked_mixed"] == (kernels["stacked_mixed"] - kernels["base"]) / result["layers"]
    assert all(result[name]["ms"] > 0 for name in bench.WAYS) and result["stacked_mixed_tokens_per_s"] > 0


def test_sft_speed_times_the_trainer_and_a_plain_loop_on_the_same_rows(tmp_path):
    bench = _load("sft_speed")
    out = tmp_path / "sft_speed.json"
    small = ["--tasks", "6", "--batch-size", "4", "--max-length", "256", "--lora-r", "4"]
    result = bench.main([*small, "--out", str(out)])
    assert json.loads(out.read_text()) == result
    assert result["rows"] > 0 and result["tokens"] > 0 and result["batches"] == -(-result["rows"] // 4)
    assert result["trainer_steps"] == result["batches"]  # one optimiser step per batch on both sides
    assert result["ratio"] == pytest.approx(result["plain_s"] / result["trainer_s"])


def test_team_throughput_measures_each_team_dtype_load_and_the_node_wise_groups(tmp_path):
    bench = _load("team_throughput")
    out = tmp_path / "team.json"
    args = ["--model", "tiny-base", "--dtypes", "auto,float32", "--prompts", "3", "--max-new-tokens", "4"]
    args += ["--max-prompt-tokens", "400", "--repeats", "2", "--group-size", "2", "--node-prompts", "2"]
    result = bench.main([*args, "--out", str(out)])
    assert json.loads(out.read_text()) == result
    by = {(s["dtype"], s["team"], s["group"], s["load"], s["thread_policy"]): s for s in result["settings"]}
    assert set(by) == {
        ("float32", "lora", 1, "quiet", True),
        ("float32", "base", 1, "quiet", True),
        ("auto", "lora", 1, "quiet", True),  # no base for auto: a team without adapters is float32
        ("auto", "lora", 1, "busy core", True),
        ("auto", "lora", 1, "busy core", False),
        ("auto", "lora", 2, "quiet", True),
    }
    for (_, _, group, _, _), s in by.items():
        assert s["samples"] == (3 if group == 1 else 2 * 2) and 0 < s["tokens"] <= 4 * s["samples"]
        assert s["tokens_per_s"] == pytest.approx(s["tokens"] / s["seconds"], rel=0.05) and len(s["all_seconds"]) == 2
        assert s["seconds"] == min(s["all_seconds"]) and s["peak_rss_mb"] > 0
    auto, f32 = by["auto", "lora", 1, "quiet", True], by["float32", "lora", 1, "quiet", True]
    # the suite pins auto to float32 (tests/conftest.py): the choice and its reason are recorded
    assert auto["dtype_chosen"] == "float32" and "JOY_AUTO_DTYPE" in auto["dtype_reason"]
    assert f32["dtype_reason"] == "set" and auto["greedy_same_as_float32"] == 1.0  # the same dtype: the same tokens
    for s in (auto, f32):
        assert s["product_gflop"] > 0 and s["of_gemm_limit"] == pytest.approx(
            s["gemm_limit_s"] / s["seconds"], rel=0.01
        )
    lora, base = f32["tokens_per_s"], by["float32", "base", 1, "quiet", True]["tokens_per_s"]
    ratios = result["ratios"]
    assert ratios["continuous_float32_lora_over_base"] == round(lora / base, 3)
    busy = by["auto", "lora", 1, "busy core", True]["tokens_per_s"]
    assert ratios["continuous_auto_busy_over_quiet_thread_policy"] == round(busy / auto["tokens_per_s"], 3)
    assert set(result["matmul_gflops"]) == {"float32", "bfloat16"}
    assert set(result["matmul_gflops"]["float32"]) == {"all_threads", "one_thread"}
    assert result["machine"]["torch_capability"] and "bfloat16_units" in result["machine"]
    from joy_agents.threads import OFF_SWITCH

    assert bench.OFF_SWITCH == OFF_SWITCH  # spelt out in the script for older checkouts


def test_memory_matches_counts_requests_near_a_train_request_and_those_about_another_entity(tmp_path):
    bench = _load("memory_matches")
    keys = [[1.0, 0.0], [0.0, 1.0]]
    queries = [[1.0, 0.1], [0.6, 0.8], [-1.0, 0.0]]
    same = [[True, False], [True, False], [True, True]]
    # the first is nearest key 0 (same entity), the second key 1 (another), the third near none
    assert bench.matches(queries, keys, same, 0.9) == {"matched": 1, "misleading": 0}
    assert bench.matches(queries, keys, same, 0.7) == {"matched": 2, "misleading": 1}
    out = tmp_path / "m.json"
    result = bench.main(["--train-tasks", "20", "--tasks", "5", "--splits", "test", "--out", str(out)])
    figures = result["figures"]["test"]
    assert set(figures) == {"0.6", "0.8", "0.9"} and json.loads(out.read_text())["figures"]["test"] == figures
    assert all(0 <= f["misleading"] <= f["matched"] <= f["tasks"] == 5 for f in figures.values())
    assert figures["0.6"]["matched"] >= figures["0.9"]["matched"]


def test_customer_isolation_times_each_mode_on_a_telecom_view(tmp_path, monkeypatch):
    from tau2_support import SKIP_DATA, have_data

    if not have_data("telecom"):
        pytest.skip(SKIP_DATA)
    out = tmp_path / "customer.json"
    monkeypatch.setattr("sys.argv", ["customer_isolation.py", "--turns", "5", "--out", str(out)])
    _load("customer_isolation").main()
    result = json.loads(out.read_text())
    assert set(result["per_turn_ms"]) == {"direct", "thread", "process"}
    assert result["view_bytes"] > 1000 and result["worker_start_ms"] > 0
    assert result["ratio_process_to_thread"] == pytest.approx(
        result["per_turn_ms"]["process"]["median"] / result["per_turn_ms"]["thread"]["median"]
    )
