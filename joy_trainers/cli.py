"""Command line: ``joy-train`` and ``joy-eval``.

    joy-train --trainer sft --preset tiny                  # build the tiny model, train, evaluate
    joy-train --trainer sft --config examples/configs/sft_qwen2.5-3b.yaml --output-dir runs/qwen
    joy-train --trainer sft --preset tiny --set eval_tasks=50 --set seed=1
    joy-train --trainer joyagents_grpo --list-options     # every option with its default and documentation
    joy-train --trainer grpo --preset tiny --output-dir runs/g --resume      # continue a run after a crash
    joy-eval runs/sft-20261202-101500 --split test --tasks 200
    joy-eval runs/sft-20261202-101500 --engine generate        # evaluate with another generation engine
    joy-eval runs/sft-20261202-101500 --trials 4 --temperature 1.0   # each task 4 times: pass^1 .. pass^4
    joy-train --trainer sft --preset tiny --set env_id=joy/tau2-v0 --set env_kwargs='{"domain": "airline"}'
    joy-eval runs/sft-20261202-101500 --env joy/tau2-v0 --env-kwargs '{"domain": "telecom"}' --split test

A run directory (default ``runs/<trainer>-<timestamp>``) belongs to one run: a new run into a directory that
holds something stops, unless ``--resume`` continues the run there or ``--overwrite`` replaces it. A mistake
in the arguments (an unknown option or value, a missing file, an unwritable directory) is one line on
stderr naming the option, the value and the fix, with exit status 2, before any long work starts.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib
import json
import math
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from joy_agents.memory import MemoryBank
from joy_agents.policy import TeamPolicy
from joy_agents.sampling.base import check_engine
from joy_agents.sampling.settings import ENGINES, TEMPERATURE_LIMIT, GenerationSettings, VLLMEngineError
from joy_trainers import available_trainers
from joy_trainers.base import BaseTrainer
from joy_trainers.checks import (
    check_env_options,
    check_team_dir,
    check_team_models,
    check_team_roles,
    check_team_weights,
    read_results,
    team_roles,
)
from joy_trainers.errors import Terminated, UsageError, shown
from joy_trainers.evaluation import evaluate_team
from joy_trainers.generation import saved_settings
from joy_trainers.joyagents_grpo import memory_config_of
from joy_trainers.options import OPTION_DEPTH_MAX, OPTIONS_MAX_BYTES, options_problem, options_text, rename_old_options
from joy_trainers.ranges import COUNT_MAX, SEED_MAX
from joy_trainers.resume_config import CONFIG_MAX_BYTES
from joy_trainers.rundir import disk_full, free_space, read_json, record_written, write_json_atomic


def data_seed_of(config: dict[str, Any]) -> int:
    """The env data seed a run trained on: an RL run's ``data_seed`` (its ``seed`` only orders and samples),
    an sft run's ``seed``."""
    return int(config.get("data_seed", config.get("seed", 0)))


def load_trainer(name: str) -> type:
    """The trainer class registered under ``name`` (built in, or a plugin's entry point)."""
    trainers = available_trainers()
    if name not in trainers:
        raise UsageError(f"unknown trainer {name!r}; installed trainers: {', '.join(sorted(trainers))}")
    module, _, attr = trainers[name].partition(":")
    cls = getattr(importlib.import_module(module), attr)
    if not (isinstance(cls, type) and issubclass(cls, BaseTrainer)):
        raise UsageError(
            f"trainer {name!r} ({trainers[name]}) is not a joy_trainers.base.BaseTrainer subclass; subclass it "
            "(or joy_trainers.rl.RLTrainer) and write its run_training (or step)"
        )
    return cls


def _parse_value(key: str, text: str) -> Any:
    """The value of ``--set key=text``: JSON when it parses, else the text; bounded before it is parsed (at most
    :data:`~joy_trainers.options.OPTIONS_MAX_BYTES` characters) and after
    (:func:`~joy_trainers.options.options_problem`), each failure one line quoting the start of the value."""
    if len(text) > OPTIONS_MAX_BYTES:
        raise UsageError(
            f"--set {key}= is {len(text)} characters long, above the {OPTIONS_MAX_BYTES} an option may take; pass a "
            "shorter value"
        )
    try:
        value = json.loads(text)
    except RecursionError:
        raise UsageError(
            f"--set {key}={shown(text, 40)} nests lists and objects deeper than the {OPTION_DEPTH_MAX} levels an "
            "option may; pass a flatter value"
        ) from None
    except ValueError as exc:
        if "integer string conversion" in str(exc):  # json reads no integer of more than 4,300 digits
            raise UsageError(
                f"--set {key}={shown(text, 40)} holds an integer of more than {sys.get_int_max_str_digits()} digits, "
                "beyond any option's range; pass a number in range (joy-train --trainer NAME --list-options)"
            ) from None
        return text
    problem = options_problem({key: value})
    if problem:
        raise UsageError(f"--set {key}: {problem}")
    return value


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` items as a dict; a value is JSON when it parses (numbers, true, null, lists, quoted
    strings), else the text. A value longer or deeper than an option may be is a UsageError."""
    values: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set expects KEY=VALUE, got {shown(item)}; e.g. --set seed=1")
        name = key.strip()
        values[name] = _parse_value(name if len(name) <= 60 else name[:60] + "...", raw)
    return values


CONFIG_FILE_MAX_BYTES = CONFIG_MAX_BYTES
"""The largest ``--config`` file read (its options must fit :data:`~joy_trainers.options.OPTIONS_MAX_BYTES` too)."""


def read_config_file(path: str) -> dict[str, Any]:
    """The options in the YAML file ``path`` (a mapping of option: value)."""
    file = Path(path)
    if not file.exists():
        raise UsageError(f"--config {path}: no such file; pass the path of a YAML file of option: value lines")
    if not file.is_file():
        raise UsageError(f"--config {path} is a directory, not a YAML file; pass the file's path")
    size = file.stat().st_size
    if size > CONFIG_FILE_MAX_BYTES:
        raise UsageError(
            f"--config {path} is {size} bytes, above the {CONFIG_FILE_MAX_BYTES} a config file may take; pass a file "
            "of option: value lines"
        )
    try:
        loaded = yaml.safe_load(file.read_text()) or {}
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--config {path} cannot be read ({exc}); pass a readable YAML file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise UsageError(f"--config {path} is not valid YAML ({problem}{where}); fix the file") from None
    except RecursionError:
        raise UsageError(
            f"--config {path} nests deeper than YAML can be read, above the {OPTION_DEPTH_MAX} levels an option may; "
            "fix the file"
        ) from None
    except (ValueError, OverflowError) as exc:  # a value YAML's constructors refuse, e.g. an int of 5,000 digits
        what = (
            f"an integer of more than {sys.get_int_max_str_digits()} digits, beyond any option's range"
            if "integer string conversion" in str(exc)
            else f"a value that cannot be read ({' '.join(str(exc).split())[:120]})"
        )
        raise UsageError(f"--config {path} holds {what}; fix the file") from None
    if not isinstance(loaded, dict):
        raise UsageError(f"--config {path}: expected a mapping of option: value, got a {type(loaded).__name__}")
    problem = options_problem({str(k): v for k, v in loaded.items()})
    if problem:
        raise UsageError(f"--config {path}: {problem}")
    return loaded


def build_config(trainer: type, preset: str | None, config_file: str | None, overrides: list[str]) -> Any:
    """Preset values, then the YAML file, then ``--set key=value`` overrides."""
    values: dict[str, Any] = {}
    if preset:
        presets = getattr(trainer, "presets", {})
        if preset not in presets:
            raise UsageError(f"unknown preset {preset!r} for {trainer.name}; presets: {', '.join(presets) or 'none'}")
        values.update(presets[preset])
    cls = trainer.config_class
    if config_file:  # each source's old option names renamed before it overrides the one before
        values.update(rename_old_options(cls, read_config_file(config_file)))
    values.update(rename_old_options(cls, parse_overrides(overrides)))
    try:
        return trainer.config_class.from_dict(values)
    except UsageError:
        raise
    except (TypeError, ValueError) as exc:
        raise UsageError(f"invalid configuration: {' '.join(str(exc).split())}") from None


def _integer(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer in ``[low, high]`` (argparse names it in its one-line error)."""

    def parse(text: str) -> int:
        if len(text) > len(str(high)) + 8:  # a number of thousands of digits: named by its length, not quoted
            raise argparse.ArgumentTypeError(f"a value of {len(text)} characters, not an integer in [{low}, {high}]")
        value = int(text)
        if not low <= value <= high:
            raise ValueError(text)
        return value

    parse.__name__ = f"integer in [{low}, {high}]"
    return parse


TRIALS_MAX = 100
"""The most plays of each task ``joy-eval --trials`` runs (tau2-bench reports pass^k up to k = 4)."""
ENV_KWARGS_MAX = 65536
"""The longest ``joy-eval --env-kwargs`` text, in characters."""


def _temperature(text: str) -> float:
    if len(text) > 40:
        raise argparse.ArgumentTypeError(f"a value of {len(text)} characters, not a {_temperature.__name__}")
    value = float(text)
    if not math.isfinite(value) or not 0 <= value <= TEMPERATURE_LIMIT:
        raise ValueError(text)
    return value


_temperature.__name__ = f"number in [0, {TEMPERATURE_LIMIT:g}] (0: greedy)"


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``PROG: error: ...``, exit status 2) like the rest of the CLI; under a
    launcher, printed by the first process only (every process reads the same command line)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        _fail(self.prog, f"{one_line(message)}; see {self.prog} --help", quiet=launched_rank() > 0)


class _CommandLineError(UsageError):
    """A mistake in the command line (an option, a value, a config file): the same on every process, so under
    a launcher the first process alone prints it."""


def launched_rank() -> int:
    """This process's rank under ``accelerate launch`` or ``torchrun`` (their ``RANK``, with a ``WORLD_SIZE`` above
    1), before any process group is joined; 0 for a process started alone."""
    try:
        return int(os.environ.get("RANK", "0")) if int(os.environ.get("WORLD_SIZE", "1")) > 1 else 0
    except ValueError:
        return 0


MESSAGE_MAX_CHARS = 1000
"""The longest error line printed: a longer message keeps its start and its end (the fix)."""


def one_line(message: str) -> str:
    """``message`` as one line of at most :data:`MESSAGE_MAX_CHARS` characters: whitespace collapsed, any word
    over 400 characters (a value quoted whole, not a path) cut to its first 300, and the middle of a longer line
    left out."""
    words = [w if len(w) <= 400 else w[:300] + "..." for w in message.split()]
    text = " ".join(words)
    if len(text) <= MESSAGE_MAX_CHARS:
        return text
    return text[: MESSAGE_MAX_CHARS - 300] + " ... " + text[-295:]


def _fail(prog: str, message: str, code: int = 2, quiet: bool = False) -> None:
    """Print ``PROG: error: message`` as one line (unless ``quiet``: another process prints it) and exit."""
    if not quiet:
        print(f"{prog}: error: {one_line(message)}", file=sys.stderr)
    raise SystemExit(code)


def _hub_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) is a Hugging Face Hub download that failed: no
    network, no such model, offline mode, a gated model."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        module = type(current).__module__ or ""
        if module.startswith(("huggingface_hub", "httpx", "requests", "urllib3")) or "huggingface.co" in str(current):
            return True
        current = current.__cause__ or current.__context__
    return False


def _run(prog: str, main: Callable[[], None]) -> None:
    previous = _stop_on_sigterm()
    try:
        main()
    except UsageError as exc:
        _fail(prog, str(exc), quiet=isinstance(exc, _CommandLineError) and launched_rank() > 0)
    except VLLMEngineError as exc:  # vLLM did not start or died: its cause in one line (its own log above)
        _fail(prog, str(exc), code=1)
    except OSError as exc:  # a write or read the run's own checks could not name (a full disk in a library's writer)
        reason = " ".join(str(exc.strerror or exc).split())
        if not disk_full(exc) and _hub_error(exc):  # a model loaded by name: not in the local cache, nor reachable
            _fail(
                prog,
                f"a model is neither in the local Hugging Face cache nor reachable ({reason[:300]}); "
                "download it on a machine with a network (hf download NAME) into this machine's cache, or "
                "pass the path of a local model directory",
                code=1,
            )
        where = f" at {exc.filename}" if exc.filename else ""
        if disk_full(exc):
            free = f" ({free_space(Path(exc.filename))} there)" if exc.filename else ""
            _fail(prog, f"{reason}{where}{free}; free space and run again", code=1)
        _fail(prog, f"{reason}{where}; fix it and run again", code=1)
    except Exception as exc:
        if not disk_full(exc):  # a library's writer that says so in its own words (safetensors, torch.save)
            raise
        said = " ".join(str(exc).split())[:200]
        _fail(
            prog,
            f"no space left on device ({said}); free space and run again, with --resume to continue a run from its "
            "last checkpoint",
            code=1,
        )
    except Terminated as exc:  # SIGTERM, as Ctrl-C: one line, the shell's status for SIGTERM
        print(f"{prog}: terminated{f': {exc}' if str(exc) else ''}", file=sys.stderr)
        raise SystemExit(143) from None
    except KeyboardInterrupt as exc:  # Ctrl-C: one line, the shell's status for SIGINT
        print(f"{prog}: interrupted{f': {exc}' if str(exc) else ''}", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _stop_on_sigterm() -> Any:
    """Make SIGTERM (a scheduler's or container's stop) raise :class:`~joy_trainers.errors.Terminated` as Ctrl-C
    raises ``KeyboardInterrupt`` (the RL loop stops after its step with a checkpoint on either); returns the
    handler it replaced (None outside the main thread, where no handler can be set)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum: int, frame: Any) -> None:
        raise Terminated("stopped by SIGTERM")

    return signal.signal(signal.SIGTERM, handler)


def train_main(argv: list[str] | None = None) -> None:
    parser = _Parser(prog="joy-train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trainer", required=True, help="a trainer name, e.g. sft, grpo, joyagents_grpo")
    parser.add_argument(
        "--list-options", action="store_true", help="print every option of the trainer with its default and exit"
    )
    parser.add_argument("--preset", help="named configuration, e.g. tiny")
    parser.add_argument("--config", help="YAML file of configuration values")
    parser.add_argument("--output-dir", help="run directory (default runs/<trainer>-<timestamp>)")
    parser.add_argument("--seed", type=_integer(0, SEED_MAX), help="seed (overrides the preset / config)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override one option")
    parser.add_argument("--resume", action="store_true", help="continue the run in --output-dir from its checkpoint")
    parser.add_argument("--overwrite", action="store_true", help="replace the run already in --output-dir")
    args = parser.parse_args(argv)
    _run("joy-train", lambda: _train(args))


def _train(args: argparse.Namespace) -> None:
    try:
        trainer_cls, config = _command_line_config(args)
    except UsageError as exc:  # the same on every process
        raise _CommandLineError(str(exc)) from None
    if config is None:  # --list-options
        return
    trainer = trainer_cls(config)
    results = trainer.train()
    if not results:  # not the main process
        return
    run_dir = trainer.run.path
    print(
        json.dumps({k: results[k] for k in ("trainer", "env_id", "split", "wall_s", "metrics")}, indent=2, default=str)
    )
    print(f"run directory: {run_dir}")


def _command_line_config(args: argparse.Namespace) -> tuple[type, Any]:
    """The trainer class and the config the command line asks for (None after printing ``--list-options``)."""
    trainer_cls = load_trainer(args.trainer)
    if args.list_options:
        print(f"options of {args.trainer} ({trainer_cls.config_class.__name__}); set them with --set NAME=VALUE,")
        print(f"a YAML --config file or a --preset ({', '.join(getattr(trainer_cls, 'presets', {})) or 'none'}):\n")
        print(options_text(trainer_cls.config_class), end="")
        return trainer_cls, None
    fields = {f.name for f in dataclasses.fields(trainer_cls.config_class)}
    overrides = list(args.set)
    if args.resume:
        if "resume" not in fields:
            raise UsageError(f"trainer {args.trainer!r} does not checkpoint; --resume is not available for it")
        if not args.output_dir:
            raise UsageError("--resume needs --output-dir: the run directory to continue")
        overrides.append("resume=true")
    if args.overwrite:
        if "overwrite" not in fields:
            raise UsageError(f"trainer {args.trainer!r} has no overwrite option; pass another --output-dir")
        overrides.append("overwrite=true")
    if args.output_dir:
        overrides.append(f"output_dir={json.dumps(args.output_dir)}")
    if args.seed is not None:
        overrides.append(f"seed={args.seed}")
    return trainer_cls, build_config(trainer_cls, args.preset, args.config, overrides)


MEMORY_MAX_BYTES = 256 * 2**20
"""The largest memory bank ``joy-eval`` reads back."""
MEMORY_FILES_MAX = 256
"""The most memory banks ``joy-eval`` reads back (one per role)."""


def eval_main(argv: list[str] | None = None) -> None:
    parser = _Parser(prog="joy-eval", description="Evaluate a saved team on a split.")
    parser.add_argument("run_dir", help="a run directory written by joy-train (holds team/ and results.json)")
    parser.add_argument(
        "--split",
        default="test",
        choices=("train", "validation", "test", "all", "small", "full"),
        help="split evaluated (all: every task, where the env's source has it, e.g. tau2; small and full: tau2's "
        "telecom task sets)",
    )
    parser.add_argument(
        "--tasks", type=_integer(1, COUNT_MAX), default=None, help="number of tasks (default: as in the run)"
    )
    parser.add_argument("--env", default=None, type=_env_id, help="env id (default: the run's)")
    parser.add_argument(
        "--engine",
        default=None,
        choices=ENGINES,
        help="generation engine (default: the run's)",
    )
    parser.add_argument(
        "--draft-tokens",
        type=_integer(0, 1024),
        default=None,
        help="tokens the continuous engine drafts per row and step, 0: none (default: the run's)",
    )
    parser.add_argument(
        "--draft-max-rows",
        type=_integer(1, COUNT_MAX),
        default=None,
        help="drafts only while at most this many rows decode (default: the run's)",
    )
    parser.add_argument(
        "--env-kwargs",
        default=None,
        metavar="JSON",
        help='task-source options of the env as a JSON object, e.g. \'{"domain": "airline"}\' (default: the run\'s '
        "env_kwargs when the env is the run's, else none)",
    )
    parser.add_argument(
        "--trials",
        type=_integer(1, TRIALS_MAX),
        default=1,
        help="plays of each task; above 1 the metrics add tau2-bench's pass^1 .. pass^N (default 1)",
    )
    parser.add_argument(
        "--temperature",
        type=_temperature,
        default=None,
        help="sampling temperature of every turn, 0: greedy (default: the run's, greedy; trials of greedy play are "
        "identical)",
    )
    args = parser.parse_args(argv)
    # a run directory names models that are inside it or already on this machine: nothing is downloaded (unless the
    # user says so with HF_HUB_OFFLINE=0)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    _run("joy-eval", lambda: _evaluate(args))


def _env_id(text: str) -> str:
    if len(text) > 200:
        raise argparse.ArgumentTypeError(f"an env id of {len(text)} characters, above 200; pass a registered env id")
    return text


def _json_object(text: str, option: str) -> dict[str, Any]:
    """``text`` as a JSON object (``{"source": "tau2"}``) of at most :data:`ENV_KWARGS_MAX` characters, or a
    UsageError naming ``option``."""
    if len(text) > ENV_KWARGS_MAX:
        raise UsageError(f"{option} is {len(text)} characters long, above {ENV_KWARGS_MAX}; pass a short JSON object")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        example = '{"source": "tau2"}'
        why = "nested too deep" if isinstance(exc, RecursionError) else " ".join(str(exc).split())[:120]
        raise UsageError(f"{option} {shown(text)} is not valid JSON ({why}); e.g. {option} '{example}'") from None
    if not isinstance(value, dict):
        raise UsageError(f"{option} must be a JSON object of option: value, got {shown(text)}")
    problem = options_problem({option: value})
    if problem:
        raise UsageError(problem)
    return value


def _evaluate(args: argparse.Namespace) -> None:
    run = Path(args.run_dir)
    if run.exists() and not run.is_dir():
        raise UsageError(f"{run} is a file, not a run directory; pass a run directory written by joy-train")
    if not run.is_dir():
        raise UsageError(f"run directory {run} does not exist; pass a run directory written by joy-train")
    check_team_dir(run / "team", "run directory")
    check_team_models(run / "team", run, f"run directory {run}")  # inside the run or cached: no download
    check_team_weights(run / "team", f"run directory {run}")  # before anything is built or loaded
    saved = read_results(run)
    if not saved:
        raise UsageError(
            f"{run} has no results.json yet: the run is still running or stopped before its end; wait for it, or "
            "continue it with joy-train --resume"
        )
    cfg = saved.get("config")
    if not isinstance(cfg, dict):
        raise UsageError(f"{run}/results.json holds no config: it was not written by joy-train")
    _check_saved_values(run, saved, cfg)
    run_env = saved.get("env_id", "joy/mixed-v0")
    env_id = args.env or run_env
    if args.env_kwargs is not None:
        env_kwargs = _json_object(args.env_kwargs, "--env-kwargs")
    else:
        env_kwargs = (cfg.get("env_kwargs") or {}) if env_id == run_env else {}
    envs = check_env_options(
        env_id, env_kwargs, data_seed_of(cfg), {"--split": args.split}, option="--env-kwargs", env_option="--env"
    )
    check_team_roles(team_roles(run / "team"), envs[args.split], env_id, env_kwargs, f"run directory {run}")
    tasks = args.tasks or cfg.get("eval_tasks") or 200
    generation = eval_settings(run, saved, args)
    settings = None
    if (run / "memory").is_dir():
        try:
            settings = memory_config_of(cfg)  # retrieval as the run's own evaluations read the banks
        except (TypeError, ValueError) as exc:
            raise UsageError(f"{run}/results.json: memory settings: {exc}") from None
    memory = None
    if settings is not None:
        memory = {}
        for p in sorted((run / "memory").glob("*.json"))[:MEMORY_FILES_MAX]:
            try:  # a damaged or tampered bank, an embedder that cannot be built: one line naming the file
                memory[p.stem] = MemoryBank.from_dict(read_json(p, MEMORY_MAX_BYTES), settings)
            except (OSError, KeyError, TypeError, ValueError) as exc:
                raise UsageError(f"{p}: {' '.join(str(exc).split())[:300]}; restore it or remove {p}") from None
    try:
        team = TeamPolicy.load(str(run / "team"))
    except (OSError, TypeError, ValueError) as exc:  # a base model gone, a tampered or foreign weights file
        raise UsageError(" ".join(str(exc).split())) from None
    metrics = evaluate_team(
        team,
        env_id,
        args.split,
        tasks,
        settings=generation,
        seed=data_seed_of(cfg),
        memory=memory,
        env_kwargs=env_kwargs,
        trials=args.trials,
    )
    out = run / eval_file_name(env_id, env_kwargs, args.split, (run_env, cfg.get("env_kwargs") or {}))
    record: dict[str, Any] = {"env_id": env_id, "env_kwargs": env_kwargs, "split": args.split}
    if args.trials > 1 or generation.temperature > 0:  # a greedy single play keeps the record it always had
        record.update(trials=args.trials, temperature=generation.temperature)
    record["metrics"] = metrics
    write_json_atomic(out, record, "the evaluation")
    record_written(run, [out])  # what --overwrite may remove
    print(json.dumps(metrics, indent=2))
    if "pass_k" in metrics:
        played = metrics["episodes"] // args.trials
        ks = ", ".join(f"pass^{k} {v:.3f}" for k, v in metrics["pass_k"].items())
        print(f"{ks} ({played} tasks x {args.trials} trials at temperature {generation.temperature:g})")
    print(f"wrote {out}")


def _check_saved_values(run: Path, saved: dict[str, Any], cfg: dict[str, Any]) -> None:
    """The values of a run's ``results.json`` that ``joy-eval`` reads besides its generation settings: the env id
    and options, the evaluated tasks and the data seed, each of its type and in range (one line otherwise)."""

    def count(value: Any, high: int) -> bool:
        return value is None or (isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= high)

    problems = [
        ("env_id", saved.get("env_id"), isinstance(saved.get("env_id", ""), str)),
        ("config.env_kwargs", cfg.get("env_kwargs"), isinstance(cfg.get("env_kwargs") or {}, dict)),
        ("config.eval_tasks", cfg.get("eval_tasks"), count(cfg.get("eval_tasks"), COUNT_MAX)),
        ("config.seed", cfg.get("seed"), count(cfg.get("seed"), SEED_MAX)),
        ("config.data_seed", cfg.get("data_seed"), count(cfg.get("data_seed"), SEED_MAX)),
    ]
    for name, value, fine in problems:
        if not fine:
            raise UsageError(
                f"{run}/results.json: {name} is {value!r:.60}, not what joy-train writes (damaged or tampered with); "
                "pass the directory of a finished joy-train run"
            )


def eval_settings(run: Path, saved: dict[str, Any], args: argparse.Namespace) -> GenerationSettings:
    """The generation settings of ``joy-eval``: those the run saved (:func:`~joy_trainers.generation.saved_settings`,
    the view the team was trained and evaluated on), with the command line's ``--engine``, ``--draft-tokens``,
    ``--draft-max-rows`` and ``--temperature`` over them; a UsageError naming the problem otherwise."""
    try:
        settings = saved_settings(saved)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{run}/results.json: {exc}; pass the directory of a finished joy-train run") from None
    overrides = {
        name: value
        for name, value in (
            ("engine", args.engine),
            ("draft_tokens", args.draft_tokens),
            ("draft_max_rows", args.draft_max_rows),
            ("temperature", args.temperature),
        )
        if value is not None
    }
    try:
        check_engine(overrides.get("engine", settings.engine), installed=True, name="--engine")
        return settings.replace(**overrides)
    except ValueError as exc:
        raise UsageError(f"{run}: {exc}") from None


def eval_file_name(env_id: str, env_kwargs: dict[str, Any], split: str, run_env: tuple[str, dict[str, Any]]) -> str:
    """Where ``joy-eval`` writes an evaluation: ``eval-<split>.json`` on the run's own env and options, else
    ``eval-<env>[-<option>=<value>...]-<split>.json`` (a value that is not a short plain word as a digest), so
    an evaluation on another env or task source never overwrites the run's."""
    if (env_id, env_kwargs) == run_env:
        return f"eval-{split}.json"
    parts = [env_id.rpartition("/")[2]]
    for key in sorted(env_kwargs):
        value = str(env_kwargs[key])
        if not (len(value) <= 24 and value.replace("-", "").replace("_", "").replace(".", "").isalnum()):
            value = hashlib.sha256(json.dumps(env_kwargs[key], sort_keys=True, default=str).encode()).hexdigest()[:8]
        parts.append(f"{key}={value}")
    return f"eval-{'-'.join(parts)}-{split}.json"


if __name__ == "__main__":
    train_main(sys.argv[1:])
