"""Two joyagents_grpo steps under ``accelerate launch --num_processes 2``; each rank writes a digest of its
parameters (used by tests/test_rl.py). Usage: dist_rl_steps.py SFT_RUN OUT_DIR"""

import hashlib
import json
import os
import sys

import torch

from joy_agents.policy import SamplingConfig, TeamPolicy
from joy_trainers import rl
from joy_trainers.joyagents_grpo import JoyAgentsGRPOConfig, JoyAgentsGRPOTrainer


def digest(team) -> str:
    h = hashlib.sha256()
    for role in team.roles:
        for p in team.trainable_parameters(role):
            h.update(p.detach().cpu().to(torch.float32).numpy().tobytes())
    return h.hexdigest()


def main() -> None:
    sft_run, out = sys.argv[1], sys.argv[2]
    initial = digest(TeamPolicy.load(os.path.join(sft_run, "team")))
    cfg = JoyAgentsGRPOConfig(
        sft_run=sft_run,
        output_dir=out,
        iterations=1,
        steps_per_iteration=2,
        tasks_per_step=4,
        group_size=2,
        max_nodes=2,
        max_new_tokens=12,
        max_cycles=3,
        max_prompt_tokens=256,
        lr=1e-2,
        eval_tasks=0,
        checkpoint_every=1,
        top_k="all",
        # dynamic sampling that never reaches its target: every step draws max_draws batches on both ranks, and the
        # batch std of the advantages is gathered over both
        groups_per_step=1000,
        max_draws=2,
        scale_rewards="batch",
        advantage_reward="shaped_accuracy",
    )
    trainer = JoyAgentsGRPOTrainer(cfg)
    trainer.claim_run_dir()
    state = trainer.start_state()
    rank, size = rl.world()
    assert size == 2, f"run me with 2 processes, got {size}"
    tasks = rl.shard(state.batch_tasks(0, cfg.tasks_per_step))
    for step in range(cfg.total_steps):
        if cfg.beta and state.reference is None:
            state.reference = rl.ReferencePolicy(state.team, state.team.roles)
        trainer.run_step(state, step)
        state.step = step + 1
    after_steps = digest(state.team)
    # an untrained team's groups may all be flat (no update); one more update on rank-specific samples checks
    # that different data on each rank still ends in identical parameters
    team = state.team
    prompt = team.encode_prompt("math", [{"role": "user", "content": f"What is {rank} + 2?"}], None)
    (samples,) = team.generate("math", [prompt], SamplingConfig(temperature=1.0, max_new_tokens=6), num_samples=2)
    rl.policy_update(team, "math", state.optimizers["math"], samples, [1.0, -1.0], rl.UpdateConfig())
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"params-rank{rank}.json"), "w") as f:
        row = {"steps": state.step, "tasks": tasks, "after_steps": after_steps, "params": digest(team)}
        row["tasks_drawn"] = state.tasks_drawn
        row.update(initial=initial, samples=[s.completion_ids for s in samples])
        json.dump(row, f)


if __name__ == "__main__":
    main()
