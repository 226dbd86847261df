"""Seconds per GRPO optimisation step of our update against TRL's ``GRPOTrainer``, on identical settings.

One step, on each side: sample G completions of each of N prompts (one batched generate, temperature 1.0,
``--max-new-tokens`` new tokens), score them with the same cheap reward (fraction of distinct characters of
the completion text, decoded without special tokens), group advantages ``(r - mean) / (std + 1e-4)``, then
ONE optimiser step on all N * G completions (clipped ratio loss, k3 KL to the reference when ``beta > 0``,
AdamW, gradient clipping at 1.0).

- **Ours**: :class:`joy_agents.policy.TeamPolicy` (one role, one LoRA adapter, or full weights with
  ``--no-lora``), sampled by the trainers' continuous engine (:func:`joy_agents.sampling.sample_many`: token ids and
  sampling-time log-probs, each prompt prefilled once for its G samples, rows leaving at their stop), then
  :func:`joy_trainers.losses.group_advantages` and :func:`joy_trainers.rl.policy_update` with the optimiser
  of :func:`joy_trainers.rl.make_optimizers` and, when ``beta > 0``, a :class:`joy_trainers.rl.ReferencePolicy`
  taken before the first step (one micro-batch of N * G rows, as TRL's batch).
- **TRL**: ``trl.GRPOTrainer`` loading the same model directory (``peft_config`` with the same LoRA r, alpha
  and target modules), ``num_iterations=1``, ``steps_per_generation=1``, ``per_device_train_batch_size=N*G``,
  ``gradient_accumulation_steps=1``, float32 (``bf16=False``), no gradient checkpointing (our update does not
  checkpoint), constant learning rate, plain ``adamw_torch``, the k3 KL without TRL's importance-ratio factor
  (``use_bias_correction_kl=False``, as ours), ``use_vllm=False``, ``report_to=[]``, no saving.

Both sides get the same prompts: the master agent's first turn of N train tasks of ``joy/mixed-v0`` (system
prompt with its tool, user request) rendered with the model's chat template. TRL gets the rendered text and
tokenises it itself; the benchmark checks that its prompt ids equal ours. Steps alternate in one process:
a warm-up step on each side, then ``--rounds`` rounds of ``--steps`` steps of ours, then ``--steps`` steps of
TRL, so machine noise hits both; figures are medians over the timed steps.

Timing. Ours: a step runs from the generate call to the end of ``policy_update`` (optimiser step included);
``generate`` is ``sample_many`` plus decoding the texts, ``update`` the rest (reward, advantages,
reference forward, forward/backward, optimiser). TRL: a step runs from ``on_step_begin`` to ``on_step_end``
of a trainer callback (so it includes the optimiser step and gradient clipping, not the periodic logging);
``generate`` is the trainer's ``_generate`` (tokenising, ``model.generate``, decoding), ``update`` the rest
(reference forward and rewards in ``_generate_and_score_completions``, then the loss forward/backward of
``training_step``, clipping and the optimiser); ``trl_training_step_s`` is the whole ``training_step``
(generation included). ``*_reference_s`` is the no-grad reference forward inside each side's update.

Differences that remain (they are the libraries' own choices, not settings):

- reference with LoRA: TRL computes it with the adapter disabled (the base model); ours swaps a saved copy
  of the adapter weights in and out (three copies of the adapter per micro-batch: save, swap in, restore) and
  runs the forward with the adapter active. Both references equal the base model at the start (LoRA B is
  zero). Without LoRA, TRL loads a second model; ours makes the same three copies of every weight of the model
  per micro-batch (negligible for the tiny model, not for a large one);
- old log-probs: TRL (one update per generation) uses the detached current log-probs; ours uses the
  log-probs recorded while sampling (a log-softmax per generated token). Neither runs an extra forward;
- TRL's fused LM head scores every position, prompt included, on devices without Triton (the CPU), in the
  reference and the loss forward and backward, and computes entropies; ours projects only the completion
  positions to the vocabulary. On a GPU with Triton, TRL scores only the completion positions too;
- stop texts: here ours samples with ``stop=()``: rows end on the EOS ids only, as in TRL (the model's
  ``generation_config`` ends on ``<|im_end|>`` and ``</answer>``). The trainers pass ``stop=("</answer>",)``;
  a stop text that is not a single added token is also looked for in the decoded tail of every running row
  at each generated token, which this benchmark does not time.

    python benchmarks/grpo_step_vs_trl.py --out benchmarks/results/grpo_step_vs_trl.json
    python benchmarks/grpo_step_vs_trl.py --quick --threads 1 --out /tmp/grpo_vs_trl.json
    python benchmarks/grpo_step_vs_trl.py --threads 1 --cpu-time --out /tmp/grpo_vs_trl_cpu.json  # busy machine
    python benchmarks/grpo_step_vs_trl.py --beta 0 --loss-type grpo --no-lora --out /tmp/full.json
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common, also when this file is loaded by path

from _common import write_json  # noqa: E402

ROLE = "master"
TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_CLOCK = [time.perf_counter]  # ``--cpu-time``: time.process_time (CPU seconds of this process)


def _now() -> float:
    """The benchmark's clock: wall seconds, or CPU seconds of this process with ``--cpu-time``."""
    return _CLOCK[0]()


FULL = {"steps": 2, "rounds": 5}
QUICK = {"steps": 1, "rounds": 2}


def distinct_char_reward(text: str) -> float:
    """The reward of both sides: the fraction of distinct characters in ``text`` (0 for an empty text)."""
    return len(set(text)) / len(text) if text else 0.0


def env_prompts(tokenizer: Any, n: int, env_id: str = "joy/mixed-v0") -> list[dict[str, Any]]:
    """The first turn (messages and tools) of the acting agent in ``n`` train tasks of ``env_id``, with its
    chat-template rendering: a list of ``{"messages", "tools", "text"}``."""
    import joy_env

    env = joy_env.make(env_id, split="train", seed=0)
    out = []
    for i in range(n):
        env.reset(seed=i)
        info = env.infos[env.agent_selection]
        messages, tools = list(info["messages"]), info["tools"] or None
        text = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
        out.append({"messages": messages, "tools": tools, "text": text})
    return out


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def _snapshot(params: list[Any]) -> list[Any]:
    return [p.detach().clone() for p in params]


def _max_change(params: list[Any], before: list[Any]) -> float:
    return max((float((p.detach() - b).abs().max()) for p, b in zip(params, before, strict=True)), default=0.0)


class OurSide:
    """Our GRPO step: ``sample_many`` -> rewards -> ``group_advantages`` -> ``policy_update``."""

    def __init__(self, args: argparse.Namespace, prompts: list[dict[str, Any]]) -> None:
        import torch

        from joy_agents.policy import SamplingConfig, TeamConfig, TeamPolicy
        from joy_trainers.rl import ReferencePolicy, UpdateConfig, make_optimizers

        torch.manual_seed(args.seed)
        self.args = args
        self.team = TeamPolicy(
            TeamConfig(
                model=args.model,
                roles=(ROLE,),
                lora_r=args.lora_r,
                lora_alpha=args.lora_alpha,
                lora_target_modules=TARGET_MODULES,
                use_lora=not args.no_lora,
                dtype="float32",
                device=args.device,
            )
        )
        self.tokenizer = self.team.tokenizer_for(ROLE)
        self.prompt_ids = [self.team.encode_prompt(ROLE, p["messages"], p["tools"]) for p in prompts]
        self.optimizer = make_optimizers(self.team, args.lr)[ROLE]
        self.sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=args.max_new_tokens, stop=())
        self.update_config = UpdateConfig(
            loss_type=args.loss_type,
            epsilon=args.epsilon,
            beta=args.beta,
            temperature=1.0,
            max_new_tokens=args.max_new_tokens,
            micro_batch_size=len(prompts) * args.group_size,
            max_grad_norm=1.0,
        )
        self.reference = ReferencePolicy(self.team, [ROLE]) if args.beta else None
        self._reference_s = 0.0
        if self.reference is not None:
            self._time_reference(self.reference)
        self.params = self.team.trainable_parameters(ROLE)
        self.initial = _snapshot(self.params)

    def _time_reference(self, reference: Any) -> None:
        """Accumulate the time spent inside ``reference.active`` (the reference forward and the weight swaps)."""
        original = reference.active

        @contextlib.contextmanager
        def timed(team: Any, role: str) -> Iterator[None]:
            start = _now()
            try:
                with original(team, role):
                    yield
            finally:
                self._reference_s += _now() - start

        reference.active = timed

    def step(self) -> dict[str, float]:
        """One GRPO step; returns its seconds (total, generate, update, reference) and completion tokens."""
        import torch

        from joy_agents.sampling.base import sample_many
        from joy_trainers.losses import group_advantages
        from joy_trainers.rl import policy_update

        g = self.args.group_size
        self._reference_s = 0.0
        start = _now()
        # the trainers' sampling path: the continuous engine (each prompt prefilled once for its G samples)
        groups = sample_many(self.team, [(ROLE, p) for p in self.prompt_ids], self.sampling, g)
        samples = [s for group in groups for s in group]
        texts = self.tokenizer.batch_decode([s.completion_ids for s in samples], skip_special_tokens=True)
        generated = _now()
        rewards = torch.tensor([distinct_char_reward(t) for t in texts], dtype=torch.float32)
        advantages = group_advantages(rewards, g, scale=True)
        policy_update(self.team, ROLE, self.optimizer, samples, advantages.tolist(), self.update_config, self.reference)
        end = _now()
        return {
            "step_s": end - start,
            "generate_s": generated - start,
            "update_s": end - generated,
            "reference_s": self._reference_s,
            "completion_tokens": sum(len(s.completion_ids) for s in samples) / len(samples),
        }

    def param_change(self) -> float:
        return _max_change(self.params, self.initial)


class TRLSide:
    """``trl.GRPOTrainer`` on the same model, prompts, reward and loss settings; its steps are timed by a
    callback, whose ``on_step_end`` also runs ``between(step)`` (our steps) so the two sides alternate."""

    def __init__(
        self,
        args: argparse.Namespace,
        prompts: list[dict[str, Any]],
        expected_prompt_ids: list[list[int]],
        total_steps: int,
        between: Callable[[int], None],
        output_dir: str,
    ) -> None:
        from datasets import Dataset
        from transformers import AutoTokenizer, TrainerCallback
        from transformers.trainer_callback import PrinterCallback
        from trl import GRPOConfig, GRPOTrainer

        self.args = args
        self.expected = sorted(tuple(p) for p in expected_prompt_ids for _ in range(args.group_size))
        self.records: list[dict[str, float]] = []
        self._current: dict[str, float] = {}
        tokenizer = AutoTokenizer.from_pretrained(args.model, padding_side="left", truncation_side="left")
        n = len(prompts)

        def reward(completions: list[str], **kwargs: Any) -> list[float]:
            return [distinct_char_reward(c) for c in completions]

        config = GRPOConfig(
            output_dir=output_dir,
            per_device_train_batch_size=n * args.group_size,
            gradient_accumulation_steps=1,
            num_generations=args.group_size,
            steps_per_generation=1,
            num_iterations=1,
            max_steps=total_steps,
            max_completion_length=args.max_new_tokens,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            beta=args.beta,
            loss_type=args.loss_type,
            epsilon=args.epsilon,
            scale_rewards="group",
            use_bias_correction_kl=False,  # the k3 KL of our loss (the compute is the same either way)
            learning_rate=args.lr,
            lr_scheduler_type="constant",
            warmup_steps=0,
            weight_decay=0.0,
            optim="adamw_torch",
            max_grad_norm=1.0,
            bf16=False,
            fp16=False,
            gradient_checkpointing=False,
            use_vllm=False,
            use_cpu=args.device == "cpu",
            report_to=[],
            save_strategy="no",
            disable_tqdm=True,
            shuffle_dataset=False,  # every step samples exactly the N prompts, as ours
            dataloader_num_workers=0,
            seed=args.seed,
        )
        peft_config = None
        if not args.no_lora:
            from peft import LoraConfig

            peft_config = LoraConfig(
                r=args.lora_r,
                lora_alpha=args.lora_alpha,
                lora_dropout=0.0,
                target_modules=list(TARGET_MODULES),
                bias="none",
                task_type="CAUSAL_LM",
            )
        dataset = Dataset.from_dict({"prompt": [p["text"] for p in prompts] * total_steps})
        self.trainer = GRPOTrainer(
            model=args.model,
            reward_funcs=reward,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=peft_config,
        )
        self._wrap_methods()
        side = self

        class Timing(TrainerCallback):
            def on_step_begin(self, targs: Any, state: Any, control: Any, **kwargs: Any) -> None:
                side._current = {
                    "start": _now(),
                    "generate_s": 0.0,
                    "reference_s": 0.0,
                    "training_step_s": 0.0,
                }

            def on_step_end(self, targs: Any, state: Any, control: Any, **kwargs: Any) -> None:
                cur = side._current
                total = _now() - cur["start"]
                side.records.append(
                    {
                        "step_s": total,
                        "generate_s": cur["generate_s"],
                        "update_s": total - cur["generate_s"],
                        "reference_s": cur["reference_s"],
                        "training_step_s": cur["training_step_s"],
                        "completion_tokens": cur.get("completion_tokens", float("nan")),
                    }
                )
                between(state.global_step)

        self.trainer.remove_callback(PrinterCallback)  # the summary below replaces its printed logs
        self.trainer.add_callback(Timing())
        self.params = [p for p in self.trainer.model.parameters() if p.requires_grad]
        self.initial = _snapshot(self.params)

    def _wrap_methods(self) -> None:
        import torch

        trainer = self.trainer
        generate = trainer._generate
        logps = trainer._get_per_token_logps_and_entropies
        training_step = trainer.training_step

        def timed_generate(prompts: list[Any]) -> Any:
            start = _now()
            out = generate(prompts)
            self._current["generate_s"] += _now() - start
            prompt_ids, completion_ids = out[0], out[1]
            self._current["completion_tokens"] = sum(len(c) for c in completion_ids) / max(1, len(completion_ids))
            if sorted(tuple(p) for p in prompt_ids) != self.expected:
                raise RuntimeError("TRL tokenised the prompts differently from ours; the comparison would not be fair")
            return out

        def timed_logps(*args: Any, **kwargs: Any) -> Any:
            if torch.is_grad_enabled():  # the policy forward of the loss
                return logps(*args, **kwargs)
            start = _now()  # no grad: the reference forward (or old log-probs, not used here)
            try:
                return logps(*args, **kwargs)
            finally:
                self._current["reference_s"] += _now() - start

        def timed_training_step(*args: Any, **kwargs: Any) -> Any:
            start = _now()
            try:
                return training_step(*args, **kwargs)
            finally:
                self._current["training_step_s"] += _now() - start

        trainer._generate = timed_generate
        trainer.training_step = timed_training_step
        trainer._get_per_token_logps_and_entropies = timed_logps

    def train(self) -> None:
        self.trainer.train()

    def param_change(self) -> float:
        return _max_change(self.params, self.initial)


def _summary(records: list[dict[str, float]], prefix: str) -> dict[str, float]:
    out = {f"{prefix}_s_per_step": _median([r["step_s"] for r in records])}
    for key in ("generate_s", "update_s", "reference_s"):
        out[f"{prefix}_{key}"] = _median([r[key] for r in records])
    tokens = [r["completion_tokens"] for r in records]
    out[f"{prefix}_completion_tokens_mean"] = sum(tokens) / len(tokens) if tokens else float("nan")
    return out


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 and math.isfinite(a) and math.isfinite(b) else float("nan")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="write the JSON here")
    parser.add_argument("--model", help="model directory or name (default: the embedded tiny model, seed 0)")
    parser.add_argument("--steps", type=int, help=f"timed steps per side per round (default {FULL['steps']})")
    parser.add_argument("--rounds", type=int, help=f"alternating rounds (default {FULL['rounds']})")
    parser.add_argument("--group-size", type=int, default=4, help="G: completions per prompt")
    parser.add_argument("--prompts", type=int, default=4, help="N: prompts per step")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--beta", type=float, default=0.04)
    parser.add_argument("--loss-type", default="dapo", choices=("grpo", "bnpo", "dr_grpo", "dapo"))
    parser.add_argument("--epsilon", type=float, default=0.2)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument("--lora-alpha", type=int, default=32)
    parser.add_argument("--no-lora", action="store_true", help="full fine-tuning on both sides")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's; use 1 on a busy machine)")
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time in CPU seconds of this process, not wall seconds: with --threads 1, other jobs barely move it",
    )
    parser.add_argument("--quick", action="store_true", help=f"{QUICK['rounds']} rounds of {QUICK['steps']} step")
    args = parser.parse_args(argv)
    defaults = QUICK if args.quick else FULL
    args.steps = defaults["steps"] if args.steps is None else args.steps
    args.rounds = defaults["rounds"] if args.rounds is None else args.rounds
    if args.steps < 1 or args.rounds < 1 or args.prompts < 1 or args.group_size < 2 or args.max_new_tokens < 1:
        parser.error("need --steps, --rounds, --prompts, --max-new-tokens >= 1 and --group-size >= 2")

    import peft
    import torch
    import transformers
    import trl

    from joy_agents.tiny import build_tiny_model

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.cpu_time:
        _CLOCK[0] = time.process_time
    if args.model is None:
        args.model = str(build_tiny_model(seed=0))
    torch.manual_seed(args.seed)

    start = _now()
    from transformers import AutoTokenizer

    prompts = env_prompts(AutoTokenizer.from_pretrained(args.model), args.prompts)
    ours = OurSide(args, prompts)
    ours_setup_s = _now() - start

    ours_records: list[dict[str, float]] = []
    total_trl_steps = 1 + args.rounds * args.steps

    def between(trl_step: int) -> None:
        """After TRL's warm-up step and after each of its rounds: our next round (none after the last)."""
        if trl_step < total_trl_steps and (trl_step - 1) % args.steps == 0:
            ours_records.extend(ours.step() for _ in range(args.steps))

    with tempfile.TemporaryDirectory(prefix="grpo_vs_trl-") as tmp:
        start = _now()
        theirs = TRLSide(args, prompts, ours.prompt_ids, total_trl_steps, between, tmp)
        trl_setup_s = _now() - start
        ours.step()  # warm-up (not timed), then TRL's warm-up step, then the rounds
        theirs.train()
    trl_records = theirs.records[1:]

    lora = (
        None if args.no_lora else {"r": args.lora_r, "alpha": args.lora_alpha, "target_modules": list(TARGET_MODULES)}
    )
    result: dict[str, Any] = {"benchmark": "grpo_step_vs_trl"}
    result.update(_summary(ours_records, "ours"))
    result.update(_summary(trl_records, "trl"))
    result["trl_training_step_s"] = _median([r["training_step_s"] for r in trl_records])
    result["ratio_vs_trl"] = _ratio(result["ours_s_per_step"], result["trl_s_per_step"])
    result["generate_ratio_vs_trl"] = _ratio(result["ours_generate_s"], result["trl_generate_s"])
    result["update_ratio_vs_trl"] = _ratio(result["ours_update_s"], result["trl_update_s"])
    result.update(
        {
            "ours_steps": len(ours_records),
            "trl_steps": len(trl_records),
            "ours_step_s": [r["step_s"] for r in ours_records],
            "trl_step_s": [r["step_s"] for r in trl_records],
            "prompt_tokens_mean": sum(len(p) for p in ours.prompt_ids) / len(ours.prompt_ids),
            "ours_param_max_abs_change": ours.param_change(),
            "trl_param_max_abs_change": theirs.param_change(),
            "ours_setup_s": ours_setup_s,
            "trl_setup_s": trl_setup_s,
            "settings": {
                "model": args.model,
                "prompts": args.prompts,
                "group_size": args.group_size,
                "max_new_tokens": args.max_new_tokens,
                "temperature": 1.0,
                "beta": args.beta,
                "loss_type": args.loss_type,
                "epsilon": args.epsilon,
                "lr": args.lr,
                "lora": lora,
                "dtype": "float32",
                "device": args.device,
                "steps_per_round": args.steps,
                "rounds": args.rounds,
                "warmup_steps_per_side": 1,
                "seed": args.seed,
                "threads": torch.get_num_threads(),
                "quick": args.quick,
                "clock": "cpu" if args.cpu_time else "wall",
            },
            "versions": {
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "trl": trl.__version__,
                "peft": peft.__version__,
            },
            "machine": {
                "processor": platform.processor(),
                "platform": platform.platform(),
                "cpu_count": os.cpu_count(),
                "torch_threads": torch.get_num_threads(),
            },
            "date": time.strftime("%Y-%m-%d"),
        }
    )
    r = result
    print(
        f"{args.prompts} prompts x G={args.group_size}, {args.max_new_tokens} new tokens, beta={args.beta}, "
        f"{args.loss_type}, {'full weights' if args.no_lora else f'LoRA r={args.lora_r}'}; medians of "
        f"{r['ours_steps']} / {r['trl_steps']} steps"
    )
    print(f"{'':<6}{'s/step':>9}{'generate':>10}{'update':>9}{'(ref)':>8}{'tokens':>8}")
    for side in ("ours", "trl"):
        print(
            f"{side:<6}{r[f'{side}_s_per_step']:>9.3f}{r[f'{side}_generate_s']:>10.3f}{r[f'{side}_update_s']:>9.3f}"
            f"{r[f'{side}_reference_s']:>8.3f}{r[f'{side}_completion_tokens_mean']:>8.1f}"
        )
    print(
        f"ours / TRL: {r['ratio_vs_trl']:.2f}x per step (generate {r['generate_ratio_vs_trl']:.2f}x, "
        f"update {r['update_ratio_vs_trl']:.2f}x)"
    )
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
