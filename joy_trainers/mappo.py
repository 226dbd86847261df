"""``mappo``: multi-agent PPO with per-role actors and one centralised critic (the cooperative MARL baseline).

One training step, top to bottom (:meth:`MAPPOTrainer.step`):

1. **Rollouts.** Each task of the batch is played ``group_size`` times with every role sampling at
   ``temperature`` (the actors are the roles' adapters).
2. **Turn rewards.** Agent turn t of an episode earns its own format and efficiency shares
   (``R_F_t - R_E_t`` from the env's per-node breakdown); the last turn also earns ``R_A`` and whatever
   makes the turn rewards sum to the episode's team reward R.
3. **Centralised critic.** V(s_t) reads the *global* state before turn t (:func:`global_states`): the
   user's request, every earlier turn of every agent (``[role] text`` lines) and what each agent received
   before its turn (``[role <-] ...`` lines: tool results, sub-agents' answers, the customer's replies of a
   dialogue), encoded by the shared base model with the adapters switched off (frozen, no extra copy of the
   weights) and a trainable linear value head on the last token's hidden state. Values are learnt normalised
   (running mean / std of the returns).
4. **GAE** over each episode's agent turns (``gamma``, ``gae_lambda``), returns = advantages + values;
   advantages normalised over all acting agents' turns of the step.
5. **PPO.** ``ppo_epochs`` passes: each role's clipped-ratio loss on the tokens of its turns, each turn with
   its own advantage (:func:`joy_trainers.rl.policy_update`), and the clipped value loss
   (:func:`joy_trainers.losses.value_loss`) for the critic.

Same rollout engine, reward module, checkpoints, metrics, evaluation and CLI as the GRPO trainers
(:mod:`joy_trainers.rl`); each checkpoint also holds the critic (value head, its optimiser and the return
statistics).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from joy_agents.rollout import incoming_text
from joy_trainers import rl
from joy_trainers.losses import gae, value_loss
from joy_trainers.presets import SMOL_RL, TINY_MAX_PROMPT_TOKENS
from joy_trainers.ranges import EPOCHS_MAX, Range, learning_rate, positive_int, share, tokens


@dataclass
class MAPPOConfig(rl.RLConfig):
    """The shared RL options (:class:`joy_trainers.rl.RLConfig`; ``group_size`` = episodes per task) and
    these (one line per field)."""

    gamma: float = 1.0
    """Discount over agent turns (episodes are short and the reward is cooperative)."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    ppo_epochs: int = 2
    """Passes over each step's turns."""
    critic_lr: float = 1e-3
    """Learning rate of the value head."""
    value_clip: float | None = 0.2
    """Clipping of the (normalised) value update; None: plain squared error."""
    critic_max_tokens: int = 512
    """The global state keeps its last tokens."""

    RANGES: ClassVar[dict[str, Range]] = {
        **rl.RLConfig.RANGES,
        "gamma": share(),
        "gae_lambda": share(),
        "ppo_epochs": positive_int(EPOCHS_MAX),
        "critic_lr": learning_rate(),
        "value_clip": Range(0, 1e6, low_open=True, none_ok=True),
        "critic_max_tokens": tokens(),
    }


PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {
        "model": "tiny-base",
        "iterations": 1,
        "steps_per_iteration": 12,
        "tasks_per_step": 6,
        "temperature": 1.0,
        "lr": 2e-3,
        "beta": 0.0,
        "max_new_tokens": 96,
        "max_cycles": 10,
        "max_prompt_tokens": TINY_MAX_PROMPT_TOKENS,
        "eval_tasks": 300,
        "checkpoint_every": 3,
    }
}
PRESETS["smol"] = {**SMOL_RL, "iterations": 1, "steps_per_iteration": 10, "beta": 0.0}  # SmolLM2-135M-Instruct


def global_states(trajectory: Any) -> list[str]:
    """The critic's view before each turn, one text per node; the state before the math agent's second turn::

        request: What is 17 * 23?
        [master] <tool_call>{"name": "call_agent", "arguments": {"agent": "math", "query": "17 * 23"}}</tool_call>
        [math <-] 17 * 23
        [math] <tool_call>{"name": "calculator", "arguments": {"expression": "17 * 23"}}</tool_call>
        [math <-] {"result": 391}
        next: math

    For every turn in order, ``[role <-] ...`` holds what the role received since its previous turn
    (:attr:`joy_agents.rollout.Node.incoming`: tool results, sub-agents' answers, a customer's replies, whether
    the env or the team plays the customer), left out when empty or when it repeats the request, then
    ``[role] text``, its own turn. The state before turn t ends with what turn t's role received and
    ``next: <role>``."""
    query = trajectory.nodes[0].memory_key if trajectory.nodes else ""
    lines = [f"request: {query}"]
    out = []
    request = incoming_text([{"role": "user", "content": query}])  # what the first turn received, as a node has it
    for node in trajectory.nodes:
        if node.incoming and node.incoming != request:
            lines.append(f"[{node.role} <-] {node.incoming}")
        out.append("\n".join(lines) + f"\nnext: {node.role}")
        lines.append(f"[{node.role}] {node.text}")
    return out


def turn_rewards(trajectory: Any) -> list[float]:
    """Per-turn rewards whose sum is the episode's team reward R (see the module documentation)."""
    records = [n.breakdown for n in trajectory.nodes]
    rewards = [float(r.get("R_F", 0.0)) - float(r.get("R_E", 0.0)) for r in records]
    if rewards:
        rewards[-1] += trajectory.reward - sum(rewards)
    return rewards


class Critic(torch.nn.Module):
    """V(s): the team's base model with adapters off (frozen) and a trainable linear head."""

    def __init__(self, team: Any, max_tokens: int) -> None:
        super().__init__()
        self.team = [team]  # not a submodule: the base weights stay the team's
        role = team.roles[0]
        hidden = team.model_for(role).get_base_model().config.hidden_size
        self.head = torch.nn.Linear(hidden, 1).to(team.device)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)
        self.max_tokens = max_tokens

    @torch.no_grad()
    def features(self, states: list[str]) -> torch.Tensor:
        """Last-token hidden states of the base model for each state (B, hidden)."""
        team = self.team[0]
        role = team.roles[0]
        tok = team.tokenizer_for(role)
        model = team.model_for(role)
        rows = [tok(s, add_special_tokens=False)["input_ids"][-self.max_tokens :] or [tok.pad_token_id] for s in states]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, width - len(r) :] = torch.tensor(r)
            mask[i, width - len(r) :] = 1
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        with model.disable_adapter():
            out = model.get_base_model().model(
                input_ids=ids.to(team.device), attention_mask=mask.to(team.device), position_ids=pos.to(team.device)
            )
        return out.last_hidden_state[:, -1, :].float()  # left padding: the last column is every row's last token

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.head(features).squeeze(-1)  # (B,) normalised values


class MAPPOTrainer(rl.RLTrainer):
    """Runs ``mappo`` (see the module documentation)."""

    name = "mappo"
    config_class = MAPPOConfig
    presets = PRESETS
    refresh_reference = False  # no KL term: the update uses beta = 0

    def __init__(self, config: MAPPOConfig) -> None:
        super().__init__(config)
        self.value_mean, self.value_var, self.value_count = 0.0, 1.0, 1e-4

    def init_state(self, state: rl.RunState) -> None:
        """The critic on the team's shared base, and its optimiser."""
        if not state.team.config.use_lora:
            raise ValueError("mappo's critic reads the shared base with adapters off; use a LoRA team")
        self.critic = Critic(state.team, self.config.critic_max_tokens)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=self.config.critic_lr)

    def save_extra(self, directory: Path) -> None:
        """``critic.pt``: the value head, its optimiser and the running return statistics (tensors and
        numbers only, loaded without unpickling anything else)."""
        returns = [self.value_mean, self.value_var, self.value_count]
        state = {"head": self.critic.head.state_dict(), "optimizer": self.critic_opt.state_dict(), "returns": returns}
        rl.save_tensors(state, directory / "critic.pt")

    def load_extra(self, directory: Path) -> None:
        if not (directory / "critic.pt").is_file():
            raise rl.CheckpointError(f"{directory.name} lacks critic.pt (the critic of mappo)")
        saved = rl.load_tensors(directory / "critic.pt")
        self.critic.head.load_state_dict(saved["head"])
        self.critic_opt.load_state_dict(saved["optimizer"])
        self.value_mean, self.value_var, self.value_count = (float(x) for x in saved["returns"])

    def _normalise(self, returns: list[float]) -> None:
        """Update the running mean / variance of the returns (parallel-variance formula)."""
        if not returns:
            return
        t = torch.tensor(returns, dtype=torch.float64)
        n, mean, var = float(len(returns)), float(t.mean()), float(t.var(unbiased=False))
        total = self.value_count + n
        delta = mean - self.value_mean
        self.value_mean += delta * n / total
        self.value_var = (self.value_var * self.value_count + var * n + delta**2 * self.value_count * n / total) / total
        self.value_count = total

    def step(self, state: rl.RunState, step: int, tasks: list[int], timer: rl.Timer) -> rl.StepOutput:
        cfg = self.config
        with timer("rollout"):
            groups, trajectories, _ = rl.trajectory_groups(state, tasks, cfg.group_size, cfg.temperature, cfg.top_p)
        with timer("scoring"):
            turns = [(t, i, n) for t in trajectories for i, n in enumerate(t.nodes)]
            feats = self.critic.features([s for t in trajectories for s in global_states(t)]) if turns else None
            std = max(self.value_var, 1e-8) ** 0.5
            with torch.no_grad():
                old_norm = self.critic(feats) if feats is not None else torch.zeros(0)
            values = (old_norm.double() * std + self.value_mean).tolist()
            advantages, returns, k = [], [], 0
            for t in trajectories:
                v = values[k : k + len(t.nodes)]
                adv = gae(turn_rewards(t), v, cfg.gamma, cfg.gae_lambda)
                advantages += adv
                returns += [a + b for a, b in zip(adv, v, strict=True)]
                k += len(t.nodes)
            adv_t = torch.tensor(advantages, dtype=torch.float64)
            if len(advantages) > 1:
                adv_t = (adv_t - adv_t.mean()) / (adv_t.std() + 1e-8)
            self._normalise(returns)
            std = max(self.value_var, 1e-8) ** 0.5
            target = ((torch.tensor(returns, dtype=torch.float64) - self.value_mean) / std).float()
        with timer("update"):
            per_role: dict[str, list[tuple[Any, float]]] = {}
            for (_, _, node), a in zip(turns, adv_t.tolist(), strict=True):
                if node.trainable:
                    per_role.setdefault(node.role, []).append((node, a))
            update = rl.update_config(cfg, beta=0.0)
            stats: dict[str, Any] = {}
            v_losses = []
            for _ in range(cfg.ppo_epochs):
                stats = rl.update_roles(state, per_role, update)
                if feats is not None and len(target):
                    loss = value_loss(self.critic(feats), old_norm, target, cfg.value_clip)
                    self.critic_opt.zero_grad()
                    loss.backward()
                    for p in self.critic.parameters():
                        rl.all_reduce_sum(p.grad)
                        p.grad /= rl.world()[1]
                    self.critic_opt.step()
                    v_losses.append(loss.item())
        metrics = {
            "losses/value_loss": sum(v_losses) / len(v_losses) if v_losses else 0.0,
            "charts/value_mean": self.value_mean,
            "charts/advantage_abs_mean": float(torch.tensor(advantages).abs().mean()) if advantages else 0.0,
        }
        return rl.StepOutput(trajectories=trajectories, groups=groups, update_stats=stats, timer=timer, metrics=metrics)
