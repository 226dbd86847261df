"""Would memory mislead? How many evaluation requests match a training request about another entity.

    python benchmarks/memory_matches.py --env joy/qa-v0 --train-tasks 400 --tasks 40 --thresholds 0.6 0.8 0.9

``joyagents_grpo``'s memory writes a role's good actions under the request it answered and shows them in the
prompt of any later request whose embedding is at least ``memory_min_similarity`` (cosine) from it. A note written
for another entity ("the Drairygram River is 512 km long") shown with a new request is a wrong hint. This embeds
the requests of the first ``--train-tasks`` tasks of the RL part of the train split, in the order a run of seed
``--seed`` draws them (every request a memory could hold notes of by then), and of the first ``--tasks`` tasks
of each evaluation split, with the memory's embedder (``--embedder``, default the download-free ``hash``), and
reports per split and threshold how many evaluation requests have a training request at or above it, and of
those how many have another gold answer (a note that would mislead). It reads task texts only: no model, seconds.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common, also when this file is loaded by path

from _common import write_json  # noqa: E402


def matches(
    queries: list[list[float]], keys: list[list[float]], same: list[list[bool]], threshold: float
) -> dict[str, int]:
    """Of ``queries`` (embeddings), how many have a key at cosine >= ``threshold`` (``matched``) and how many of those
    have their best key on another entity (``misleading``: ``same[i][j]`` is False for query i, key j)."""
    import numpy as np

    matrix = np.asarray(keys, dtype=np.float64).reshape(len(keys), -1)
    norms = np.linalg.norm(matrix, axis=1) + 1e-12
    matched = misleading = 0
    for q, flags in zip(queries, same, strict=True):
        v = np.asarray(q, dtype=np.float64)
        scores = list(matrix @ v / (norms * (np.linalg.norm(v) + 1e-12)))
        best = max(range(len(keys)), key=scores.__getitem__) if keys else None
        if best is not None and scores[best] >= threshold:
            matched += 1
            misleading += not flags[best]
    return {"matched": matched, "misleading": misleading}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="joy/qa-v0")
    parser.add_argument("--data-seed", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0, help="the RL run's seed (its order of training tasks)")
    parser.add_argument("--train-tasks", type=int, default=400)
    parser.add_argument("--tasks", type=int, default=40, help="tasks of each evaluation split")
    parser.add_argument("--splits", nargs="+", default=["validation", "test"])
    parser.add_argument("--thresholds", nargs="+", type=float, default=[0.6, 0.8, 0.9])
    parser.add_argument("--embedder", default="hash")
    parser.add_argument("--out", help="write the JSON here")
    args = parser.parse_args(argv)
    if args.train_tasks < 1 or args.tasks < 1 or not all(0 <= t <= 1 for t in args.thresholds):
        parser.error("need --train-tasks >= 1, --tasks >= 1 and thresholds in [0, 1]")

    import joy_env
    from joy_agents.memory import make_embedder
    from joy_agents.sft_data import split_train_tasks

    start = time.perf_counter()
    embedder = make_embedder(args.embedder)
    train = joy_env.make(args.env, split="train", seed=args.data_seed)
    _, order = split_train_tasks(train.num_tasks, 0.5, args.data_seed)
    random.Random(f"rl-order/{args.seed}").shuffle(order)  # as joy_trainers.rl.loop.prepare draws them
    train_specs = [train.get_task(t) for t in order[: args.train_tasks]]
    keys = embedder.embed([s.query for s in train_specs])
    figures: dict[str, Any] = {}
    for split in args.splits:
        env = joy_env.make(args.env, split=split, seed=args.data_seed)
        specs = [env.get_task(t) for t in range(min(args.tasks, env.num_tasks))]
        queries = embedder.embed([s.query for s in specs])
        same = [[str(t.answer) == str(s.answer) for t in train_specs] for s in specs]
        figures[split] = {str(t): matches(queries, keys, same, t) | {"tasks": len(specs)} for t in args.thresholds}
        for t, f in figures[split].items():
            print(f"{split} at {t}: {f['matched']} of {f['tasks']} match a train request, {f['misleading']} of them "
                  "about another entity")  # fmt: skip
    result = {
        "benchmark": "memory_matches",
        "settings": vars(args),
        "figures": figures,
        "wall_s": time.perf_counter() - start,
    }
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
