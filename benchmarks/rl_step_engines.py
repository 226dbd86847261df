"""Where the seconds of an RL step go, with each rollout engine: ``joyagents_grpo`` steps of a team (the SmolLM2
SFT team of ``smol_learning.py`` by default) with ``continuous`` and with ``vllm``, each engine in a process of its
own, so that its start and its peak memory are its own.

For each engine: the seconds to a state ready for its first step (the team loaded and, for ``vllm``, vLLM's engine
started), then per step the trainer's own phases from its metrics row (``rollout``: initial episodes, node samples
and continuations; ``scoring``; ``update``; ``memory``), the generated tokens, and for ``vllm`` how the rollout's
seconds split (vLLM's calls, the training model's recomputation of sampled turns' log-probs, the adapters sent after
each update); and the peak resident memory of the engine's processes, summed.

    python benchmarks/rl_step_engines.py --sft-run runs/sft-smol --env joy/qa-v0 --steps 2 --out F
    python benchmarks/rl_step_engines.py --sft-run runs/sft-smol --engines continuous --dtype auto --out F

``--dtype`` loads the team in that dtype for the steps (the RL option ``dtype``; default: the team's own).

The steps start from the same team, seed and tasks under both engines. The initial episodes are greedy (the
trainer's ``initial_temperature``), so they are the same under both; the sampled turns differ (each engine draws
its own random numbers), so the two engines' steps differ in their tokens. The figures are wall seconds on this
machine: run the benchmark alone.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import check_team_run, peak_rss_kb, torch_machine, write_json

PHASES = ("rollout", "scoring", "update", "memory")
"""The trainer's timed phases of a step (``time/<phase>_s`` of its metrics row)."""


def one_engine(args: argparse.Namespace) -> dict[str, Any]:
    """The steps of one engine in this process (see the module documentation)."""
    import torch

    from joy_agents.sampling.vllm import close_engine, running_engine
    from joy_trainers import rl
    from joy_trainers.joyagents_grpo import JoyAgentsGRPOConfig, JoyAgentsGRPOTrainer

    if args.threads:
        torch.set_num_threads(args.threads)
    options = json.loads(args.options)
    values = {
        **JoyAgentsGRPOTrainer.presets[args.preset],
        **options,
        "sft_run": args.sft_run,
        "rollout_engine": args.engine,
        "iterations": 1,
        "steps_per_iteration": args.steps,
        "checkpoint_every": 10**6,
        "eval_tasks": 0,
        "eval_baseline": False,
        "output_dir": args.run_dir,
        "overwrite": True,
        "seed": args.seed,
    }
    started = time.perf_counter()
    trainer = JoyAgentsGRPOTrainer(JoyAgentsGRPOConfig.from_dict(values))
    trainer.claim_run_dir()
    try:
        state = trainer.start_state()
        ready_s = time.perf_counter() - started
        steps: list[dict[str, Any]] = []

        def step_fn(state: rl.RunState, step: int) -> dict[str, Any]:
            engine = running_engine(state.team)
            before = dict(engine.seconds) if engine is not None else {}
            row = trainer.run_step(state, step)
            figures = {f"{p}_s": round(row.get(f"time/{p}_s", 0.0), 2) for p in PHASES}
            figures["generated_tokens"] = row["charts/tokens_generated"]
            figures["rollout_tokens_per_s"] = round(row["charts/tokens_generated"] / max(figures["rollout_s"], 1e-9), 1)
            figures["groups_with_spread"] = row["groups/with_spread"]
            if engine is not None:
                for part, seconds in engine.seconds.items():
                    figures[f"vllm_{part}_s"] = round(seconds - before[part], 2)
            steps.append(figures)
            print(f"[rl-step-engines] {args.engine} step {step + 1}: {figures}", flush=True)
            return row

        rl.run_steps(trainer.run, state, step_fn, save_extra=trainer.save_extra)
        pids = [os.getpid()]
        engine = running_engine(state.team)
        if engine is not None:
            pids += [p.pid for p in engine.processes]
        peak_mb = sum(peak_rss_kb(pid) for pid in pids) / 1024
        close_engine(state.team)
    finally:
        trainer.run.release()
    return {"engine": args.engine, "ready_s": round(ready_s, 1), "peak_rss_mb": round(peak_mb), "steps": steps}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sft-run", required=True, help="the sft run whose team the steps start from")
    parser.add_argument("--engines", default="continuous,vllm", help="comma-separated: continuous, generate, vllm")
    parser.add_argument("--preset", default="smol", help="the trainer's preset the options start from")
    parser.add_argument("--env", default="joy/qa-v0", help="env id of the steps")
    parser.add_argument("--steps", type=int, default=2, help="joyagents_grpo steps per engine")
    parser.add_argument("--tasks-per-step", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-nodes", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--max-cycles", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    parser.add_argument("--dtype", help="the team's dtype in the run: auto, float32, bfloat16 (default: the team's)")
    parser.add_argument("--out", help="write the figures as JSON to this file")
    parser.add_argument("--engine", help=argparse.SUPPRESS)  # one engine, in the process the others start
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    parser.add_argument("--options", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.engine:  # a child: one engine, its figures as the last line of its output
        print("RESULT " + json.dumps(one_engine(args)), flush=True)
        return {}
    check_team_run(parser, args.sft_run)
    options = {
        "env_id": args.env,
        "tasks_per_step": args.tasks_per_step,
        "group_size": args.group_size,
        "max_nodes": args.max_nodes,
        "temperature": args.temperature,
        "max_new_tokens": args.max_new_tokens,
        "max_cycles": args.max_cycles,
        **({"dtype": args.dtype} if args.dtype else {}),
    }
    result: dict[str, Any] = {"machine": torch_machine(), "sft_run": str(args.sft_run), "options": options}
    result["engines"] = {}
    with tempfile.TemporaryDirectory(prefix="rl-step-engines-") as tmp:
        for engine in args.engines.split(","):
            command = [sys.executable, __file__, "--sft-run", str(args.sft_run), "--engine", engine]
            command += ["--run-dir", str(Path(tmp) / engine), "--options", json.dumps(options)]
            command += ["--steps", str(args.steps), "--seed", str(args.seed), "--preset", args.preset]
            command += ["--threads", str(args.threads)] if args.threads else []
            done = subprocess.run(command, stdout=subprocess.PIPE, text=True)
            lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
            print("\n".join(line for line in done.stdout.splitlines() if not line.startswith("RESULT ")))
            if done.returncode or not lines:
                raise SystemExit(f"rl_step_engines: the {engine} engine's run failed (exit status {done.returncode})")
            result["engines"][engine] = json.loads(lines[-1][len("RESULT ") :])
    print(json.dumps(result["engines"], indent=2))
    write_json(result, args.out, announce=True)
    return result


if __name__ == "__main__":
    main()
