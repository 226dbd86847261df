"""``joyagents_grpo``: the JoyAgents-R1 method. Node-wise Monte Carlo sampling, GRPO on node groups,
marginal-benefit top-K selection, and reward-driven memory evolution.

One training step, top to bottom (:meth:`JoyAgentsGRPOTrainer.step`):

1. **Initial trajectories.** Roll out one trajectory per task of the batch with the current team
   (``initial_temperature``, greedy by default), keeping the env snapshot before every node.
2. **Node-wise sampling.** For each node i (the first ``max_nodes`` of each trajectory, a frozen role's turns
   left out), sample G actions (``group_size``, ``temperature``) from the role that acted there, from the
   prompt it saw (every node's samples, all roles, in the continuous engine's batches); restore the snapshot,
   play each sampled action, and finish the episode with the current team (``continuation_temperature``). The
   G final team rewards are node i's group. Cost: sum_i G continuations per trajectory, linear in the number of
   nodes (joint resampling would cost G^N).
   ``sampling="trajectory"`` replaces this by G whole trajectories per task (the ablation).
   With ``groups_per_step``, steps 1-2 run again on more batches of tasks until that many groups are not flat
   (dynamic sampling, at most ``max_draws`` batches).
3. **Selection.** Rank every group of the step (all processes) by the variance of its rewards (the
   ``advantage_reward`` terms) and keep the top K (``top_k``; ``"all"`` keeps every group that is not flat). A
   flat group (rewards differing by less than ``min_reward_spread``) is never selected. Only roles owning a
   selected group change.
4. **Update.** Advantages ``r - mean`` per group, scaled by ``scale_rewards`` (the group's std by default);
   clipped importance-ratio loss with a k3 KL to the reference policy (``beta``), token aggregation
   ``loss_type``; one optimiser step per role over every selected group it owns.
   ``iterations`` RL iterations of ``steps_per_iteration`` steps; each iteration refreshes the reference.
5. **Memory evolution.** Every sample's R_A + R_F labels memory: fit a normal to the step's values; samples
   at or above the 97.5% point are written to their role's bank, entries retrieved into samples at or below
   the 2.5% point are removed (:mod:`joy_agents.memory`). Retrieved entries are shown in prompts.

The run starts from an SFT team (``sft_run``, or a cached tiny SFT run), evaluates it on the test split
(``baseline_metrics``), trains, evaluates again, and writes ``results.json``, ``results.md``,
``metrics.jsonl``, ``reward_curve.png``, checkpoints (``--resume`` continues) and the final team.
Under ``accelerate launch`` every process rolls out its share of the tasks; selection is global and
gradients are summed across processes, so parameters stay identical on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from joy_agents.memory import MemoryConfig
from joy_agents.rollout import Branch
from joy_agents.sampling.base import make_sampler, sample_many
from joy_trainers import rl
from joy_trainers.presets import SMOL_RL, TINY_MAX_PROMPT_TOKENS
from joy_trainers.ranges import COUNT_MAX, Range, positive, positive_int, share


@dataclass
class JoyAgentsGRPOConfig(rl.RLConfig):
    """Configuration of ``joyagents_grpo``: the shared RL options (:class:`joy_trainers.rl.RLConfig`) and
    these (one line per field)."""

    sampling: str = "node"
    """``node`` (node-wise Monte Carlo) or ``trajectory`` (G whole trajectories per task: the ablation)."""
    initial_temperature: float = 0.0
    """Temperature of the initial trajectories (0: greedy)."""
    continuation_temperature: float = 0.0
    """Temperature of the team finishing each sampled branch (0: greedy)."""
    max_nodes: int = 8
    """Nodes branched per initial trajectory (the first ones; the turns of a frozen role, e.g. a customer the team
    plays without ``train_customer``, are never branched and not counted)."""
    top_k: int | str = 5
    """Groups updated per step, by reward variance (paper: 5); ``"all"`` disables selection."""
    memory: bool = True
    """Adaptive memory evolution on/off."""
    memory_top_n: int = 1
    """Memory entries shown in a prompt."""
    memory_min_similarity: float = 0.6
    """Similarity an entry needs to be retrieved."""
    memory_reuse_similarity: float | None = None
    """If set (e.g. 0.98), a near-identical remembered action is reused without generating."""
    memory_half_life: float = 20.0
    """Steps after which an entry's time-decay term halves."""
    memory_embedder: str = "hash"
    """``hash`` (download-free) or ``st:<sentence-transformers model>``."""

    RANGES: ClassVar[dict[str, Range]] = {
        **rl.RLConfig.RANGES,
        "initial_temperature": Range(0, 100),
        "continuation_temperature": Range(0, 100),
        "max_nodes": positive_int(10**4),
        "top_k": Range(1, COUNT_MAX, integer=True, words=("all",)),
        "memory_top_n": positive_int(1000),
        "memory_min_similarity": share(),
        "memory_reuse_similarity": Range(0, 1, low_open=True, none_ok=True),
        "memory_half_life": positive(1e9),
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.sampling not in ("node", "trajectory"):
            raise ValueError(f"sampling must be 'node' or 'trajectory', got {self.sampling!r}")


TINY_RL = {
    "model": "tiny-base",
    "iterations": 2,
    "steps_per_iteration": 10,
    "tasks_per_step": 8,
    "max_nodes": 4,
    "top_k": 8,
    "temperature": 1.0,  # at 1.2 most samples of the tiny agents are malformed
    "lr": 2e-3,
    "beta": 0.04,
    "memory_min_similarity": 0.9,  # notes of other requests mislead the tiny agents (docs/results.md)
    "max_new_tokens": 96,
    "max_cycles": 10,
    "max_prompt_tokens": TINY_MAX_PROMPT_TOKENS,
    "eval_tasks": 300,
    "checkpoint_every": 5,
}

PRESETS: dict[str, dict[str, Any]] = {"tiny": dict(TINY_RL)}
# SmolLM2-135M-Instruct (joy_trainers.presets.SMOL_RL); memory only above cosine 0.9: at 0.6, 25 of the first 40
# joy/qa-v0 test requests match a train request about another entity (docs/results.md)
PRESETS["smol"] = {**SMOL_RL, "max_nodes": 4, "memory_min_similarity": 0.9}


MEMORY_OPTIONS = {
    "top_n": "memory_top_n",
    "min_similarity": "memory_min_similarity",
    "reuse_similarity": "memory_reuse_similarity",
    "half_life": "memory_half_life",
    "embedder": "memory_embedder",
}
"""``MemoryConfig`` field -> the option that sets it."""


def memory_config_of(options: dict[str, Any]) -> MemoryConfig:
    """The memory settings of a run's options (a config's fields, or a saved ``results.json`` config: defaults
    for the options it lacks), as training and ``joy-eval`` read the banks."""
    return MemoryConfig(**{field: options[name] for field, name in MEMORY_OPTIONS.items() if name in options})


class JoyAgentsGRPOTrainer(rl.RLTrainer):
    """Runs ``joyagents_grpo`` (see the module documentation)."""

    name = "joyagents_grpo"
    config_class = JoyAgentsGRPOConfig
    presets = PRESETS

    def memory_config(self) -> MemoryConfig | None:
        return memory_config_of(vars(self.config)) if self.config.memory else None

    def step(self, state: rl.RunState, step: int, tasks: list[int], timer: rl.Timer) -> rl.StepOutput:
        cfg = self.config
        with timer("rollout"):  # the step is the memory banks' time (their entries' decay)
            drawn = rl.draw_groups(state, tasks, lambda batch: self.sample_groups(state, batch, step))
        with timer("scoring"):
            selected = rl.select_global(drawn.groups, cfg.top_k, rl.Scoring.of(cfg))
        with timer("update"):
            update_stats = rl.update_selected(state, selected, cfg)
        with timer("memory"):
            memory_stats = rl.evolve_memory(state, drawn.groups, step) if cfg.memory else {}
        return rl.StepOutput(
            trajectories=drawn.trajectories,
            groups=drawn.groups,
            selected=selected,
            continuations=drawn.continuations,
            update_stats=update_stats,
            memory_stats=memory_stats,
            timer=timer,
            metrics={"sampling/draws": drawn.draws},
        )

    def sample_groups(
        self, state: rl.RunState, tasks: list[int], step: int
    ) -> tuple[list[rl.Group], list[Any], list[Any]]:
        """The groups of one batch of ``tasks``: node-wise (:meth:`node_groups`) or, with ``sampling="trajectory"``,
        whole trajectories; the step is the memory banks' time."""
        cfg = self.config
        if cfg.sampling == "node":
            return self.node_groups(state, tasks, memory_time=step)
        return rl.trajectory_groups(state, tasks, cfg.group_size, cfg.temperature, cfg.top_p, memory_time=step)

    # ------------------------------------------------------------------------------ node-wise sampling
    def node_groups(
        self, state: rl.RunState, tasks: list[int], memory_time: int = 0
    ) -> tuple[list[rl.Group], list[Any], list[Any]]:
        """Initial trajectories of ``tasks``, then one group of G branches per node (see step 2); the memory
        banks are read at ``memory_time`` (the step).

        Returns ``(groups, initial trajectories, finished branches)``; ``len(finished)`` is
        ``group_size * (branched nodes)``: linear in the number of nodes."""
        cfg = self.config
        engine = state.engine
        explore = state.settings.sampling(cfg.temperature, cfg.top_p)
        # one sampler for the step's three phases, each request with its phase's settings: the prefixes the
        # initial episodes leave in its cache (every node's prompt) serve the node samples and the continuations
        with make_sampler(state.team, state.settings, explore) as sampler:
            initial = engine.run(tasks, state.sampling(cfg.initial_temperature), sampler, memory_time) if tasks else []
            # the first max_nodes turns of the trained roles: a frozen role's turns (a frozen customer) never branch
            nodes = [n for t in initial for n in [n for n in t.nodes if n.role not in state.frozen][: cfg.max_nodes]]
            # the G samples of every node, all roles in the same decode batches
            samples = sample_many(
                state.team, [(n.role, n.prompt_ids) for n in nodes], explore, cfg.group_size, sampler=sampler
            )
            branches = [
                Branch(n.snapshot, s, n.memory_ids) for n, group in zip(nodes, samples, strict=True) for s in group
            ]
            continuation = state.sampling(cfg.continuation_temperature)
            finished = engine.run(branches, continuation, sampler, memory_time) if branches else []
        groups = []
        for k, n in enumerate(nodes):
            trajs = finished[k * cfg.group_size : (k + 1) * cfg.group_size]
            groups.append(
                rl.Group(
                    role=n.role,
                    rewards=[t.reward for t in trajs],
                    samples=list(samples[k]),
                    members=[[t.nodes[0]] for t in trajs],
                    key=n.memory_key,
                    outcomes=[rl.outcome_of(t.nodes[0], t) for t in trajs],
                    accuracy=[float(t.result["R_A"]) for t in trajs],
                    success=[t.success for t in trajs],
                )
            )
        return groups, initial, finished
