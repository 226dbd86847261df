"""Does a team copy entities from its context, or write the ones it memorised? A teacher-forced probe.

    python benchmarks/copy_probe.py RUN_DIR [RUN_DIR ...] --out copy_probe.json [--tasks 40]

For each team (``RUN_DIR/team``, written by ``joy-train --trainer sft``), the scripted expert plays the first
``--tasks`` tasks of ``joy/mixed-v0`` in two places: the RL part of the train split (episodes the team never
trained on, with entities from the train pool: names, products and ids it has seen) and the test split
(entities it has never seen). Every expert turn is fed to the role that took it, and the greedy prediction
of each of the expert's tokens is compared with the token (teacher forcing, the prompt cut to
``--max-length`` tokens as in training). Figures per split:

* ``token_accuracy``: share of the expert's tokens predicted;
* ``entity_token_accuracy``: the same on the tokens of entities the expert copied: a capitalised word or
  code of 3+ letters, or a run of 3+ digits, of the expert's turn that also occurs in what the role saw
  (:data:`joy_agents.sft_data.ENTITY_WORD`, :data:`joy_agents.sft_data.ENTITY_DIGITS`); every one of them can
  be read from the prompt;
* ``entity_tokens`` / ``tokens``: how many were scored.

A team that copies scores about the same on both splits; a team that memorised scores well on train entities
and near zero on test entities, and then solves almost no test task however well formed its turns are.
The probe takes about 30 s per team on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common, also when this file is loaded by path

from _common import torch_machine, write_json  # noqa: E402


def copied_spans(example: Any) -> list[tuple[int, int]]:
    """Character spans of the entities in ``example.completion`` that also occur in its messages."""
    from joy_agents.sft_data import ENTITY_DIGITS, ENTITY_WORD

    seen = "\n".join(m["content"] for m in example.messages if isinstance(m.get("content"), str))
    spans = []
    for pattern in (ENTITY_WORD, ENTITY_DIGITS):
        for found in pattern.finditer(example.completion):
            if found.group(0) in seen:
                spans.append(found.span())
    return sorted(spans)


def probe(team: Any, examples: list[Any], max_length: int) -> dict[str, Any]:
    """Teacher-forced greedy accuracy of ``team`` on the expert tokens of ``examples`` (see the module doc)."""
    import torch

    from joy_agents.sft_data import end_of_turn, styled, tokenize_example

    tokenizer = team.tokenizer
    hits = total = entity_hits = entity_total = 0
    for ex in styled(examples, team.config.prompt_style):  # the prompts the team sees at rollout time
        row = tokenize_example(tokenizer, ex, max_length)
        text = ex.completion + end_of_turn(tokenizer)
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        n = len(encoded["input_ids"])
        if row["input_ids"][-n:] != encoded["input_ids"] or len(row["input_ids"]) <= n:
            continue  # a completion longer than max_length: not scored
        spans = copied_spans(ex)
        in_entity = [any(a < end and start < b for a, b in spans) for start, end in encoded["offset_mapping"]]
        ids = torch.tensor([row["input_ids"]])
        with team.use_role(ex.role), torch.no_grad():
            logits = team.model_for(ex.role)(input_ids=ids).logits[0]
        first = len(row["input_ids"]) - n
        predicted = logits[first - 1 : -1].argmax(-1).tolist()
        for guess, target, entity in zip(predicted, encoded["input_ids"], in_entity, strict=True):
            hits += guess == target
            total += 1
            if entity:
                entity_hits += guess == target
                entity_total += 1
    return {
        "token_accuracy": hits / total if total else None,
        "entity_token_accuracy": entity_hits / entity_total if entity_total else None,
        "tokens": total,
        "entity_tokens": entity_total,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run directories of `joy-train --trainer sft` (each holds team/)")
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--out", help="write the JSON here")
    args = parser.parse_args(argv)
    if args.tasks < 1:
        parser.error(f"--tasks must be >= 1, got {args.tasks}")

    import joy_env
    from joy_agents.policy import TeamPolicy
    from joy_agents.sft_data import expert_examples, split_train_tasks

    start = time.perf_counter()
    train = joy_env.make("joy/mixed-v0", split="train", seed=0)
    _, rl_part = split_train_tasks(train.num_tasks)
    data = {
        "train_rl_part": expert_examples(train, rl_part[: args.tasks]),
        "test": expert_examples(joy_env.make("joy/mixed-v0", split="test", seed=0), range(args.tasks)),
    }
    teams = {}
    for run in args.runs:
        if not (Path(run) / "team" / "team.json").is_file():
            parser.error(f"{run!r} holds no team/team.json; pass run directories of `joy-train --trainer sft`")
        team = TeamPolicy.load(str(Path(run) / "team"))
        teams[run] = {split: probe(team, examples, args.max_length) for split, examples in data.items()}
        for split, figures in teams[run].items():
            print(
                f"{run} {split}: token accuracy {figures['token_accuracy']:.3f}, "
                f"entity token accuracy {figures['entity_token_accuracy']:.3f} ({figures['entity_tokens']} tokens)"
            )
    result = {
        "benchmark": "copy_probe",
        "date": time.strftime("%Y-%m-%d"),
        "machine": torch_machine(),
        "settings": {"tasks": args.tasks, "max_length": args.max_length, "env_id": "joy/mixed-v0"},
        "teams": teams,
        "wall_s": time.perf_counter() - start,
    }
    write_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
