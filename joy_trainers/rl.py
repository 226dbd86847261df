"""Pieces every RL trainer shares, as plain functions and small dataclasses.

- :class:`Group`, :func:`select_top_k`: GRPO groups and marginal-benefit selection by reward variance;
- :func:`policy_update`: one clipped-ratio update of one role from scored samples (micro-batched, exact
  global normalisation across micro-batches and processes, gradients all-reduced per role), and
  :func:`update_roles` running it for every role with samples on any process;
- :func:`run_steps`: the training loop (reference refresh per iteration, logging, checkpoints);
- :class:`ReferencePolicy`: a frozen copy of the trainable weights for the KL term;
- :func:`save_checkpoint` / :func:`load_checkpoint`: atomic checkpoints (adapters, optimisers, memory,
  RNG, step) and ``--resume``;
- :class:`MetricsLog`: the JSONL metrics log (one vocabulary for all trainers);
- :func:`sft_team`: the SFT team an RL run starts from (a given run directory, or a cached tiny SFT run).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from joy_trainers.losses import group_advantages, policy_loss

if TYPE_CHECKING:
    from joy_agents.memory import MemoryConfig


@dataclass
class RLConfig:
    """Options every GRPO-style trainer shares (one line per field). Paper values for Qwen2.5-3B in comments."""

    model: str = "tiny"
    """Base model of the team (``tiny`` or ``tiny-small`` are fine-tuned automatically; others need ``sft_run``)."""
    sft_run: str | None = None
    """Run directory of the ``sft`` trainer to start from (its ``team/``)."""
    sft_overrides: dict[str, Any] = field(default_factory=dict)
    """Options of the automatic tiny SFT run (with ``model="tiny"`` and no ``sft_run``)."""
    env_id: str = "joy/mixed-v0"
    """Environment of training and evaluation."""
    seed: int = 0
    """Seed of the task order, sampling and the automatic SFT run."""
    iterations: int = 2
    """RL iterations; each starts by refreshing the reference policy (paper: 2)."""
    steps_per_iteration: int = 10
    """Optimisation steps per iteration."""
    tasks_per_step: int = 8
    """Tasks per step (over all processes), drawn from the RL part of the train split."""
    group_size: int = 5
    """G: samples per group (paper: 5)."""
    temperature: float = 1.2
    """Temperature of the G samples (paper: 1.2)."""
    top_p: float = 1.0
    """Nucleus sampling of the G samples."""
    lr: float = 1e-6
    """Learning rate of every role's optimiser (paper: 1e-6)."""
    loss_type: str = "grpo"
    """Token aggregation: ``grpo``, ``bnpo``, ``dr_grpo`` or ``dapo`` (as in TRL)."""
    epsilon: float = 0.2
    """Lower clipping of the importance ratio (and upper, unless ``epsilon_high`` is set)."""
    epsilon_high: float | None = None
    """Upper clipping (DAPO's clip-higher, e.g. 0.28)."""
    beta: float = 0.04
    """Weight of the k3 KL penalty to the reference policy (0 skips the reference forward)."""
    scale_rewards: bool = True
    """Divide advantages by the group std (False: Dr. GRPO)."""
    micro_batch_size: int = 16
    """Sequences per forward/backward in the update."""
    max_grad_norm: float = 1.0
    """Gradient clipping per role."""
    max_new_tokens: int = 128
    """Cap of generated tokens per agent turn."""
    max_cycles: int = 16
    """Agent turns per episode."""
    max_prompt_tokens: int = 3072
    """Longer prompts keep their last tokens."""
    eval_tasks: int = 200
    """Test tasks evaluated before and after (0: skip)."""
    eval_split: str = "test"
    """Split evaluated."""
    eval_baseline: bool = True
    """Evaluate the starting team too (``baseline_metrics``); off when a caller evaluates it once for many runs."""
    token_budget: int = 0
    """Stop once this many tokens have been generated in training rollouts, over all processes (0: run every
    step). Gives trainers with different sampling schemes the same budget (``benchmarks/run_baselines.py``)."""
    checkpoint_every: int = 5
    """Steps between checkpoints (and at the end of every iteration)."""
    resume: bool = False
    """Continue from the run directory's latest checkpoint."""
    output_dir: str | None = None
    """Run directory; default ``runs/joyagents_grpo-<timestamp>``."""
    log_with: str | None = None
    """An Accelerate tracker (e.g. ``tensorboard``) mirroring the JSONL metrics."""

    def __post_init__(self) -> None:
        for name in ("iterations", "steps_per_iteration", "tasks_per_step", "micro_batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 (a group of one has no variance), got {self.group_size!r}")
        from joy_trainers.losses import LOSS_TYPES

        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {self.loss_type!r}")
        import joy_env

        if self.eval_split not in joy_env.SPLITS:
            raise ValueError(f"eval_split must be one of {joy_env.SPLITS}, got {self.eval_split!r}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0 for sampling groups, got {self.temperature!r}")
        if isinstance(self.token_budget, bool) or not isinstance(self.token_budget, int) or self.token_budget < 0:
            raise ValueError(f"token_budget must be an int >= 0 (0: no budget), got {self.token_budget!r}")
        if self.lr <= 0 or self.beta < 0 or self.epsilon <= 0:
            raise ValueError(f"need lr > 0, beta >= 0, epsilon > 0; got {self.lr!r}, {self.beta!r}, {self.epsilon!r}")

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Any:
        """Build from a dict (YAML), rejecting unknown keys with the list of valid ones."""
        valid = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - valid)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} option(s) {unknown}; valid: {', '.join(sorted(valid))}")
        return cls(**values)

    @property
    def total_steps(self) -> int:
        return self.iterations * self.steps_per_iteration


# ---------------------------------------------------------------------------------------------- groups
@dataclass
class Group:
    """G scored samples of one situation, all produced by ``role``: a GRPO group.

    ``samples`` hold ``prompt_ids``, ``completion_ids`` and ``logprobs`` (a :class:`~joy_agents.policy.Sample`
    or a rollout ``Node``); ``rewards[j]`` is the team reward of the trajectory that sample ``j`` led to.
    Joint (whole-trajectory) groups set ``role = "*"`` and list each trajectory's nodes in ``members``.
    """

    role: str
    rewards: list[float]
    samples: list[Any] = field(default_factory=list)
    members: list[list[Any]] = field(default_factory=list)
    key: str = ""
    outcomes: list[Any] = field(default_factory=list)
    """:class:`~joy_agents.memory.Outcome` records of the group's samples (memory evolution)."""

    @property
    def variance(self) -> float:
        """Population variance of the group's rewards (the paper's "fluctuation")."""
        n = len(self.rewards)
        if n < 2:
            return 0.0
        mean = sum(self.rewards) / n
        return sum((r - mean) ** 2 for r in self.rewards) / n


def select_top_k(groups: Sequence[Group], k: int | str) -> list[Group]:
    """The ``k`` groups of largest reward variance (ties: earlier first), or every group with ``k="all"``.

    Groups without variance carry no learning signal (all advantages are 0) and are never selected.
    """
    if k == "all":
        return [g for g in groups if g.variance > 0]
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"top_k must be an int >= 1 or 'all', got {k!r}")
    order = sorted(range(len(groups)), key=lambda i: (-groups[i].variance, i))
    return [groups[i] for i in order[:k] if groups[i].variance > 0]


# ---------------------------------------------------------------------------------------- distribution
def world() -> tuple[int, int]:
    """``(rank, world size)`` of the torch.distributed group (``(0, 1)`` without one)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum ``t`` over processes in place (no-op with one process); returns it."""
    if world()[1] > 1:
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.SUM)
    return t


def all_gather_objects(obj: Any) -> list[Any]:
    """One ``obj`` per process, in rank order."""
    if world()[1] == 1:
        return [obj]
    out: list[Any] = [None] * world()[1]
    torch.distributed.all_gather_object(out, obj)
    return out


def shard(items: Sequence[Any]) -> list[Any]:
    """This process's share of ``items`` (round robin)."""
    rank, size = world()
    return list(items[rank::size])


# ------------------------------------------------------------------------------------------- reference
class ReferencePolicy:
    """A frozen copy of each role's trainable weights; ``with ref.active(team, role):`` swaps them in.

    The swap exchanges the parameters' storage (``param.data``) with the copy's and back, so entering and
    leaving copies no weights (full fine-tuning of a large model would otherwise copy it three times per
    micro-batch); the parameter objects, and so the optimiser state keyed by them, stay the same.
    """

    def __init__(self, team: Any, roles: Sequence[str]) -> None:
        self.weights = {r: [p.detach().clone() for p in team.trainable_parameters(r)] for r in roles}

    @contextlib.contextmanager
    def active(self, team: Any, role: str) -> Iterator[None]:
        params = team.trainable_parameters(role)
        current = [p.data for p in params]
        for p, w in zip(params, self.weights[role], strict=True):
            p.data = w
        try:
            yield
        finally:
            for p, d in zip(params, current, strict=True):
                p.data = d


# ---------------------------------------------------------------------------------------------- update
@dataclass
class UpdateConfig:
    """The loss options of :func:`policy_update` (fields of every GRPO-style trainer config)."""

    loss_type: str = "grpo"
    epsilon: float = 0.2
    epsilon_high: float | None = None
    beta: float = 0.0
    temperature: float = 1.0
    max_completion_length: int = 128
    micro_batch_size: int = 16
    max_grad_norm: float = 1.0


def _pad(rows: Sequence[Sequence[float]], width: int, value: float = 0.0) -> torch.Tensor:
    out = torch.full((len(rows), width), value, dtype=torch.float32)
    for i, r in enumerate(rows):
        if len(r):
            out[i, : len(r)] = torch.as_tensor(list(r), dtype=torch.float32)
    return out


def policy_update(
    team: Any,
    role: str,
    optimizer: torch.optim.Optimizer | None,
    samples: Sequence[Any],
    advantages: Sequence[float],
    cfg: UpdateConfig,
    reference: ReferencePolicy | None = None,
) -> dict[str, float]:
    """One optimisation step of ``role`` on ``samples`` (each with ``prompt_ids``, ``completion_ids`` and
    sampling-time ``logprobs``) with one advantage each.

    Every process calls it for the same roles in the same order (maybe with no samples): the loss is
    normalised by global counts and the gradients summed across processes, so every process ends with the
    same parameters. ``optimizer=None`` computes the statistics without stepping. Returns loss statistics.
    """
    from joy_agents.policy import prompt_batches

    rows = [(s, float(a)) for s, a in zip(samples, advantages, strict=True) if len(s.completion_ids)]
    device = team.device
    counts = torch.tensor(
        [float(len(rows)), float(sum(len(s.completion_ids) for s, _ in rows))], dtype=torch.float64
    )
    all_reduce_sum(counts)
    n_seq, n_tok = float(counts[0]), float(counts[1])
    params = team.trainable_parameters(role)
    stats = {"policy_loss": 0.0, "kl": 0.0, "clip_fraction": 0.0, "ratio_mean": 0.0, "samples": n_seq}
    if n_seq == 0:
        return stats
    for p in params:
        p.grad = None
    width_all = cfg.max_completion_length
    # micro-batches keep the rows of one prompt (a GRPO group) together: team.logprobs runs a prompt once for
    # all its completions (TeamConfig.share_prefix); the loss does not depend on how rows are batched
    for chunk in prompt_batches(rows, cfg.micro_batch_size):
        prompts = [list(s.prompt_ids) for s, _ in chunk]
        completions = [list(s.completion_ids) for s, _ in chunk]
        width = max(len(c) for c in completions)
        ref = None
        if cfg.beta and reference is not None:
            with torch.no_grad(), reference.active(team, role):
                ref = _pad([x.tolist() for x in team.logprobs(role, prompts, completions, cfg.temperature)], width)
        with team.use_role(role):
            team.model_for(role).train()
            logps_list = team.logprobs(role, prompts, completions, cfg.temperature)
        logps = torch.nn.utils.rnn.pad_sequence(logps_list, batch_first=True)  # (B, width), grad kept
        old = _pad([s.logprobs for s, _ in chunk], width).to(device)
        mask = (torch.arange(width)[None, :] < torch.tensor([len(c) for c in completions])[:, None]).to(device)
        adv = torch.tensor([a for _, a in chunk], dtype=torch.float32, device=device)
        loss, st = policy_loss(
            logps,
            old,
            adv,
            mask,
            ref_logps=ref.to(device) if ref is not None else None,
            beta=cfg.beta if ref is not None else 0.0,
            epsilon=cfg.epsilon,
            epsilon_high=cfg.epsilon_high,
            loss_type=cfg.loss_type,
            max_completion_length=width_all,
            num_items=n_tok,
        )
        tokens = float(mask.sum())
        # weight of this micro-batch in the global loss (see the module docstring of losses for the types)
        if cfg.loss_type == "grpo" or cfg.loss_type == "dr_grpo":
            weight = len(chunk) / n_seq
        elif cfg.loss_type == "bnpo":
            weight = tokens / max(n_tok, 1.0)
        else:  # dapo is already normalised by the global token count
            weight = 1.0
        (loss * weight).backward()
        share = tokens / max(n_tok, 1.0)
        for name in ("kl", "clip_fraction", "ratio_mean"):
            stats[name] += st[name] * share
        stats["policy_loss"] += st["policy_loss"] * weight
    team.model_for(role).eval()
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        all_reduce_sum(p.grad)
    for name in ("policy_loss", "kl", "clip_fraction", "ratio_mean"):
        t = torch.tensor([stats[name]], dtype=torch.float64)
        stats[name] = float(all_reduce_sum(t)[0])
    if optimizer is not None:
        stats["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return stats


def advantages_of(groups: Sequence[Group], scale: bool = True) -> list[list[float]]:
    """GRPO advantages of every group's samples (one list per group)."""
    out = []
    for g in groups:
        if not g.rewards:
            out.append([])
            continue
        adv = group_advantages(torch.tensor(g.rewards, dtype=torch.float32), len(g.rewards), scale)
        out.append([float(a) for a in adv])
    return out


def make_optimizers(team: Any, lr: float, weight_decay: float = 0.0) -> dict[str, torch.optim.Optimizer]:
    """One AdamW per role over its trainable parameters."""
    return {
        r: torch.optim.AdamW(team.trainable_parameters(r), lr=lr, weight_decay=weight_decay) for r in team.roles
    }


# ----------------------------------------------------------------------------------------- checkpoints
def _rng_state() -> dict[str, Any]:
    import numpy as np

    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def _set_rng_state(state: dict[str, Any]) -> None:
    import numpy as np

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(
    directory: str | Path,
    step: int,
    team: Any,
    optimizers: dict[str, torch.optim.Optimizer],
    state: dict[str, Any],
    keep: int = 2,
) -> Path:
    """Write ``directory/step-{step}`` atomically (a temporary directory renamed when complete), then point
    ``directory/latest`` at it (also atomically) and drop older checkpoints beyond ``keep``.

    ``state`` is any JSON-able dict (memory banks, metrics history, data order...); RNG states are added.
    A crash at any moment leaves either the previous complete checkpoint or the new one, never half of one.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"step-{step}"
    tmp = directory / f".tmp-step-{step}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    team.save(str(tmp / "team"))
    torch.save({r: o.state_dict() for r, o in optimizers.items()}, tmp / "optimizers.pt")
    torch.save(_rng_state(), tmp / "rng.pt")
    (tmp / "state.json").write_text(json.dumps({"step": step, **state}, default=str))
    for f in tmp.rglob("*"):
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    pointer = directory / ".latest.tmp"
    pointer.write_text(final.name)
    with open(pointer, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(pointer, directory / "latest")
    steps = sorted(
        (int(p.name.split("-")[1]) for p in directory.glob("step-*") if p.name.split("-")[1].isdigit()),
        reverse=True,
    )
    for old in steps[keep:]:
        shutil.rmtree(directory / f"step-{old}", ignore_errors=True)
    return final


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The checkpoint ``directory/latest`` points at, or None."""
    pointer = Path(directory) / "latest"
    if not pointer.is_file():
        return None
    path = Path(directory) / pointer.read_text().strip()
    return path if (path / "state.json").is_file() else None


def load_checkpoint(path: str | Path, team: Any, optimizers: dict[str, torch.optim.Optimizer]) -> dict[str, Any]:
    """Load adapters/weights, optimiser and RNG states from a checkpoint; returns its ``state`` dict."""
    from joy_agents.policy import TeamPolicy

    path = Path(path)
    saved = TeamPolicy.load(str(path / "team"))
    for role in team.roles:
        with torch.no_grad():
            for p, q in zip(team.trainable_parameters(role), saved.trainable_parameters(role), strict=True):
                p.copy_(q.to(p.device))
    del saved
    opt_states = torch.load(path / "optimizers.pt", weights_only=False)
    for role, opt in optimizers.items():
        opt.load_state_dict(opt_states[role])
    _set_rng_state(torch.load(path / "rng.pt", weights_only=False))
    return json.loads((path / "state.json").read_text())


# --------------------------------------------------------------------------------------------- metrics
class MetricsLog:
    """Appends one JSON line per step to ``path`` (flushed and synced: nothing is lost on a crash), and
    mirrors scalars to Accelerate trackers when given an ``accelerator`` with trackers."""

    def __init__(self, path: str | Path, accelerator: Any = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.accelerator = accelerator
        self.rows: list[dict[str, Any]] = []
        if self.path.is_file():
            self.rows = [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def truncate(self, step: int) -> None:
        """Drop rows after ``step`` (on resume: steps done after the last checkpoint are redone)."""
        self.rows = [r for r in self.rows if r.get("step", 0) <= step]
        self.path.write_text("".join(json.dumps(r) + "\n" for r in self.rows))

    def log(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row, default=float) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if self.accelerator is not None and getattr(self.accelerator, "trackers", None):
            scalars = {k: v for k, v in row.items() if isinstance(v, (int, float)) and math.isfinite(v)}
            self.accelerator.log(scalars, step=int(row.get("step", 0)))


# ------------------------------------------------------------------------------------------ start team
def sft_team(sft_run: str | None, model: str, seed: int, sft_overrides: dict[str, Any] | None = None) -> Path:
    """The ``team/`` directory an RL run starts from.

    ``sft_run``: a run directory written by the ``sft`` trainer (its ``team/`` is used). Without one and with
    ``model="tiny"`` (or ``smollm2-135m-instruct``), the ``sft`` trainer's tiny (or smol) preset plus
    ``sft_overrides`` is run once into the cache (``~/.cache/joyagents/sft-<hash>``) and reused by later runs
    with the same settings.
    """
    if sft_run:
        team = Path(sft_run) / "team"
        if not (team / "team.json").is_file():
            raise FileNotFoundError(f"{sft_run!r} holds no team/team.json; pass a run directory of the sft trainer")
        return team
    from joy_trainers.sft import AUTO_SFT_PRESETS, SFTConfig, SFTTrainer

    if model not in AUTO_SFT_PRESETS:
        raise ValueError(
            f"model={model!r} needs sft_run (a run directory of `joy-train --trainer sft`); only these models are "
            f"fine-tuned automatically: {', '.join(sorted(AUTO_SFT_PRESETS))}"
        )

    run = tiny_sft_dir(model, seed, sft_overrides)
    if (run / "team" / "team.json").is_file():
        return run / "team"
    rank, _ = world()
    if rank == 0:
        # team/team.json is written last: a run interrupted before it is redone from scratch
        if run.exists():
            shutil.rmtree(run)
        preset = AUTO_SFT_PRESETS[model]
        print(f"[rl] no cached SFT team for these settings; running the sft {preset} preset into {run}")
        values = {**tiny_sft_values(model, seed, sft_overrides), "output_dir": str(run)}
        SFTTrainer(SFTConfig.from_dict(values)).train()
    if world()[1] > 1:
        torch.distributed.barrier()
    return run / "team"


def tiny_sft_values(model: str, seed: int, sft_overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``sft`` options of the automatic SFT run of ``model`` (its preset in ``AUTO_SFT_PRESETS``: ``tiny``
    for the tiny models, ``smol`` for SmolLM2; then ``sft_overrides``; no evaluation)."""
    from joy_trainers.sft import AUTO_SFT_PRESETS, PRESETS

    values = {**PRESETS[AUTO_SFT_PRESETS.get(model, "tiny")], "model": model, "seed": seed, **(sft_overrides or {})}
    return {**values, "eval_tasks": 0, "output_dir": None}


def tiny_sft_dir(model: str = "tiny", seed: int = 0, sft_overrides: dict[str, Any] | None = None) -> Path:
    """Where :func:`sft_team` caches the automatic tiny SFT run of these settings (it may not exist yet)."""
    from joy_agents.tiny import BUILD_VERSION, default_cache_dir, env_fingerprint

    # a new tiny-model build (tokenizer or shape) or a changed env (other expert data, other tokenizer
    # corpus) must not reuse a team fine-tuned before
    key = {**tiny_sft_values(model, seed, sft_overrides), "tiny_build": BUILD_VERSION, "env": env_fingerprint()}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return Path(default_cache_dir()) / f"sft-{digest}"


class Timer:
    """Accumulates seconds per phase: ``with timer("rollout"): ...``; ``timer.seconds`` holds the totals."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start


# ------------------------------------------------------------------------------------------ run state
def outcome_of(node: Any, trajectory: Any) -> Any:
    """The memory :class:`~joy_agents.memory.Outcome` of ``node`` in a finished ``trajectory``."""
    from joy_agents.memory import Outcome

    result = trajectory.result
    return Outcome(
        role=node.role,
        key=node.memory_key,
        turn=node.role_turn,
        action=node.text,
        reward=float(result["R_A"]) + float(result["R_F"]),
        retrieved=tuple(node.memory_ids),
    )


class RunDir:
    """Where a run writes: ``output_dir`` or ``runs/<trainer>-<timestamp>`` (chosen by rank 0)."""

    def __init__(self, output_dir: str | None, trainer: str) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.path = Path(output_dir or os.path.join("runs", f"{trainer}-{stamp}"))

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"


@dataclass
class RunState:
    """Everything a training loop carries from step to step."""

    config: Any
    team: Any
    optimizers: dict[str, torch.optim.Optimizer]
    banks: dict[str, Any]
    engine: Any
    log: MetricsLog | None
    rl_tasks: list[int]
    accelerator: Any
    step: int = 0
    reference: ReferencePolicy | None = None
    baseline: dict[str, Any] | None = None
    tokens_total: int = 0
    trainer_state: dict[str, Any] = field(default_factory=dict)
    """JSON-able values a trainer carries from step to step (e.g. a running baseline): saved in every
    checkpoint and restored by ``--resume``."""
    wall_before: float = 0.0
    started: float = field(default_factory=time.perf_counter)
    bar: Any = None

    @property
    def is_main(self) -> bool:
        return world()[0] == 0

    def batch_tasks(self, step: int, n: int) -> list[int]:
        """The ``n`` RL tasks of ``step`` (the shuffled RL split, cycled; the same on every process)."""
        return [self.rl_tasks[(step * n + i) % len(self.rl_tasks)] for i in range(n)]

    def sampling(self, temperature: float) -> Any:
        """Sampling of whole turns at ``temperature`` (0: greedy) with the run's token cap."""
        from joy_agents.policy import SamplingConfig

        return SamplingConfig(
            temperature=temperature, max_new_tokens=self.config.max_new_tokens, stop=("</answer>",)
        )

    def progress(self, row: dict[str, Any]) -> None:
        if self.bar is not None:
            # with a token budget the bar counts generated tokens (the steps needed are not known ahead)
            self.bar.update(row["charts/tokens_generated"] if getattr(self.config, "token_budget", 0) else 1)
            self.bar.set_postfix(
                reward=f"{row['charts/reward_mean']:.3f}", selected=row["groups/selected"], refresh=False
            )

    @property
    def wall(self) -> float:
        return self.wall_before + time.perf_counter() - self.started


def setup(run: RunDir, cfg: Any, memory: MemoryConfig | None) -> RunState:
    """Accelerate, the starting team, optimisers, memory banks, the engine, the log; resumes if asked and
    evaluates the starting team (``baseline_metrics``) on a fresh run."""
    from accelerate import Accelerator

    from joy_agents.memory import MemoryBank
    from joy_agents.policy import TeamPolicy
    from joy_agents.rollout import RolloutConfig, RolloutEngine
    from joy_agents.sft_data import split_train_tasks

    accelerator = Accelerator(cpu=not torch.cuda.is_available(), log_with=cfg.log_with, project_dir=str(run.path))
    rank, size = world()
    run.path = Path(all_gather_objects(str(run.path))[0])
    random.seed(cfg.seed + rank)
    torch.manual_seed(cfg.seed + rank)
    team_dir = sft_team(cfg.sft_run, cfg.model, cfg.seed, getattr(cfg, "sft_overrides", None))
    team = TeamPolicy.load(str(team_dir), device=str(accelerator.device))
    optimizers = make_optimizers(team, cfg.lr)
    banks = {r: MemoryBank(r, memory) for r in team.roles} if memory is not None and memory.enabled else {}
    engine = RolloutEngine(
        team,
        cfg.env_id,
        "train",
        cfg.seed,
        RolloutConfig(max_prompt_tokens=cfg.max_prompt_tokens, keep_snapshots=True, max_cycles=cfg.max_cycles),
        progress=False,
        memory=banks,
    )
    _, rl_indices = split_train_tasks(engine.prototype.num_tasks, 0.5, cfg.seed)
    random.Random(f"rl-order/{cfg.seed}").shuffle(rl_indices)
    if rank == 0:
        run.path.mkdir(parents=True, exist_ok=True)
        if cfg.log_with:
            accelerator.init_trackers(run.path.name, config={k: str(v) for k, v in vars(cfg).items()})
    state = RunState(
        config=cfg,
        team=team,
        optimizers=optimizers,
        banks=banks,
        engine=engine,
        log=MetricsLog(run.path / "metrics.jsonl", accelerator) if rank == 0 else None,
        rl_tasks=rl_indices,
        accelerator=accelerator,
    )
    latest = latest_checkpoint(run.checkpoints) if cfg.resume else None
    if cfg.resume and latest is None and rank == 0:
        print(f"[rl] --resume: no checkpoint in {run.checkpoints}; starting from step 0")
    if latest is not None:
        saved = load_checkpoint(latest, team, optimizers)
        torch.manual_seed(cfg.seed + rank + 1000 * int(saved["step"]))
        state.step = int(saved["step"])
        state.baseline = saved.get("baseline")
        state.tokens_total = int(saved.get("tokens_total", 0))
        state.wall_before = float(saved.get("wall_s", 0.0))
        state.trainer_state = dict(saved.get("trainer_state", {}))
        for role, data in saved.get("memory", {}).items():
            if role in banks:
                banks[role] = MemoryBank.from_dict(data, memory)
        if (latest / "reference.pt").is_file():
            state.reference = ReferencePolicy(team, [])
            state.reference.weights = torch.load(latest / "reference.pt", weights_only=False)
        if state.log is not None:
            state.log.truncate(state.step)
        if rank == 0:
            print(f"[rl] resumed from {latest} at step {state.step}")
    elif cfg.eval_tasks and cfg.eval_baseline and rank == 0:
        print(f"[rl] evaluating the starting team on {cfg.eval_tasks} {cfg.eval_split} tasks")
        state.baseline = evaluate(state, with_memory=False)
    if size > 1:
        state.baseline = all_gather_objects(state.baseline)[0]
    if rank == 0:
        from tqdm.auto import tqdm

        if getattr(cfg, "token_budget", 0):
            total, initial, unit = cfg.token_budget, min(state.tokens_total, cfg.token_budget), "tok"
        else:
            total, initial, unit = cfg.total_steps, state.step, "step"
        state.bar = tqdm(total=total, initial=initial, desc=run.path.name, unit=unit)
    return state


def evaluate(state: RunState, with_memory: bool = True) -> dict[str, Any]:
    """Greedy metrics of the current team on the first ``eval_tasks`` tasks of ``eval_split`` (memory is read,
    never written)."""
    from joy_trainers.sft import evaluate_team

    cfg = state.config
    return evaluate_team(
        state.team,
        cfg.env_id,
        cfg.eval_split,
        cfg.eval_tasks,
        cfg.seed,
        cfg.max_new_tokens,
        cfg.max_cycles,
        cfg.max_prompt_tokens,
        memory=state.banks if with_memory else None,
    )


def checkpoint(run: RunDir, state: RunState) -> None:
    """Rank 0 writes a checkpoint of ``state`` (see :func:`save_checkpoint`); every rank waits for it."""
    if state.is_main:
        extra = {
            "baseline": state.baseline,
            "tokens_total": state.tokens_total,
            "wall_s": state.wall,
            "memory": {r: b.to_dict() for r, b in state.banks.items()},
            "trainer_state": state.trainer_state,
        }
        path = save_checkpoint(run.checkpoints, state.step, state.team, state.optimizers, extra)
        if state.reference is not None:
            tmp = path / ".reference.pt.tmp"
            torch.save(state.reference.weights, tmp)
            os.replace(tmp, path / "reference.pt")
    if world()[1] > 1:
        torch.distributed.barrier()


def select_global(groups: Sequence[Group], k: int | str) -> list[Group]:
    """Top-K selection over the groups of every process; returns this process's selected groups."""
    rank, size = world()
    if size == 1:
        return select_top_k(groups, k)
    everyone = all_gather_objects([g.variance for g in groups])
    flat = [(v, r, i) for r, vs in enumerate(everyone) for i, v in enumerate(vs)]  # (variance, rank, index)
    order = sorted(range(len(flat)), key=lambda j: (-flat[j][0], j))
    keep = [j for j in order if flat[j][0] > 0]
    if k != "all":
        keep = keep[: int(k)]
    return [groups[flat[j][2]] for j in sorted(keep) if flat[j][1] == rank]


def update_selected(state: RunState, selected: Sequence[Group], cfg: Any) -> dict[str, Any]:
    """Advantages of the selected groups, then one :func:`policy_update` per role owning one of them
    (the same roles in the same order on every process)."""
    per_role: dict[str, list[tuple[Any, float]]] = {}
    for g, adv in zip(selected, advantages_of(selected, cfg.scale_rewards), strict=True):
        if g.role == "*":  # a whole trajectory: every node shares its advantage
            for nodes, a in zip(g.members, adv, strict=True):
                for n in nodes:
                    per_role.setdefault(n.role, []).append((n, a))
        else:
            for s, a in zip(g.samples, adv, strict=True):
                per_role.setdefault(g.role, []).append((s, a))
    return update_roles(state, per_role, update_config(cfg), state.reference)


def update_config(cfg: RLConfig, beta: float | None = None) -> UpdateConfig:
    """The :class:`UpdateConfig` of a trainer config (``beta`` overrides the config's)."""
    return UpdateConfig(
        loss_type=cfg.loss_type,
        epsilon=cfg.epsilon,
        epsilon_high=cfg.epsilon_high,
        beta=cfg.beta if beta is None else beta,
        temperature=cfg.temperature,
        max_completion_length=cfg.max_new_tokens,
        micro_batch_size=cfg.micro_batch_size,
        max_grad_norm=cfg.max_grad_norm,
    )


def update_roles(
    state: RunState,
    per_role: dict[str, list[tuple[Any, float]]],
    ucfg: UpdateConfig,
    reference: ReferencePolicy | None = None,
) -> dict[str, Any]:
    """One :func:`policy_update` per role that has ``(sample, advantage)`` pairs on any process, in the same
    order on every process; returns the statistics per role."""
    roles = sorted({r for rs in all_gather_objects(sorted(per_role)) for r in rs})
    stats: dict[str, Any] = {}
    for role in roles:
        rows = per_role.get(role, [])
        samples, advantages = [s for s, _ in rows], [a for _, a in rows]
        stats[role] = policy_update(state.team, role, state.optimizers[role], samples, advantages, ucfg, reference)
    return stats


def run_steps(
    run: RunDir,
    state: RunState,
    step_fn: Any,
    refresh_reference: bool = True,
    after_checkpoint: Any = None,
) -> None:
    """The training loop every RL trainer shares: ``step_fn(state, step) -> metrics row`` for the remaining
    steps, logging and progress after each, a checkpoint every ``checkpoint_every`` steps and at the end of
    each RL iteration (then ``after_checkpoint()``). With ``refresh_reference`` and ``beta > 0``, each
    iteration starts by copying the current weights into the reference policy. With ``token_budget``, the
    loop ends (after a checkpoint) at the first step that brings the generated tokens to the budget."""
    cfg = state.config
    budget = getattr(cfg, "token_budget", 0)
    for step in range(state.step, cfg.total_steps):
        if budget and state.tokens_total >= budget:
            break
        if refresh_reference and cfg.beta and (step % cfg.steps_per_iteration == 0 or state.reference is None):
            state.reference = ReferencePolicy(state.team, state.team.roles)  # a new RL iteration
        row = step_fn(state, step)
        state.step = step + 1
        if state.log is not None:
            state.log.log(row)
        state.progress(row)
        spent = bool(budget) and state.tokens_total >= budget
        if state.step % cfg.checkpoint_every == 0 or state.step % cfg.steps_per_iteration == 0 or spent:
            checkpoint(run, state)
            if after_checkpoint is not None:
                after_checkpoint()


def evolve_memory(state: RunState, groups: Sequence[Group], step: int) -> dict[str, Any]:
    """Memory evolution from every sample of the step (all processes' outcomes, the same on every rank)."""
    from joy_agents.memory import evolve

    if not state.banks:
        return {}
    local = [o for g in groups for o in g.outcomes]
    outcomes = [o for rank_outcomes in all_gather_objects(local) for o in rank_outcomes]
    z = next(iter(state.banks.values())).config.z
    return evolve(state.banks, outcomes, step, z)


def trajectory_groups(
    state: RunState, tasks: Sequence[int], group_size: int, temperature: float, top_p: float = 1.0
) -> tuple[list[Group], list[Any], list[Any]]:
    """G whole trajectories per task, every role sampling at ``temperature``: one joint group per task.

    Returns ``(groups, trajectories, [])`` (no separate continuations)."""
    from joy_agents.policy import SamplingConfig

    sampling = SamplingConfig(
        temperature=temperature, top_p=top_p, max_new_tokens=state.config.max_new_tokens, stop=("</answer>",)
    )
    starts = [t for t in tasks for _ in range(group_size)]
    trajs = state.engine.run(starts, sampling) if starts else []
    groups = []
    for k in range(len(tasks)):
        members = trajs[k * group_size : (k + 1) * group_size]
        groups.append(
            Group(
                role="*",
                rewards=[t.reward for t in members],
                members=[[n for n in t.nodes if n.trainable] for t in members],
                key=members[0].task_id if members else "",
                outcomes=[outcome_of(n, t) for t in members for n in t.nodes],
            )
        )
    return groups, trajs, []


def step_row(
    step: int,
    cfg: Any,
    groups: Sequence[Group],
    selected: Sequence[Group],
    trajectories: Sequence[Any],
    continuations: Sequence[Any],
    update_stats: dict[str, Any],
    memory_stats: dict[str, Any],
    timer: Timer,
    state: RunState,
) -> dict[str, Any]:
    """The metrics row of one step, summed / averaged over every process (one vocabulary for all trainers)."""
    local = {
        "rewards": [t.reward for t in trajectories],
        "success": [float(t.success) for t in trajectories],
        "domains": [(t.domain, t.reward) for t in trajectories],
        "tokens": sum(t.generated_tokens for t in trajectories) + sum(t.generated_tokens for t in continuations),
        "continuations": len(continuations),
        "branched_nodes": len(groups) if groups and groups[0].role != "*" else 0,
        "variances": [g.variance for g in groups],
        "sample_rewards": [r for g in groups for r in g.rewards],
        "selected_roles": [g.role for g in selected],
        "selected_variances": [g.variance for g in selected],
        "truncated": sum(1 for t in [*trajectories, *continuations] for n in t.nodes if n.prompt_truncated),
    }
    parts = all_gather_objects(local)

    def cat(key: str) -> list[Any]:
        return [x for p in parts for x in p[key]]

    def mean(xs: Sequence[float]) -> float:
        return float(sum(xs) / len(xs)) if xs else 0.0

    rewards = cat("rewards")
    tokens = sum(p["tokens"] for p in parts)
    state.tokens_total += tokens
    row: dict[str, Any] = {
        "step": step + 1,
        "iteration": step // cfg.steps_per_iteration + 1,
        "charts/reward_mean": mean(rewards),
        "charts/success_rate": mean(cat("success")),
        "charts/sample_reward_mean": mean(cat("sample_rewards")),
        "charts/tokens_generated": tokens,
        "charts/tokens_generated_total": state.tokens_total,
        "charts/episodes": len(rewards),
        "sampling/continuations": sum(p["continuations"] for p in parts),
        "sampling/branched_nodes": sum(p["branched_nodes"] for p in parts),
        "groups/total": len(cat("variances")),
        "groups/variance_mean": mean(cat("variances")),
        "groups/nonzero_variance": sum(1 for v in cat("variances") if v > 0),
        "groups/selected": len(cat("selected_roles")),
        "groups/selected_variance_mean": mean(cat("selected_variances")),
        "prompts/truncated": sum(p["truncated"] for p in parts),
    }
    by_domain: dict[str, list[float]] = {}
    for d, r in cat("domains"):
        by_domain.setdefault(d, []).append(r)
    for d, rs in sorted(by_domain.items()):
        row[f"charts/reward/{d}"] = mean(rs)
    for role in state.team.roles:
        row[f"groups/selected/{role}"] = sum(
            1 for r in cat("selected_roles") if r == role or (r == "*" and role in update_stats)
        )
    updated = [s for s in update_stats.values() if s.get("samples")]
    total = sum(s["samples"] for s in updated) or 1.0
    for name in ("policy_loss", "kl", "clip_fraction"):
        row[f"losses/{name}"] = sum(s[name] * s["samples"] for s in updated) / total if updated else 0.0
    row["losses/roles_updated"] = len(updated)
    for name, seconds in timer.seconds.items():
        row[f"time/{name}_s"] = seconds
    if state.banks:
        lookups = sum(b.stats["lookups"] for b in state.banks.values())
        hits = sum(b.stats["hits"] for b in state.banks.values())
        row["memory/size"] = sum(len(b) for b in state.banks.values())
        row["memory/hit_rate"] = hits / lookups if lookups else 0.0
        row["memory/written"] = memory_stats.get("written", 0)
        row["memory/evicted"] = memory_stats.get("evicted", 0)
    row["time/wall_s"] = state.wall
    return row


def finish(run: RunDir, state: RunState, trainer: str) -> dict[str, Any]:
    """Final evaluation, the trained team, ``results.json``, ``results.md`` and ``reward_curve.png``."""
    cfg = state.config
    if state.bar is not None:
        state.bar.close()
    results: dict[str, Any] = {}
    if state.is_main:
        metrics = evaluate(state) if cfg.eval_tasks else None
        state.team.save(str(run.path / "team"))
        for role, bank in state.banks.items():
            (run.path / "memory").mkdir(exist_ok=True)
            (run.path / "memory" / f"{role}.json").write_text(json.dumps(bank.to_dict()))
        results = {
            "trainer": trainer,
            "env_id": cfg.env_id,
            "split": cfg.eval_split,
            "seed": cfg.seed,
            "model": cfg.model,
            "steps": state.step,
            "generated_tokens": state.tokens_total,
            "wall_s": state.wall,
            "metrics": metrics,
            "baseline_metrics": state.baseline,
            "config": {k: v for k, v in vars(cfg).items()},
        }
        from joy_trainers.sft import results_table

        tmp = run.path / "results.json.tmp"
        tmp.write_text(json.dumps(results, indent=2, default=str))
        os.replace(tmp, run.path / "results.json")
        (run.path / "results.md").write_text(results_table(results))
        plot_rewards(run.path / "reward_curve.png", state.log.rows if state.log else [], results)
        if cfg.log_with:
            state.accelerator.end_training()
    if world()[1] > 1:
        torch.distributed.barrier()
        results = all_gather_objects(results)[0]
    return results


def plot_rewards(path: Path, rows: Sequence[dict[str, Any]], results: dict[str, Any]) -> None:
    """Training reward and success per step, with the test success before and after as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    steps = [r["step"] for r in rows]
    ax.plot(steps, [r["charts/reward_mean"] for r in rows], marker="o", label="train reward (rollouts)")
    ax.plot(steps, [r["charts/success_rate"] for r in rows], marker=".", label="train success")
    lines = (("baseline_metrics", ":", "gray", "test success before"), ("metrics", "--", "black", "test success after"))
    for key, style, colour, label in lines:
        m = results.get(key) or {}
        if "success_rate" in m:
            ax.axhline(m["success_rate"], linestyle=style, color=colour, label=f"{label} ({m['success_rate']:.2f})")
    ax.set_xlabel("step")
    ax.set_ylabel("reward / success")
    ax.set_title(f"{results['trainer']} on {results['env_id']} (seed {results['seed']})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
