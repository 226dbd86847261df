"""Sampling cost of node-wise Monte Carlo sampling against joint resampling of every node.

For each task, the team plays one greedy trajectory of N agent turns. Node-wise sampling (joyagents_grpo)
branches G samples at each of the N nodes and finishes each branch: N * G continuations, all run here
and timed. Joint resampling of every node with G options would need G ** N trajectories to cover the same
choices; that number is computed (and its time estimated from the measured seconds per continuation), not
run.

    python benchmarks/sampling_cost.py --out benchmarks/results/sampling_cost.json
    python benchmarks/sampling_cost.py --team runs/sft-.../team --tasks 8 --group-size 5

Without ``--team`` it uses the cached team of the tiny SFT preset (seed 0) when there is one, otherwise a
fresh tiny team (untrained adapters on the embedded tiny model: longer, looping turns).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common, also when this file is loaded by path

from _common import torch_machine, write_json  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--team", help="a team directory (TeamPolicy.save); default: see above")
    parser.add_argument("--env", default="joy/mixed-v0")
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--group-size", type=int, default=5)
    parser.add_argument("--max-nodes", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--max-cycles", type=int, default=10)
    parser.add_argument("--out", help="write the JSON here")
    args = parser.parse_args(argv)

    import torch

    from joy_agents.policy import SamplingConfig, TeamConfig, TeamPolicy
    from joy_agents.rollout import Branch, RolloutConfig, RolloutEngine
    from joy_agents.sampling.settings import GenerationSettings
    from joy_agents.tiny import build_tiny_model
    from joy_env.protocol import TURN_STOP
    from joy_trainers.presets import TINY_MAX_PROMPT_TOKENS
    from joy_trainers.rl import tiny_sft_dir

    torch.manual_seed(0)
    team_dir = args.team
    if team_dir is None:
        cached = tiny_sft_dir() / "team"
        team_dir = str(cached) if (cached / "team.json").is_file() else None
    if team_dir:
        team = TeamPolicy.load(team_dir)
        source = team_dir
    else:
        team = TeamPolicy(TeamConfig(model=str(build_tiny_model()), lora_r=4, lora_alpha=8))
        source = "fresh tiny team (no SFT)"
    explore = SamplingConfig(temperature=1.2, max_new_tokens=args.max_new_tokens, stop=TURN_STOP)
    engine = RolloutEngine(
        team,
        args.env,
        "train",
        0,
        RolloutConfig(
            GenerationSettings(
                max_new_tokens=args.max_new_tokens, max_cycles=args.max_cycles, max_prompt_tokens=TINY_MAX_PROMPT_TOKENS
            ),
            keep_snapshots=True,
        ),
        progress=False,
    )
    start = time.perf_counter()
    initial = engine.run(list(range(args.tasks)))
    initial_s = time.perf_counter() - start
    nodes = [n for t in initial for n in t.nodes[: args.max_nodes]]
    start = time.perf_counter()
    branches = []
    for role in sorted({n.role for n in nodes}):
        mine = [n for n in nodes if n.role == role]
        samples = team.generate(role, [n.prompt_ids for n in mine], explore, num_samples=args.group_size)
        branches += [Branch(n.snapshot, s) for n, group in zip(mine, samples, strict=True) for s in group]
    finished = engine.run(branches)
    nodewise_s = time.perf_counter() - start
    per_continuation = nodewise_s / max(1, len(finished))
    per_traj = []
    for t in initial:
        n = min(len(t.nodes), args.max_nodes)
        per_traj.append(
            {
                "task_id": t.task_id,
                "nodes": n,
                "nodewise_continuations": n * args.group_size,
                "joint_trajectories": args.group_size**n,
            }
        )
    nodewise = sum(p["nodewise_continuations"] for p in per_traj)
    joint = sum(p["joint_trajectories"] for p in per_traj)
    result = {
        "benchmark": "sampling_cost",
        "team": source,
        "env_id": args.env,
        "group_size": args.group_size,
        "tasks": args.tasks,
        "trajectories": per_traj,
        "nodewise_continuations": nodewise,
        "nodewise_continuations_run": len(finished),
        "joint_trajectories": joint,
        "joint_over_nodewise": joint / max(1, nodewise),
        "initial_rollout_s": initial_s,
        "nodewise_s": nodewise_s,
        "seconds_per_continuation": per_continuation,
        "joint_estimated_s": joint * per_continuation,
        "generated_tokens_nodewise": sum(t.generated_tokens for t in finished),
        "machine": torch_machine(),
        "date": time.strftime("%Y-%m-%d"),
    }
    print(f"{'task':<22}{'N':>4}{'node-wise N*G':>16}{'joint G^N':>14}")
    for p in per_traj:
        print(f"{p['task_id']:<22}{p['nodes']:>4}{p['nodewise_continuations']:>16}{p['joint_trajectories']:>14}")
    print(
        f"total: node-wise {nodewise} continuations in {nodewise_s:.1f} s; joint would need {joint} trajectories "
        f"({result['joint_over_nodewise']:.0f}x, about {result['joint_estimated_s']:.0f} s at the same rate)"
    )
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
