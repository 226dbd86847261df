"""SFT data and step cost: one row per expert turn against one row per conversation, and the loss head.

    python benchmarks/sft_rows.py --out sft_rows.json [--tasks 400] [--max-length 512] [--batch-size 8]

Figures (all measured in this one run, on the embedded tiny model):

* ``rows[kind]``: rows, tokens and supervised tokens of the SFT data of ``--tasks`` expert episodes of
  ``joy/mixed-v0`` as ``completion`` rows (one per expert turn) and ``conversation`` rows (one per role's
  conversation); ``token_ratio`` = completion tokens / conversation tokens for the same labels.
* ``step_s``: seconds of one forward + backward of :func:`joy_trainers.sft.completion_loss` on a batch of
  conversation rows, with the vocabulary projection on the labelled positions only (``labelled``) and on
  the last ``keep`` positions (``last_keep``, the path for heads with logit scaling); alternating, median
  of ``--repeats``; ``loss_head_speedup`` = last_keep / labelled.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a model directory with its tokenizer; default: the embedded tiny model")
    parser.add_argument("--tasks", type=int, default=400)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", help="write the JSON here")
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from joy_agents.sft_data import build_sft_examples, conversation_rows, tokenize_example
    from joy_agents.tiny import build_tiny_model
    from joy_trainers.sft import collate_left, completion_loss

    torch.manual_seed(0)
    path = args.model or str(build_tiny_model())
    tokenizer = AutoTokenizer.from_pretrained(path)
    examples = [ex for exs in build_sft_examples("joy/mixed-v0", args.tasks).values() for ex in exs]
    kinds = {
        "completion": [tokenize_example(tokenizer, ex, args.max_length) for ex in examples],
        "conversation": conversation_rows(tokenizer, examples, args.max_length),
    }
    rows = {
        kind: {
            "rows": len(rs),
            "tokens": sum(len(r["input_ids"]) for r in rs),
            "labels": sum(sum(1 for v in r["labels"] if v != -100) for r in rs),
        }
        for kind, rs in kinds.items()
    }

    model = AutoModelForCausalLM.from_pretrained(path)
    longest = sorted(kinds["conversation"], key=lambda r: len(r["input_ids"]))[-4 * args.batch_size :]
    batch = collate_left(longest[::4][: args.batch_size], tokenizer.pad_token_id)

    def step(scaled: bool) -> float:
        model.config.logit_scale = 1.0 if scaled else None  # Qwen2 ignores it; it selects the general path
        start = time.perf_counter()
        completion_loss(model, batch).backward()
        return time.perf_counter() - start

    for scaled in (True, False):  # warm-up
        step(scaled)
    times: dict[str, list[float]] = {"labelled": [], "last_keep": []}
    for _ in range(args.repeats):
        times["last_keep"].append(step(True))
        times["labelled"].append(step(False))
    step_s = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "benchmark": "sft_rows",
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()} {platform.processor() or ''} torch {torch.__version__}".strip(),
        "settings": vars(args),
        "rows": rows,
        "token_ratio": rows["completion"]["tokens"] / rows["conversation"]["tokens"],
        "batch_tokens": int(batch["attention_mask"].sum()),
        "step_s": step_s,
        "loss_head_speedup": step_s["last_keep"] / step_s["labelled"],
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return result


if __name__ == "__main__":
    main()
