"""Command line: ``joy-train`` and ``joy-eval``.

    joy-train --trainer sft --preset tiny                  # build the tiny model, train, evaluate
    joy-train --trainer sft --config examples/configs/sft_qwen2.5-3b.yaml --output-dir runs/qwen
    joy-train --trainer sft --preset tiny --set eval_tasks=50 --set seed=1
    joy-eval runs/sft-20261202-101500 --split test --tasks 200
    joy-train --trainer joyagents_grpo --list-options     # every option with its default and documentation

A run directory (default ``runs/<trainer>-<timestamp>``) receives ``results.json``, ``results.md``,
``training.png``, ``logs.json`` and the trained team (``team/``).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from joy_agents.memory import MemoryBank
from joy_agents.policy import TeamPolicy
from joy_trainers import available_trainers
from joy_trainers.evaluation import eval_limits, evaluate_team
from joy_trainers.options import options_text


def load_trainer(name: str) -> type:
    """The trainer class registered under ``name`` (built in, or a plugin's entry point)."""
    trainers = available_trainers()
    if name not in trainers:
        raise SystemExit(f"unknown trainer {name!r}; installed trainers: {', '.join(sorted(trainers))}")
    module, _, attr = trainers[name].partition(":")
    cls = getattr(importlib.import_module(module), attr)
    missing = [a for a in ("config_class", "train") if not hasattr(cls, a)]
    if missing:
        raise SystemExit(f"trainer {name!r} ({trainers[name]}) lacks {missing}; see joy_trainers.Trainer")
    return cls


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` items as a dict; a value is JSON when it parses (numbers, true, null, lists, quoted
    strings), else the text."""
    values: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            raise SystemExit(f"--set expects key=value, got {item!r}")
        values[key.strip()] = _parse_value(raw)
    return values


def build_config(trainer: type, preset: str | None, config_file: str | None, overrides: list[str]) -> Any:
    """Preset values, then the YAML file, then ``--set key=value`` overrides."""
    values: dict[str, Any] = {}
    if preset:
        presets = getattr(trainer, "presets", {})
        if preset not in presets:
            raise SystemExit(f"unknown preset {preset!r} for {trainer.name}; presets: {', '.join(presets) or 'none'}")
        values.update(presets[preset])
    if config_file:
        with open(config_file) as f:
            loaded = yaml.safe_load(f) or {}
        if not isinstance(loaded, dict):
            raise SystemExit(f"{config_file}: expected a mapping of option: value, got {type(loaded).__name__}")
        values.update(loaded)
    values.update(parse_overrides(overrides))
    try:
        return trainer.config_class.from_dict(values)
    except (TypeError, ValueError) as exc:
        raise SystemExit(f"invalid configuration: {exc}") from None


def train_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="joy-train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trainer", required=True, help="a trainer name, e.g. sft, grpo, joyagents_grpo")
    parser.add_argument(
        "--list-options", action="store_true", help="print every option of the trainer with its default and exit"
    )
    parser.add_argument("--preset", help="named configuration, e.g. tiny")
    parser.add_argument("--config", help="YAML file of configuration values")
    parser.add_argument("--output-dir", help="run directory (default runs/<trainer>-<timestamp>)")
    parser.add_argument("--seed", type=int, help="seed (overrides the preset / config)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override one option")
    parser.add_argument("--resume", action="store_true", help="continue from the run directory's latest checkpoint")
    args = parser.parse_args(argv)
    trainer_cls = load_trainer(args.trainer)
    if args.list_options:
        print(f"options of {args.trainer} ({trainer_cls.config_class.__name__}); set them with --set NAME=VALUE,")
        print(f"a YAML --config file or a --preset ({', '.join(getattr(trainer_cls, 'presets', {})) or 'none'}):\n")
        print(options_text(trainer_cls.config_class), end="")
        return
    overrides = list(args.set)
    if args.resume:
        if "resume" not in {f.name for f in dataclasses.fields(trainer_cls.config_class)}:
            raise SystemExit(f"trainer {args.trainer!r} does not checkpoint; --resume is not available for it")
        if not args.output_dir:
            raise SystemExit("--resume needs --output-dir: the run directory to continue")
        overrides.append("resume=true")
    if args.output_dir:
        overrides.append(f"output_dir={json.dumps(args.output_dir)}")
    if args.seed is not None:
        overrides.append(f"seed={args.seed}")
    config = build_config(trainer_cls, args.preset, args.config, overrides)
    trainer = trainer_cls(config)
    results = trainer.train()
    run_dir = getattr(trainer, "run_dir", None) or getattr(getattr(trainer, "run", None), "path", None)
    if not results:  # not the main process
        return
    print(
        json.dumps({k: results[k] for k in ("trainer", "env_id", "split", "wall_s", "metrics")}, indent=2, default=str)
    )
    if run_dir:
        print(f"run directory: {run_dir}")


def eval_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="joy-eval", description="Evaluate a saved team on a split.")
    parser.add_argument("run_dir", help="a run directory written by joy-train (holds team/ and results.json)")
    parser.add_argument("--split", default="test", choices=("train", "validation", "test"))
    parser.add_argument("--tasks", type=int, default=None, help="number of tasks (default: as in the run)")
    parser.add_argument("--env", default=None, help="env id (default: the run's)")
    args = parser.parse_args(argv)
    run = Path(args.run_dir)
    if not (run / "team").is_dir():
        raise SystemExit(f"{run} has no team/ directory; pass a run directory written by joy-train")
    saved = json.loads((run / "results.json").read_text()) if (run / "results.json").exists() else {}
    cfg = saved.get("config", {})
    env_id = args.env or saved.get("env_id", "joy/mixed-v0")
    tasks = args.tasks or cfg.get("eval_tasks") or 200
    limits = eval_limits(cfg)  # the view the team was trained and evaluated on
    team = TeamPolicy.load(str(run / "team"))
    memory = None
    if (run / "memory").is_dir():
        memory = {p.stem: MemoryBank.from_dict(json.loads(p.read_text())) for p in (run / "memory").glob("*.json")}
    metrics = evaluate_team(
        team,
        env_id,
        args.split,
        tasks,
        cfg.get("seed", 0),
        limits.max_new_tokens,
        limits.max_cycles,
        limits.max_prompt_tokens,
        memory=memory,
    )
    out = run / f"eval-{args.split}.json"
    out.write_text(json.dumps({"env_id": env_id, "split": args.split, "metrics": metrics}, indent=2))
    print(json.dumps(metrics, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    train_main(sys.argv[1:])
