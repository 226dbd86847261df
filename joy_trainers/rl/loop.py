"""The RL training loop every trainer shares, in the order :class:`~joy_trainers.rl.RLTrainer` runs it within
:meth:`~joy_trainers.base.BaseTrainer.train`:

1. before the run directory is claimed, :func:`check_inputs` (the env, the SFT run to start from); once it is,
   :func:`start_config` (``--resume``'s checks of changed options, ``config.json``);
2. :func:`prepare`: Accelerate, the starting team (:func:`~joy_trainers.rl.sft_team`), one optimiser per role,
   memory banks, the rollout engine over the RL part of the train split, the metrics log;
3. :func:`resume_or_evaluate`: with ``resume``, load the newest usable checkpoint (walking back past damaged
   ones); otherwise evaluate the starting team (``baseline_metrics``);
4. :func:`run_steps`: ``step_fn(state, step)`` for every remaining step, a metrics row after each, a
   checkpoint every ``checkpoint_every`` steps and at the end of every RL iteration;
5. :func:`finish`: the trained team and what ``results.json`` says of the run; ``BaseTrainer`` then saves the
   team, evaluates it and writes ``results.json``, and :func:`write_outputs` the memory banks and
   ``reward_curve.png``.

A trainer only writes its step."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

import joy_env
from joy_agents.memory import MemoryBank, MemoryConfig
from joy_agents.policy import TeamPolicy
from joy_agents.rollout import RolloutConfig, RolloutEngine
from joy_agents.sampling.base import serves_from_own_engine, start_engine
from joy_agents.sft_data import split_train_tasks
from joy_trainers.base import Trained
from joy_trainers.checks import (
    check_env_options,
    check_rl_sizes,
    check_sft_run,
    check_team_models,
    check_team_roles,
    check_team_weights,
    check_vllm_team,
    sft_env_mismatch,
    team_model,
    team_roles,
)
from joy_trainers.distributed import all_gather_objects, barrier, say, world
from joy_trainers.errors import Terminated, UsageError
from joy_trainers.evaluation import evaluate_config
from joy_trainers.resume_config import check_resume_config, write_config
from joy_trainers.rl.checkpoints import (
    CheckpointData,
    CheckpointError,
    apply_checkpoint,
    checkpoint,
    checkpoint_steps,
    read_checkpoint,
    restore_rng,
    rng_state,
    set_rng_state,
)
from joy_trainers.rl.config import RLConfig
from joy_trainers.rl.metrics import MetricsLog, StepOutput, plot_rewards
from joy_trainers.rl.start import (
    START_TEAM,
    auto_sft_overrides,
    bring_team,
    check_auto_sft,
    sft_team,
    tiny_sft_values,
)
from joy_trainers.rl.state import RunState
from joy_trainers.rl.step import metrics_row
from joy_trainers.rl.update import ReferencePolicy, make_optimizers
from joy_trainers.rundir import RunDir, write_json_atomic, write_text_atomic, writing


def carried_team(run: RunDir, cfg: RLConfig) -> bool:
    """Whether the run continues (``resume``) from a checkpoint and so holds its starting team already; a resumed
    run that ran no step yet starts as a new run would."""
    return cfg.resume and (run.path / START_TEAM / "team.json").is_file() and bool(checkpoint_steps(run.checkpoints))


def check_inputs(run: RunDir, cfg: RLConfig) -> None:
    """The checks before the run directory is claimed: the env's options and splits, the sizes against the model
    (:func:`~joy_trainers.checks.check_rl_sizes`), and (unless the run continues with its own starting team) the
    SFT run to start from, whose team must have the env's roles and intact weights, or the automatic SFT run's
    options; a continued run's own starting team must have intact weights."""
    splits = {"the train split": "train", **({"eval_split": cfg.eval_split} if cfg.eval_tasks else {})}
    envs = check_env_options(cfg.env_id, cfg.env_kwargs, cfg.data_seed, splits, names_checked=True)
    start_team = run.path / START_TEAM
    carried = carried_team(run, cfg)
    if carried:  # its starting team and base, before anything is loaded (never a download)
        check_team_models(start_team, run.path, f"--resume: {run.path}")
        check_team_weights(start_team, f"--resume: {run.path}")
    start_model = (
        team_model(start_team if carried else Path(cfg.sft_run) / "team") if carried or cfg.sft_run else cfg.model
    )
    check_rl_sizes(cfg, start_model)  # every turn within the model's context, a micro-batch within memory
    if serves_from_own_engine(cfg.rollout_engine):  # a team vLLM cannot serve: one line now, not after the SFT run
        team_dir = start_team if carried else (Path(cfg.sft_run) / "team" if cfg.sft_run else None)
        auto_r = None if team_dir else tiny_sft_values(cfg.model, cfg.data_seed, auto_sft_overrides(cfg))["lora_r"]
        check_vllm_team(team_dir, start_model, auto_r, "rollout_engine")
    if not carried:
        check_sft_run(cfg.sft_run, cfg.model, cfg.data_seed)
        if cfg.sft_run:  # the automatic SFT run trains on this env: its team has the env's roles
            roles = team_roles(Path(cfg.sft_run) / "team")
            check_team_roles(roles, envs["train"], cfg.env_id, cfg.env_kwargs, f"sft_run {cfg.sft_run!r}")
            check_team_weights(Path(cfg.sft_run) / "team", f"sft_run {cfg.sft_run!r}")
        else:  # the automatic SFT run's options (sft_overrides), before the claim
            check_auto_sft(cfg, envs["train"])
        mismatch = sft_env_mismatch(cfg.sft_run, cfg.env_id, cfg.env_kwargs)
        if mismatch:
            print(f"[rl] warning: {mismatch}")


def start_config(run: RunDir, cfg: RLConfig) -> None:
    """Once the directory is claimed: with ``resume``, say which options changed (refusing those that cannot),
    then save the options (``config.json``)."""
    if cfg.resume:
        changed = check_resume_config(run.path, cfg, bool(checkpoint_steps(run.checkpoints)))
        if changed:
            print(f"[rl] --resume with changed options: {'; '.join(changed)}")
    write_config(run.path, cfg)


def prepare(run: RunDir, cfg: RLConfig, memory: MemoryConfig | None) -> RunState:
    """In a claimed run directory (:meth:`~joy_trainers.base.BaseTrainer.claim_run_dir`, after
    :func:`check_inputs`): Accelerate, the starting team (it must have a role for every agent of the env), the
    roles never trained (``RunState.frozen``), optimisers, memory banks, the engine and the metrics log."""
    from accelerate import Accelerator  # imported here: it costs over a second, and only training needs it

    accelerator = Accelerator(cpu=not torch.cuda.is_available(), log_with=cfg.log_with, project_dir=str(run.path))
    rank, _ = world()
    start_team = run.path / START_TEAM
    carried = carried_team(run, cfg)
    if not carried:
        team_dir = sft_team(cfg.sft_run, cfg.model, cfg.data_seed, auto_sft_overrides(cfg))
        if rank == 0:
            bring_team(team_dir, run.path)
        barrier()
    # the run's random state, from its own seed once its starting team is there: the same whether the automatic
    # SFT team was just trained in this process or read from the cache
    random.seed(cfg.seed + rank)
    torch.manual_seed(cfg.seed + rank)
    try:
        dtype = {"dtype": cfg.dtype} if cfg.dtype else {}
        team = TeamPolicy.load(str(start_team), device=str(accelerator.device), **dtype)
    except (FileNotFoundError, ValueError) as exc:  # a base model gone, a damaged or foreign weights file
        raise UsageError(f"the starting team {start_team}: {' '.join(str(exc).split())}") from None
    say(f"[rl] the team's dtype: {team.dtype} ({team.dtype_reason})")
    env = joy_env.make(cfg.env_id, split="train", seed=cfg.data_seed, **cfg.env_kwargs)  # its world is built
    check_team_roles(team.roles, env, cfg.env_id, cfg.env_kwargs, f"the starting team {start_team}")
    frozen = cfg.frozen_roles(env)
    env.close()
    settings = cfg.generation_settings()
    start_engine(team, settings)  # vllm: built by every process at once (vLLM forms its groups over all of them)
    optimizers = make_optimizers(team, cfg.lr)
    trained = [r for r in team.roles if r not in frozen]  # a frozen role's memory would change its prompts
    banks = {r: MemoryBank(r, memory) for r in trained} if memory is not None and memory.enabled else {}
    engine = RolloutEngine(
        team,
        cfg.env_id,
        "train",
        cfg.data_seed,
        RolloutConfig(settings, keep_snapshots=True),
        progress=False,
        memory=banks,
        env_kwargs=cfg.env_kwargs,
        reward_config=joy_env.RewardConfig(partial_credit=cfg.partial_credit),
    )
    _, rl_indices = split_train_tasks(engine.prototype.num_tasks, 0.5, cfg.data_seed)
    random.Random(f"rl-order/{cfg.seed}").shuffle(rl_indices)
    if rank == 0 and cfg.log_with:
        accelerator.init_trackers(run.path.name, config={k: str(v) for k, v in vars(cfg).items()})
        run.wrote(run.path / run.path.name)  # a tracker's folder (tensorboard's), what --overwrite may remove
    return RunState(
        config=cfg,
        settings=settings,
        team=team,
        optimizers=optimizers,
        banks=banks,
        engine=engine,
        log=MetricsLog(run.path / "metrics.jsonl", accelerator) if rank == 0 else None,
        rl_tasks=rl_indices,
        accelerator=accelerator,
        frozen=frozen,
    )


def _usable_checkpoint(
    directory: Path,
    load_extra: Callable[[Path], None] | None,
    fits: Callable[[CheckpointData], None] | None = None,
) -> tuple[CheckpointData | None, list[tuple[Path | None, str]]]:
    """The newest checkpoint whose every file reads back (and the trainer's, through ``load_extra``) and, given
    ``fits``, that goes into the run (``fits(data)`` raises :class:`CheckpointError` otherwise), and each newer one
    that was skipped (its path, or None for a dangling ``latest``) with why."""
    skipped: list[tuple[Path | None, str]] = []
    pointer = directory / "latest"
    if pointer.is_file():
        name = pointer.read_text().strip()
        if not (directory / name).is_dir():
            skipped.append((None, f"latest points at {name}, which does not exist"))
    for step in checkpoint_steps(directory):
        path = directory / f"step-{step}"
        try:
            data = read_checkpoint(path)
            _load_extra(load_extra, path)
            if fits is not None:
                fits(data)
            return data, skipped
        except CheckpointError as exc:
            skipped.append((path, str(exc)))
    return None, skipped


def set_aside(path: Path) -> Path:
    """Rename the rejected checkpoint ``path`` to ``<name>.rejected`` (``.rejected-2``, ... when taken): kept as
    evidence, never deleted, and no longer read by ``--resume``."""
    dest = path.with_name(f"{path.name}.rejected")
    n = 2
    while dest.exists():
        dest = path.with_name(f"{path.name}.rejected-{n}")
        n += 1
    os.replace(path, dest)
    return dest


def _load_extra(load_extra: Callable[[Path], None] | None, path: Path) -> None:
    if load_extra is None:
        return
    try:
        load_extra(path)
    except CheckpointError:
        raise
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, EOFError) as exc:
        raise CheckpointError(f"{path.name}: the trainer's files do not load ({type(exc).__name__}: {exc})") from None


def _resume(run: RunDir, state: RunState, load_extra: Callable[[Path], None] | None) -> Path | None:
    """Load the newest usable checkpoint into ``state`` (every process the same one); None without any."""
    rank, _ = world()
    choice: tuple[str | None, list[str], bool] = (None, [], False)
    data = None
    if rank == 0:
        data, skipped = _usable_checkpoint(run.checkpoints, load_extra, lambda d: _apply(d, state))
        any_checkpoint = bool(checkpoint_steps(run.checkpoints))
        said = [reason for _, reason in skipped]
        if data is not None and skipped:  # each newer one set aside (never deleted), all said in one line
            said = [f"{r}; kept aside as {set_aside(bad).name}" if bad is not None else r for bad, r in skipped]
            write_text_atomic(run.checkpoints / "latest", data.path.name)
        choice = (data.path.name if data else None, said, any_checkpoint)
    name, skipped_said, any_checkpoint = all_gather_objects(choice)[0]
    if name is None:
        if any_checkpoint:
            raise UsageError(
                f"--resume: no usable checkpoint in {run.checkpoints} ({'; '.join(skipped_said)}); start the run "
                "again with --overwrite, or pass another --output-dir"
            )
        if rank == 0:
            print(f"[rl] --resume: no checkpoint in {run.checkpoints} yet; starting from step 0")
        return None
    path = run.checkpoints / name
    if data is None:  # another process than the one that chose it
        data = read_checkpoint(path)
        _load_extra(load_extra, path)
    try:
        _apply(data, state)
    except CheckpointError as exc:
        raise UsageError(f"--resume: {exc}; resume with the options the run started with, or --overwrite") from None
    saved = data.state
    cfg = state.config
    if not restore_rng(data.rng, rank, world()[1]):  # a checkpoint without this process's RNG states
        torch.manual_seed(cfg.seed + rank + 1000 * int(saved["step"]))
    state.step = int(saved["step"])
    state.baseline = saved.get("baseline")
    state.tokens_total = int(saved.get("tokens_total", 0))
    state.tasks_drawn = int(saved.get("tasks_drawn", state.step * cfg.tasks_per_step))  # older: one batch a step
    state.wall_before = float(saved.get("wall_s", 0.0))
    state.trainer_state = dict(saved.get("trainer_state", {}))
    if data.reference is not None:  # read on the CPU: onto the device of the weights it stands for
        state.reference = ReferencePolicy(state.team, [])
        state.reference.weights = {
            role: [w.to(p.device) for w, p in zip(ws, state.team.trainable_parameters(role), strict=True)]
            for role, ws in data.reference.items()
        }
    if rank == 0:
        skipped_text = "".join(f"; {reason}" for reason in skipped_said)
        print(f"[rl] resumed from {path} (step {state.step}){skipped_text}")
    return path


def _apply(data: CheckpointData, state: RunState) -> None:
    """Put the checkpoint ``data``'s weights, optimiser and RNG states and memory banks into ``state``; a
    :class:`CheckpointError` when any does not fit the run (whatever was put in is replaced by the checkpoint
    applied next)."""
    apply_checkpoint(data, state.team, state.optimizers)
    banks = dict(state.banks)
    for role, bank_data in data.state.get("memory", {}).items():
        if role in banks:
            try:
                banks[role] = MemoryBank.from_dict(bank_data, banks[role].config, banks[role].embedder)
            except ValueError as exc:
                raise CheckpointError(f"{data.path.name}: state.json: the memory of {role}: {exc}") from None
    state.banks.update(banks)


def resume_or_evaluate(run: RunDir, state: RunState, load_extra: Callable[[Path], None] | None = None) -> None:
    """With ``resume``, load the newest usable checkpoint into ``state`` (then ``load_extra(checkpoint_dir)``),
    saying which one and why newer ones were skipped; otherwise (or with no checkpoint yet) evaluate the
    starting team (``baseline_metrics``). ``metrics.jsonl`` keeps exactly the steps ``1..state.step``."""
    cfg = state.config
    rank, _ = world()
    resumed = _resume(run, state, load_extra) if cfg.resume else None
    if state.log is not None:
        state.log.truncate(state.step)
    if resumed is None and cfg.eval_tasks and cfg.eval_baseline:  # every process plays its share
        say(f"[rl] evaluating the starting team on {cfg.eval_tasks} {cfg.eval_split} tasks")
        saved = rng_state()  # the steps draw the same with or without a baseline evaluation
        state.baseline = evaluate(state, with_memory=False)
        set_rng_state(saved)
    if rank == 0:
        if cfg.token_budget:
            total, initial, unit = cfg.token_budget, min(state.tokens_total, cfg.token_budget), "tok"
        else:
            total, initial, unit = cfg.total_steps, state.step, "step"
        state.bar = tqdm(total=total, initial=initial, desc=run.path.name, unit=unit)


def evaluate(state: RunState, with_memory: bool = True) -> dict[str, Any]:
    """Greedy metrics of the current team on the first ``eval_tasks`` tasks of ``eval_split`` (memory is read,
    never written)."""
    memory = state.banks if with_memory else None
    return evaluate_config(state.team, state.config, seed=state.config.data_seed, memory=memory)


def run_steps(
    run: RunDir,
    state: RunState,
    step_fn: Callable[[RunState, int], StepOutput | dict[str, Any]],
    refresh_reference: bool = True,
    after_checkpoint: Callable[[], None] | None = None,
    save_extra: Callable[[Path], None] | None = None,
) -> None:
    """The training loop every RL trainer shares: ``step_fn(state, step)`` for the remaining steps (it
    returns a :class:`StepOutput`, or a finished metrics row), logging and progress after each, a checkpoint
    every ``checkpoint_every`` steps and at the end of each RL iteration (``save_extra(directory)`` writes the
    trainer's own files into it before it is published; then ``after_checkpoint()``). With
    ``refresh_reference`` and ``beta > 0``, each iteration starts by copying the current weights into the
    reference policy. With ``token_budget``, the loop ends (after a checkpoint) at the first step that
    brings the generated tokens to the budget."""
    with _stop_on_ctrl_c() as stop:
        _run_steps(run, state, step_fn, refresh_reference, after_checkpoint, save_extra, stop)


@contextlib.contextmanager
def _stop_on_ctrl_c() -> Iterator[list[int]]:
    """While the loop runs, a first Ctrl-C (SIGINT) or SIGTERM asks it to stop after the step under way, with a
    checkpoint; a second one stops at once (the newest checkpoint stays). Either ends in one
    ``KeyboardInterrupt`` (:class:`~joy_trainers.errors.Terminated` for SIGTERM) whose message is the only line
    said (``joy-train`` prints it and exits with 130, or 143 for SIGTERM). Yields the flag (``[signal number]``
    once asked, ``[0]`` before). The handlers that were there before (the default, or SIG_IGN under ``nohup``)
    are put back when the loop ends."""
    asked = [0]
    if threading.current_thread() is not threading.main_thread():
        yield asked
        return

    def handler(signum: int, frame: Any) -> None:
        if asked[0]:
            raise _interrupt(signum, "stopped at once; the newest checkpoint stays")
        asked[0] = signum  # said once, when the loop stops after this step

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield asked
    finally:
        for sig, before in previous.items():
            signal.signal(sig, before)


def _interrupt(signum: int, message: str) -> KeyboardInterrupt:
    """The exception that stops a run on the signal ``signum``: :class:`Terminated` for SIGTERM, else a
    ``KeyboardInterrupt``."""
    return (Terminated if signum == signal.SIGTERM else KeyboardInterrupt)(message)


def _run_steps(
    run: RunDir,
    state: RunState,
    step_fn: Callable[[RunState, int], StepOutput | dict[str, Any]],
    refresh_reference: bool,
    after_checkpoint: Callable[[], None] | None,
    save_extra: Callable[[Path], None] | None,
    stop: list[int],
) -> None:
    cfg = state.config
    budget = cfg.token_budget
    for step in range(state.step, cfg.total_steps):
        if budget and state.tokens_total >= budget:
            break
        if refresh_reference and cfg.beta and (step % cfg.steps_per_iteration == 0 or state.reference is None):
            state.reference = ReferencePolicy(state.team, state.trained_roles)  # a new RL iteration
        out = step_fn(state, step)
        row = metrics_row(state, step, out) if isinstance(out, StepOutput) else out
        state.step = step + 1
        if state.log is not None:
            state.log.log(row)
        state.progress(row)
        spent = bool(budget) and state.tokens_total >= budget
        signals = [s for s in all_gather_objects(stop[0]) if s]  # every process stops after the same step
        stopping = bool(signals)
        if state.step % cfg.checkpoint_every == 0 or state.step % cfg.steps_per_iteration == 0 or spent or stopping:
            checkpoint(run, state, save_extra)
            if after_checkpoint is not None:
                after_checkpoint()
        if stopping:
            if state.bar is not None:
                state.bar.close()
            raise _interrupt(
                signals[0],
                f"stopped after step {state.step} with a checkpoint; continue with joy-train --resume --output-dir "
                f"{run.path}",
            )


def finish(state: RunState) -> Trained:
    """The end of the training: the trained team and what ``results.json`` says of the run (its final
    evaluation, ``results.json`` and the team are :class:`~joy_trainers.base.BaseTrainer`'s)."""
    if state.bar is not None:
        state.bar.close()
    cfg = state.config
    fields = {"data_seed": cfg.data_seed, "generated_tokens": state.tokens_total, "wall_s": state.wall}
    return Trained(team=state.team, steps=state.step, baseline=state.baseline, memory=state.banks, fields=fields)


def write_outputs(run: RunDir, state: RunState, results: dict[str, Any]) -> None:
    """The RL run's own files beside ``results.json`` (main process): the memory banks (``memory/``) and
    ``reward_curve.png``; ends the experiment trackers."""
    for role, bank in state.banks.items():
        with writing(run.path / "memory", "the memory banks"):
            (run.path / "memory").mkdir(exist_ok=True)
        write_json_atomic(run.path / "memory" / f"{role}.json", bank.to_dict(), f"the memory bank of {role}")
    with writing(run.path / "reward_curve.png", "the reward curve", cleanup=[run.path / "reward_curve.png"]):
        plot_rewards(run.path / "reward_curve.png", state.log.rows if state.log else [], results)
    run.wrote(run.path / "reward_curve.png")  # what --overwrite may remove
    if state.config.log_with:
        state.accelerator.end_training()
        run.wrote(run.path / run.path.name)
