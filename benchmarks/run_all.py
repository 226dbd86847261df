"""Every benchmark behind one command: writes each one's JSON into ``--out`` and a summary table
(``summary.md``, ``summary.json``) of the headline figures against their goals.

    python benchmarks/run_all.py --quick --out /tmp/bench-quick            # about 2 minutes
    python benchmarks/run_all.py --out benchmarks/results                  # the published figures (~45 min)
    python benchmarks/run_all.py --only env_speed sampling_cost --out DIR

Each benchmark runs in its own process (``python benchmarks/<name>.py ...``), one after the other (they
time themselves: never run two at once on a small machine). A benchmark that fails is reported in the
summary and the others still run; the exit status is non-zero if any failed. See ``benchmarks/README.md``
for what each figure means.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

BENCHMARKS: dict[str, dict[str, list[str]]] = {
    "env_speed": {"quick": ["--episodes", "300", "--repeats", "100"], "full": []},
    "rollout_throughput": {"quick": ["--episodes", "8"], "full": []},
    "decode_step": {"quick": ["--steps", "5"], "full": []},
    "sampling_cost": {"quick": ["--tasks", "2"], "full": []},
    "sft_rows": {"quick": ["--tasks", "50", "--repeats", "3"], "full": []},
    "sft_speed": {"quick": ["--tasks", "40"], "full": []},
    "grpo_step_vs_trl": {"quick": ["--quick"], "full": []},
    "run_baselines": {"quick": ["--quick"], "full": []},
}
"""Benchmark name -> its extra arguments in quick and full mode (``--out FILE`` / ``--out-dir DIR`` added)."""


def _get(data: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


HEADLINES: list[tuple[str, str, str, str]] = [
    ("env_speed", "min_warm_turns_per_s", "expert env turns / s (slowest env id)", ">= 5000"),
    ("env_speed", "snapshot_restore_us.clean_db_us", "snapshot + restore (us)", ""),
    ("rollout_throughput", "ratio_vs_per_role", "continuous engine over one generate per role", ">= 3"),
    ("rollout_throughput", "ratio_vs_generate", "continuous engine over bare generate, same calls", ">= 2"),
    ("rollout_throughput", "rows_per_call_ratio", "rows per decode forward, continuous over per role", ""),
    ("rollout_throughput", "adapter_team_memory_ratio", "5-adapter team memory over one model", "<= 1.2"),
    ("decode_step", "adapter_kernels_per_layer.stacked_mixed", "adapter kernels per layer, rows of every role", ""),
    ("decode_step", "adapter_kernels_per_layer.peft_one_adapter", "adapter kernels per layer, PEFT, one role", ""),
    ("sampling_cost", "nodewise_continuations", "node-wise continuations run", ""),
    ("sampling_cost", "joint_trajectories", "joint trajectories for the same choices", ""),
    ("sampling_cost", "joint_over_nodewise", "joint over node-wise samples", ""),
    ("sft_rows", "token_ratio", "SFT tokens, a row per turn over a row per conversation", ""),
    ("sft_rows", "loss_head_speedup", "SFT step, loss head on labelled positions only", ""),
    ("sft_rows", "epoch_tokens.completion.ratio", "adapter epoch positions, whole rows over shared prefixes", ""),
    ("sft_rows", "shared_prefix_speedup", "SFT step, shared prefix run once", ""),
    ("sft_speed", "ratio", "SFT trainer tokens/s over a plain forward/backward loop", ">= 1"),
    ("grpo_step_vs_trl", "ratio_vs_trl", "our GRPO step time over TRL's", "<= 1.0 (goal 0.8)"),
]
"""(benchmark, JSON path, label, goal) rows of the summary table."""


def command(name: str, quick: bool, out: Path) -> list[str]:
    """The command line of benchmark ``name``."""
    args = BENCHMARKS[name]["quick" if quick else "full"]
    target = ["--out-dir", str(out / "baselines")] if name == "run_baselines" else ["--out", str(out / f"{name}.json")]
    return [sys.executable, str(HERE / f"{name}.py"), *args, *target]


def summary_rows(out: Path, status: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The headline figures found in ``out`` (missing ones are ``None``), plus one row per baseline method."""
    rows = []
    for name, path, label, goal in HEADLINES:
        if name not in status:
            continue
        file = out / f"{name}.json"
        value = _get(json.loads(file.read_text()), path) if file.is_file() else None
        rows.append({"benchmark": name, "figure": label, "value": value, "goal": goal})
    baselines = out / "baselines" / "baselines.json"
    if "run_baselines" in status and baselines.is_file():
        report = json.loads(baselines.read_text())
        for method, e in report["summary"].items():
            tokens = f"{e['generated_tokens']:,.0f} tokens"
            value = f"success {e['success_rate']:.3f}, reward {e['mean_reward']:.3f}, {tokens}"
            rows.append({"benchmark": "run_baselines", "figure": f"{method} (test)", "value": value, "goal": ""})
    return rows


def _fmt(value: Any) -> str:
    if value is None:
        return "missing"
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="directory of every JSON file and the summary")
    parser.add_argument("--quick", action="store_true", help="short settings of every benchmark")
    parser.add_argument("--only", nargs="+", choices=list(BENCHMARKS), help="run only these benchmarks")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    status: dict[str, dict[str, Any]] = {}
    for name in args.only or list(BENCHMARKS):
        cmd = command(name, args.quick, out)
        print(f"[run_all] {' '.join(cmd)}", flush=True)
        start = time.perf_counter()
        rc = subprocess.call(cmd, cwd=HERE.parent)
        status[name] = {"rc": rc, "wall_s": round(time.perf_counter() - start, 1), "command": " ".join(cmd[1:])}
        if rc != 0:
            print(f"[run_all] {name} FAILED (exit status {rc})", flush=True)
    rows = summary_rows(out, status)
    mode = "quick" if args.quick else "full"
    lines = [
        f"Benchmarks ({mode}), {time.strftime('%Y-%m-%d')}; JSON files beside this one.",
        "",
        "| benchmark | figure | value | goal |",
        "|---|---|---|---|",
        *[f"| {r['benchmark']} | {r['figure']} | {_fmt(r['value'])} | {r['goal']} |" for r in rows],
        "",
        "| benchmark | exit status | seconds |",
        "|---|---|---|",
        *[f"| {n} | {s['rc']} | {s['wall_s']} |" for n, s in status.items()],
    ]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    report = {"mode": mode, "date": time.strftime("%Y-%m-%d"), "status": status, "figures": rows}
    (out / "summary.json").write_text(json.dumps(report, indent=2))
    print("\n".join(lines))
    if any(s["rc"] != 0 for s in status.values()):
        raise SystemExit(1)
    return report


if __name__ == "__main__":
    main()
