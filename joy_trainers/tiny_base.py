"""The pretrained tiny base (``model="tiny-base"``): the embedded tiny model after a long training on the
environment's own expert conversations, shipped with the package.

The embedded tiny model (:mod:`joy_agents.tiny`) starts from random weights, and a ten-minute SFT run teaches
it the protocol but not to copy the request's names, ids and numbers: it writes the entities it saw most often
in training instead, and solves almost no test task (the test split shares no entities with train). Copying
is learned late, after many more steps than an SFT preset can afford on a CPU. So the base is trained once,
for longer, and shipped as a file (``joy_agents/assets/tiny-base/``, about 5 MB, read by
:func:`joy_agents.tiny.tiny_base_dir`); presets start from it in seconds. Its build:

* **data**: the scripted expert plays ``tasks`` tasks of the SFT part of the train split of ``env_id`` (never
  the RL part, validation or test: :func:`joy_agents.sft_data.split_train_tasks` with ``rl_fraction=0.5``);
  every role's conversation, in ``prompt_style``, becomes rows whose expert turns are supervised
  (:func:`joy_agents.sft_data.conversation_rows`);
* **copy-heavy rows**: in ``entity_swap`` of the episodes every rare entity (a name, a code, a run of digits)
  becomes a fresh random one throughout the episode (:func:`joy_agents.sft_data.swap_entities`), so only
  copying from the request or a tool result predicts it;
* **training**: the whole model, AdamW, linear warm-up then cosine decay to ``min_lr_ratio``, loss on the
  labelled tokens only (:func:`joy_trainers.sft.completion_loss`); a checkpoint every ``checkpoint_every``
  steps, so an interrupted build continues where it stopped.

Build it (the shipped recipe is :class:`TinyBaseConfig`'s defaults; its wall time and figures are on the
results page, ``docs/results.md``)::

    joy-build-tiny-base --out DIR                        # then copy DIR into joy_agents/assets/tiny-base
    joy-build-tiny-base --out DIR --steps 40 --tasks 30  # a short build: minutes, for a check
    joy-build-tiny-base --out DIR --init tiny-base --steps 10000 --entity-swap 1.0 --lr 1e-3 --tasks 4000
                                                         # continue the shipped base (results page)

The build is deterministic in ``seed`` up to floating-point summation order (thread counts change it).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch

import joy_env
from joy_agents.policy import PROMPT_STYLES
from joy_agents.sft_data import by_role, expert_examples, split_train_tasks, styled, swap_entities
from joy_agents.tiny import build_tiny_model, env_fingerprint
from joy_trainers.sft import bucketed_order, collate_left, completion_loss, sft_rows

BUILD_FORMAT = "joy_trainers.tiny_base/1"
"""Written to ``build_info.json``; bumped when the layout of a build changes."""


@dataclass
class TinyBaseConfig:
    """The recipe of the pretrained tiny base (one line per field); the defaults are the shipped build."""

    env_id: str = "joy/mixed-v0"
    """Environment whose expert episodes are the data."""
    tasks: int = 8000
    """Tasks of the SFT part of the train split played by the expert (the first ones)."""
    entity_swap: float = 0.5
    """Share of episodes whose rare entities are replaced by fresh random ones (copy-heavy rows)."""
    prompt_style: str = "compact"
    """Prompt style of the rows (the presets that start from this base use the same)."""
    max_length: int = 512
    """Tokens per row (a longer conversation is split into several rows)."""
    steps: int = 8000
    """Optimiser steps."""
    batch_size: int = 8
    """Rows per step."""
    lr: float = 3e-3
    """Peak learning rate."""
    warmup_ratio: float = 0.02
    """Share of steps with linear warm-up."""
    min_lr_ratio: float = 0.1
    """The cosine decay ends at ``lr * min_lr_ratio``."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient clipping."""
    seed: int = 0
    """Seed of the tiny model's initialisation and tokenizer build, the env data, the swaps and the row order."""
    checkpoint_every: int = 1000
    """Steps between checkpoints of an unfinished build (0: none)."""

    def __post_init__(self) -> None:
        for name in ("tasks", "steps", "batch_size", "max_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if not 0.0 <= self.entity_swap <= 1.0:
            raise ValueError(f"entity_swap must be in [0, 1], got {self.entity_swap!r}")
        if self.prompt_style not in PROMPT_STYLES:
            raise ValueError(f"prompt_style must be one of {PROMPT_STYLES}, got {self.prompt_style!r}")
        if self.lr <= 0 or not 0.0 <= self.warmup_ratio < 1.0 or not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(
                f"need lr > 0, warmup_ratio in [0, 1), min_lr_ratio in [0, 1]; got {self.lr!r}, "
                f"{self.warmup_ratio!r}, {self.min_lr_ratio!r}"
            )
        if self.env_id not in joy_env.list_envs():
            raise ValueError(f"unknown env_id {self.env_id!r}; registered: {', '.join(joy_env.list_envs())}")


def learning_rate(step: int, config: TinyBaseConfig) -> float:
    """The learning rate of optimiser step ``step`` (0-based): linear warm-up, then cosine decay."""
    warm = max(1, int(config.warmup_ratio * config.steps))
    if step < warm:
        return config.lr * (step + 1) / warm
    done = min(1.0, (step - warm) / max(1, config.steps - warm))
    floor = config.min_lr_ratio
    return config.lr * (floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * done)))


def base_rows(tokenizer: Any, config: TinyBaseConfig) -> list[dict[str, list[int]]]:
    """The training rows of the build (see the module documentation), role by role."""
    env = joy_env.make(config.env_id, split="train", seed=config.seed)
    sft_part, _ = split_train_tasks(env.num_tasks, 0.5, config.seed)
    examples = expert_examples(env, sft_part[: config.tasks], 0.0, config.seed)
    env.close()
    if config.entity_swap:
        examples = swap_entities(examples, config.entity_swap, config.seed)
    examples = styled(examples, config.prompt_style)
    rows: list[dict[str, list[int]]] = []
    for role_examples in by_role(examples, joy_env.AGENTS).values():
        rows += sft_rows(tokenizer, role_examples, config.max_length, "conversation")
    return rows


def _resolve_init(init: str | Path, seed: int) -> Path:
    """The model directory of ``init``: a directory, or a model name of the trainers (``tiny-base``)."""
    from joy_trainers.sft import resolve_model

    path = Path(resolve_model(str(init), seed))
    if not (path / "config.json").is_file():
        raise ValueError(
            f"init {str(init)!r} is not a model directory (no config.json in {path}); pass a directory saved by "
            "save_pretrained, or tiny-base"
        )
    return path


def _init_info(model_dir: Path) -> dict[str, Any]:
    """``model_dir``'s ``build_info.json`` (an embedded tiny model's or a tiny base's build), or {}."""
    info = model_dir / "build_info.json"
    return json.loads(info.read_text()) if info.is_file() else {}


def _save_checkpoint(path: Path, model: Any, optimizer: torch.optim.Optimizer, step: int, log: list) -> None:
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp)
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    (tmp / "state.json").write_text(json.dumps({"step": step, "log": log}))
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)


def build_tiny_base(
    out_dir: str | Path, config: TinyBaseConfig | None = None, progress: bool = True, init: str | Path | None = None
) -> Path:
    """Train the tiny base of ``config`` (default: the shipped recipe) into ``out_dir`` and return it.

    ``init``: the model to start from, a directory or ``"tiny-base"`` (default: the untrained embedded tiny
    model of ``config.seed``, :func:`joy_agents.tiny.build_tiny_model`); a build from another records it in
    ``build_info.json`` (``init``, and ``init_config``: that build's recipe).
    ``out_dir`` must not hold a finished build. A build interrupted after a checkpoint continues from it when
    called again with the same ``out_dir`` and config. The directory loads with ``from_pretrained`` and holds
    ``build_info.json`` (the config, the loss curve, the wall time, the env fingerprint of the data).
    """
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = config or TinyBaseConfig()
    out = Path(out_dir).expanduser().absolute()
    if (out / "build_info.json").is_file():
        raise FileExistsError(f"{out} already holds a finished tiny base build; choose another --out")
    work = out.with_name(f".{out.name}.partial")
    start = time.perf_counter()
    torch.manual_seed(config.seed)
    init_given = init
    init = _resolve_init(init, config.seed) if init is not None else build_tiny_model(seed=config.seed)
    tokenizer = AutoTokenizer.from_pretrained(init)
    checkpoint = work / "checkpoint"
    recipe = {**asdict(config), "init": None if init_given is None else str(init_given)}
    resumed = checkpoint.is_dir() and (work / "config.json").is_file()
    if resumed and json.loads((work / "config.json").read_text()) != recipe:
        raise ValueError(f"{work} holds an interrupted build of another recipe; remove it or use another --out")
    model = AutoModelForCausalLM.from_pretrained(checkpoint if resumed else init, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, betas=(0.9, 0.95), weight_decay=config.weight_decay)
    step, log = 0, []
    if resumed:
        optimizer.load_state_dict(torch.load(checkpoint / "optimizer.pt", weights_only=True))
        saved = json.loads((checkpoint / "state.json").read_text())
        step, log = int(saved["step"]), list(saved["log"])
    work.mkdir(parents=True, exist_ok=True)
    (work / "config.json").write_text(json.dumps(recipe))

    rows = base_rows(tokenizer, config)
    order = bucketed_order(
        [len(r["input_ids"]) for r in rows],
        config.batch_size,
        config.steps * config.batch_size / len(rows) + 1,
        config.seed,
    )
    pad_id = tokenizer.pad_token_id
    model.train()
    bar = tqdm(total=config.steps, initial=step, desc="tiny base", unit="step", disable=not progress)
    smooth = None
    while step < config.steps:
        batch = [rows[i] for i in order[step * config.batch_size : (step + 1) * config.batch_size]]
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, config)
        loss = completion_loss(model, collate_left(batch, pad_id))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        value = float(loss.detach())
        smooth = value if smooth is None else 0.98 * smooth + 0.02 * value
        step += 1
        bar.update(1)
        if step % 100 == 0 or step == config.steps:
            log.append({"step": step, "loss": round(smooth, 4), "lr": learning_rate(step - 1, config)})
            bar.set_postfix(loss=f"{smooth:.3f}")
        if config.checkpoint_every and step % config.checkpoint_every == 0 and step < config.steps:
            _save_checkpoint(checkpoint, model, optimizer, step, log)
    bar.close()

    final = work / "final"
    shutil.rmtree(final, ignore_errors=True)
    model.save_pretrained(final)
    tokenizer.save_pretrained(final)
    init_info = _init_info(init)
    info = {
        "format": BUILD_FORMAT,
        "config": asdict(config),
        "rows": len(rows),
        "row_tokens": sum(len(r["input_ids"]) for r in rows),
        "n_params": sum(p.numel() for p in model.parameters()),
        "env_fingerprint": env_fingerprint(),
        "tiny_build": init_info.get("version"),
        # a build that continues another (``init``): where it started and that build's recipe
        "init": None if init_given is None else str(init_given),
        "init_config": init_info.get("config") if init_given is not None else None,
        "loss_curve": log,
        "build_s": round(time.perf_counter() - start, 1),
        "resumed": resumed,
    }
    (final / "build_info.json").write_text(json.dumps(info, indent=2) + "\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        shutil.rmtree(out)
    final.rename(out)
    shutil.rmtree(work, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> None:
    """``joy-build-tiny-base``: build the pretrained tiny base (see the module documentation)."""
    parser = argparse.ArgumentParser(
        prog="joy-build-tiny-base", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True, help="directory of the build (must not hold a finished one)")
    parser.add_argument(
        "--init",
        help="the model to start from: a model directory, or tiny-base to continue the shipped base "
        "(default: the randomly initialised embedded tiny model of --seed)",
    )
    for f in fields(TinyBaseConfig):
        default = f.default
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(default), default=default)
    args = parser.parse_args(argv)
    values = {f.name: getattr(args, f.name) for f in fields(TinyBaseConfig)}
    try:
        config = TinyBaseConfig(**values)
    except ValueError as e:
        parser.error(str(e))
    if args.init is not None:
        try:
            _resolve_init(args.init, config.seed)
        except ValueError as e:
            parser.error(str(e))
    out = build_tiny_base(args.out, config, init=args.init)
    info = json.loads((out / "build_info.json").read_text())
    print(f"tiny base: {out} ({info['build_s']:.0f} s, final loss {info['loss_curve'][-1]['loss']})", file=sys.stderr)


if __name__ == "__main__":
    main()
