"""Can an RL trainer sharpen a team onto its own successes? RL on the tasks whose samples both succeed and
fail, then the same tasks measured again.

    python benchmarks/rl_sharpen.py RUN_DIR --out rl_sharpen.json [--trainer grpo] [--tasks 64] [--samples 8]
        [--steps 15] [--set KEY=VALUE ...]

The sanity check of an RL setup: before asking RL to generalise, ask it to learn what it is shown. For the
team in ``RUN_DIR/team`` (a ``joy-train`` run directory), this plays the first ``--tasks`` tasks of the RL
part of the train split once greedily and ``--samples`` times at ``--temperature`` (as
``benchmarks/rl_headroom.py``), keeps the *mixed* tasks (some samples succeed, some fail: the groups that
carry a success signal), trains ``--trainer`` with its ``tiny`` preset (``--preset``) and ``--set``
overrides for ``--steps`` steps on those tasks only (cycled, ``tasks_per_step`` per step), and plays the
mixed tasks again with the trained team. It reports greedy and sampled success on the mixed tasks before and
after (``before`` / ``after``) and writes the run into ``--workdir`` (default: a temporary folder). A setup
that cannot raise these figures cannot be expected to raise test success.

Its cost with the defaults on the tiny team is on the results page (docs/results.md).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # rl_headroom and _common, also when loaded by path

from _common import check_team_run, run_settings, torch_machine, write_json  # noqa: E402
from rl_headroom import play, task_list  # noqa: E402


def rates(greedy: list[bool], samples: list[list[bool]]) -> dict[str, float]:
    """Greedy success and mean sampled success over tasks (0 for no tasks)."""
    n = len(greedy)
    draws = sum(len(s) for s in samples)
    return {
        "greedy_success": sum(greedy) / n if n else 0.0,
        "sample_success": sum(sum(s) for s in samples) / draws if draws else 0.0,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a run directory of `joy-train` (holds team/)")
    parser.add_argument("--trainer", default="grpo", help="an RL trainer (grpo, joyagents_grpo, mappo, a plugin)")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--max-cycles", type=int, default=10)
    parser.add_argument("--max-prompt-tokens", type=int, default=416)
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampling and of the RL run")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a trainer option")
    parser.add_argument("--workdir", help="folder of the RL run (default: a temporary folder, removed)")
    parser.add_argument("--out", help="write the JSON here")
    args = parser.parse_args(argv)
    if args.tasks < 1 or args.samples < 2 or args.steps < 1 or args.temperature <= 0:
        parser.error(
            f"need --tasks >= 1, --samples >= 2, --steps >= 1, --temperature > 0; got {args.tasks}, "
            f"{args.samples}, {args.steps}, {args.temperature}"
        )
    check_team_run(parser, args.run)

    import torch

    from joy_trainers.cli import load_trainer, parse_overrides

    start = time.perf_counter()
    env_id, env_kwargs, data_seed = run_settings(args.run)
    torch.manual_seed(args.seed)
    tasks = task_list(env_id, env_kwargs, data_seed, "train")[: args.tasks]
    greedy, _, outcomes = play(
        Path(args.run) / "team", env_id, env_kwargs, data_seed, "train", tasks, args.samples, args
    )
    keep = [i for i, s in enumerate(outcomes) if 0 < sum(s) < args.samples]
    mixed = [tasks[i] for i in keep]
    before = rates([greedy[i].success for i in keep], [outcomes[i] for i in keep])
    result: dict[str, Any] = {
        "benchmark": "rl_sharpen",
        "date": time.strftime("%Y-%m-%d"),
        "machine": torch_machine(),
        "settings": {
            **{k: v for k, v in vars(args).items() if k not in ("out", "workdir")},
            "env_id": env_id,
            "env_kwargs": env_kwargs,
            "data_seed": data_seed,
        },
        "all_tasks": rates([g.success for g in greedy], outcomes),
        "mixed_tasks": mixed,
        "before": before,
    }
    if not mixed:
        print(f"{args.run}: none of {len(tasks)} tasks has both successes and failures; nothing to sharpen")
        result["after"] = None
    else:
        trainer_cls = load_trainer(args.trainer)
        with tempfile.TemporaryDirectory() as tmp:
            out_dir = Path(args.workdir or tmp) / "rl"
            values = {
                **trainer_cls.presets.get(args.preset, {}),
                "env_id": env_id,
                "env_kwargs": env_kwargs,
                "data_seed": data_seed,
                "seed": args.seed,
                "sft_run": str(args.run),
                "eval_tasks": 0,
                "temperature": args.temperature,
                "top_p": args.top_p,
                "iterations": 1,
                "steps_per_iteration": args.steps,
                "output_dir": str(out_dir),
                "overwrite": True,
                **parse_overrides(args.set),
            }
            config = trainer_cls.config_class.from_dict(values)

            class OnMixedTasks(trainer_cls):  # the trainer, drawing its tasks from the mixed ones only
                def init_state(self, state: Any) -> None:
                    super().init_state(state)
                    state.rl_tasks = list(mixed)

            OnMixedTasks(config).train()
            g2, _, o2 = play(out_dir / "team", env_id, env_kwargs, data_seed, "train", mixed, args.samples, args)
        result["after"] = rates([g.success for g in g2], o2)
        result["config"] = {k: v for k, v in values.items() if k not in ("output_dir", "overwrite")}
        print(
            f"{args.run} ({args.trainer}, {args.steps} steps on {len(mixed)} mixed of {len(tasks)} tasks): greedy "
            f"{before['greedy_success']:.3f} -> {result['after']['greedy_success']:.3f}, samples "
            f"{before['sample_success']:.3f} -> {result['after']['sample_success']:.3f}"
        )
    result["wall_s"] = time.perf_counter() - start
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
