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
* ``epoch_tokens[kind]``: token positions one adapter-stage epoch (each role's rows on their own) of
  ``--batch-size`` batches runs through the model, padding included: ``plain`` in
  :func:`joy_trainers.sft.bucketed_order` batches, ``shared_prefix`` in batches grouped by
  :func:`joy_trainers.sft.prefix_groups` with each batch's common prefix run once
  (:func:`joy_trainers.sft.collate_shared_prefix`); ``ratio`` = plain / shared_prefix.
* ``shared_prefix_step_s``: seconds of one forward + backward on one batch of conversation rows with the
  most common start (the master's system prompt) as whole rows and with the prefix run once; alternating,
  median of ``--repeats``; ``shared_prefix_speedup`` = whole / shared (null when no two rows share a start).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections import Counter


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

    from joy_agents.sft_data import build_sft_examples
    from joy_agents.tiny import build_tiny_model
    from joy_trainers.sft import (
        bucketed_order,
        collate_left,
        collate_shared_prefix,
        completion_loss,
        prefix_groups,
        sft_rows,
    )
    from joy_trainers.sft_batches import shared_prefix_length

    torch.manual_seed(0)
    path = args.model or str(build_tiny_model())
    tokenizer = AutoTokenizer.from_pretrained(path)
    per_role = build_sft_examples("joy/mixed-v0", args.tasks)
    # each role's rows (the adapter stage's data); all roles' rows in role order (the base stage's)
    role_rows = {
        kind: {role: sft_rows(tokenizer, exs, args.max_length, kind) for role, exs in per_role.items() if exs}
        for kind in ("completion", "conversation")
    }
    kinds = {kind: [r for rs in by_role.values() for r in rs] for kind, by_role in role_rows.items()}
    rows = {
        kind: {
            "rows": len(rs),
            "tokens": sum(len(r["input_ids"]) for r in rs),
            "labels": sum(sum(1 for v in r["labels"] if v != -100) for r in rs),
        }
        for kind, rs in kinds.items()
    }

    def epoch_tokens(rs: list[dict]) -> tuple[int, int]:
        """Token positions of one epoch of ``rs`` as plain batches and as prefix-grouped, prefix-shared ones."""
        lengths = [len(r["input_ids"]) for r in rs]
        b = args.batch_size
        plain = sum(len(c) * max(lengths[i] for i in c) for c in _batches(bucketed_order(lengths, b, 1.0, 0), b))
        groups = prefix_groups([r["input_ids"] for r in rs], b)
        shared = 0
        for chunk in _batches(bucketed_order(lengths, b, 1.0, 0, groups=groups), b):
            n = shared_prefix_length([rs[i] for i in chunk]) if len(chunk) > 1 else 0
            n = n if n >= 16 else 0  # collate_shared_prefix's min_prefix
            shared += n + len(chunk) * (max(lengths[i] for i in chunk) - n)
        return plain, shared

    epoch: dict[str, dict[str, float]] = {}
    for kind in kinds:
        plain = shared = 0
        for rows_of_role in role_rows[kind].values():  # the adapter stage: one role's rows at a time
            p, q = epoch_tokens(rows_of_role)
            plain, shared = plain + p, shared + q
        epoch[kind] = {"plain": plain, "shared_prefix": shared, "ratio": plain / shared}

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

    model.config.logit_scale = None
    conv = kinds["conversation"]
    keys = prefix_groups([r["input_ids"] for r in conv], 2)
    counts = Counter(k for k in keys if k is not None)
    prefix_s: dict[str, float] | None = None
    prefix_batches: dict[str, dict] = {}
    if counts:  # the most common start (the master's system prompt): a batch of such rows of middle length
        top = counts.most_common(1)[0][0]
        same = sorted((r for r, k in zip(conv, keys, strict=True) if k == top), key=lambda r: len(r["input_ids"]))
        same_batch = same[len(same) // 2 :][:: max(1, len(same) // (2 * args.batch_size))][: args.batch_size]
        prefix_batches = {"whole": collate_left(same_batch, tokenizer.pad_token_id)}
        prefix_batches["shared"] = collate_shared_prefix(same_batch, tokenizer.pad_token_id)

        def prefix_step(kind: str) -> float:
            start = time.perf_counter()
            completion_loss(model, prefix_batches[kind]).backward()
            return time.perf_counter() - start

        for kind in ("whole", "shared"):  # warm-up
            prefix_step(kind)
        prefix_times: dict[str, list[float]] = {"whole": [], "shared": []}
        for _ in range(args.repeats):
            for kind in ("whole", "shared"):
                prefix_times[kind].append(prefix_step(kind))
        prefix_s = {k: statistics.median(v) for k, v in prefix_times.items()}

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
        "epoch_tokens": epoch,
        "shared_prefix_batch": {
            "rows": int(prefix_batches["whole"]["input_ids"].size(0)),
            "tokens": int(prefix_batches["whole"]["attention_mask"].sum()),
            "prefix_tokens": int(prefix_batches["shared"]["prefix_ids"].size(1)),
        }
        if prefix_s
        else None,
        "shared_prefix_step_s": prefix_s,
        "shared_prefix_speedup": prefix_s["whole"] / prefix_s["shared"] if prefix_s else None,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return result


def _batches(order: list[int], size: int) -> list[list[int]]:
    """The batches a sequential loader cuts from ``order``."""
    return [order[i : i + size] for i in range(0, len(order), size)]


if __name__ == "__main__":
    main()
