"""JoyEnv: a PettingZoo AEC environment where a team of LLM agents solves tool-calling tasks.

``env = joy_env.make("joy/mixed-v0", split="train", seed=0, max_cycles=30)``

=====================  ===========================================================================
Agents                 ``master``, ``qa``, ``ecommerce``, ``general``, ``math`` (``possible_agents``)
Action space           ``Text(max_length=16000, charset=printable)``: one agent turn, see below
Observation space      ``Dict(observation=Box(int64, (4,)), text=Text(printable))``
Infos (acting agent)   ``messages`` (chat messages), ``tools`` (JSON schemas), ``task_id``, ``domain``,
                       ``turn``; at the end of an episode every agent's info has ``episode`` (breakdown)
Rewards                team reward R = R_A + R_F - R_E at the end of the episode, to every agent that
                       acted (see :mod:`joy_env.rewards`)
Episode end            the master's ``<answer>`` (termination) or ``max_cycles`` agent turns (truncation)
Branching              ``snapshot()`` / ``restore(snap)`` / ``clone()`` capture the whole state,
                       databases included
=====================  ===========================================================================

Turn-taking
-----------
The master starts with the user's query. It calls a sub-agent with the ``call_agent`` tool; control
passes to that sub-agent, which sees a fresh conversation (its system prompt and the sub-query) and
its own tools. Without a ``query`` argument the sub-agent receives the user's request unchanged (a
router forwarding a single-domain request need not copy it). The sub-agent's ``<answer>`` returns to
the master as the result of ``call_agent``.
The master's ``<answer>`` ends the episode. Several tool calls in one turn run in order; a
``call_agent`` among them pauses the rest until the sub-agent answers.

Dialogue
--------
An env whose spec has a :class:`~joy_env.spec.Dialogue` (tau2-bench's interactive protocol) starts with a
*customer*: it reads the service side's greeting and writes the request (``<answer>...</answer>``). The master
receives it and calls a sub-agent, which then holds the conversation: its ``<answer>`` is its message to the
customer (nothing returns to the master), and the customer's reply comes back to it as a user message. The
customer may call its own tools (a telecom customer's phone) between messages. The conversation ends when the
customer's message holds a stop signal (``###STOP###``, ``###TRANSFER###``, ``###OUT-OF-SCOPE###``) or the
service side's holds ``###STOP###``; running out of turns, 10 tool errors or a customer that fails are premature
ends (R_A = 0). The customer is played inside the env (``Dialogue.policy``) or is an agent of the env
(``"customer"`` in ``possible_agents``). A customer played inside runs under a deadline per turn
(``Dialogue.customer_timeout_s``), in a worker thread or, with ``Dialogue.customer_isolation="process"``, in a
worker process killed at the deadline (the one way to stop a customer stuck in a C call that keeps the GIL);
whatever it raises, ``SystemExit`` included, is a customer failure. :mod:`joy_env.dialogue` has the rules;
``infos[...]["episode"]["termination"]`` says how an episode ended.

Action protocol
---------------
Text, Qwen2.5 / Hermes style, optionally after ``<think>...</think>``::

    <tool_call>{"name": "call_agent", "arguments": {"agent": "math", "query": "What is 17 * 23?"}}</tool_call>
    <tool_call>{"name": "call_agent", "arguments": {"agent": "math"}}</tool_call>   (forwards the request)
    <tool_call>{"name": "calculator", "arguments": {"expression": "17 * 23"}}</tool_call>
    <answer>391</answer>

Malformed text, unknown tools or agents and schema-invalid arguments become an error message for that
agent (the same agent acts again) and mark the turn as badly formatted (format penalty). Tool failures
(an unknown order id, a business rule) are tool results with an ``error`` field. Nothing an agent
writes is executed or can crash the environment; echoed text is capped.

Observation
-----------
``observation``: ``[episode turn, this agent's turns, depth (0 master, 1 sub-agent), turns left]``.
``text``: the acting agent's conversation rendered as plain text (printable ASCII, last 16384 chars).
``infos[agent]["messages"]`` holds the same conversation as structured chat messages
(``{"role": "system"|"user"|"assistant"|"tool", "content": ..., "name": tool}``) and
``infos[agent]["tools"]`` the agent's tool schemas, ready for ``tokenizer.apply_chat_template``.

Reward
------
See :mod:`joy_env.rewards`. ``infos[agent]["episode"]`` at the end holds ``R``, ``R_A``, ``R_F``,
``R_E``, ``success``, the accuracy checks, turn and call counts against the gold solution,
``not_scored`` (parts of the task's own evaluation that the env does not score: tau2-bench's
natural-language assertions, which need an LLM judge) and ``nodes``: one record per agent turn with its
format validity, errors, tool calls and its share of R_F and R_E.

Arguments (``joy_env.make``)
----------------------------
``split`` (train | validation | test; disjoint entities), ``seed`` (data seed), ``max_cycles``
(agent turns per episode, default 30), ``reward_config``, ``render_mode`` (None | human | ansi), and
per env id: ``source``/``path``/``categories`` (GSM8K, BFCL and tau2-bench loaders), ``domain``/``protocol``/
``customer``/``customer_isolation``/``customer_timeout_s``/``path`` for ``joy/tau2-v0``.
``reset(seed=..., options=...)`` samples a task with the seed; ``options={"task_index": i}`` or
``{"task_id": "math/test/3"}`` (``"tau2/airline/3"`` for tau2-bench tasks) picks one; an unknown option is an
error.

Seeds
-----
Both seeds are ints >= 0 (Python or numpy integers). The data seed of ``make`` is reduced modulo
``2**63`` (the range of SQLite's integers, where domains store it): ``make(seed=2**70)`` builds the world
of ``make(seed=2**70 % 2**63)``. The episode seed of ``reset`` seeds numpy's generator, which takes ints
of any size, and is used as given. A negative seed (or a bool, a float, a string) raises ``ValueError``
in both: derive a valid one yourself, e.g. ``abs(seed)`` or ``seed % 2**63``.

Call order
----------
``reset()`` starts an episode; ``observe``, ``last``, ``step`` and ``agent_iter`` before the first
``reset()`` raise ``RuntimeError`` saying so. As PettingZoo's AEC loop expects, an agent that is done
(terminated or truncated) is stepped with ``None``, which removes it from ``agents``; any other action for
it is a ``ValueError``. Once every agent is done and removed, ``agent_iter`` stops and ``step`` and
``last`` raise ``RuntimeError`` (``observe`` still shows the final observations): the result is in
``episode_breakdown``, and ``reset()`` starts the next episode.
``close()`` releases the databases (it may be called again); any later ``reset``, ``step``, ``observe``,
``last``, ``agent_iter`` or ``snapshot`` raises ``RuntimeError``; ``make`` a new env instead.

Version history
---------------
* v0: first release. Before the first published results, ``call_agent``'s ``query`` became optional
  (omitted: the user's request is forwarded) and the expert forwards single-domain requests that way;
  the math template "shopping change" no longer fails to generate a task whose total reaches $200 (it is
  paid with $100 bills; every task that generated before is unchanged); a turn with complete tool calls
  and one more opening tag left unclosed is a format error (it was ignored).
  ``RewardConfig.partial_credit`` (default 0: rewards unchanged) blends the mean of the accuracy checks
  into R_A; ``success`` is every check holding, as before. ``RewardConfig`` fields refuse bools (``True``
  was taken as 1).
"""

from __future__ import annotations

import json
import string
from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv

from joy_env import database
from joy_env.checks import FinalState, accuracy_checks
from joy_env.core import Task, Tool, ToolContext, ToolError, check_seed
from joy_env.dialogue import Conversation, action_content
from joy_env.episode import EnvSnapshot, Episode, Frame
from joy_env.protocol import MAX_ACTION_CHARS, clip, parse_action, to_printable
from joy_env.rewards import RewardConfig
from joy_env.schema import validate
from joy_env.scoring import episode_breakdown, start_image
from joy_env.spec import Dialogue, World

TEXT_MAX = 16_384
"""Characters of conversation kept in the text observation (the tail)."""
MAX_RESULT_CHARS = 4_000
"""Tool results longer than this (as JSON) are cut."""
MAX_SUB_ANSWER_CHARS = 2_000
"""A sub-agent's answer is cut to this length before it reaches the master."""

MASTER_PROMPT = (
    "You are the master agent of a team. Read the user's request, decide which sub-agents to call and "
    "in what order, then give the final answer. Sub-agents: qa (shop policies and general knowledge, "
    "with a knowledge base), ecommerce (the shop: products, carts, orders, shipments, coupons), general "
    "(weather, units, currencies, dates, time zones, stocks, flights, dictionary), math (word problems "
    "and arithmetic, with a calculator). Call one with "
    '<tool_call>{"name": "call_agent", "arguments": {"agent": "...", "query": "..."}}</tool_call> '
    "(leave out the query to pass on the user's request as it is) and give the final answer as "
    "<answer>...</answer>."
)

_CALL_AGENT_DESC = "Delegate a sub-task to a sub-agent; returns the sub-agent's answer."


def _json_text(result: Any) -> str:
    """A tool result as JSON text (what the agent sees before the length cap)."""
    try:
        return json.dumps(result, ensure_ascii=True, default=str)
    except (TypeError, ValueError, RecursionError):
        return json.dumps({"error": "tool result could not be encoded"})


def _recorder(schema: Mapping[str, Any]) -> Tool:
    """A tool without implementation (BFCL functions): records the call, replies neutrally."""
    f = schema.get("function", schema)

    def record(ctx: ToolContext, **arguments: Any) -> dict[str, Any]:
        return {"status": "ok", "note": "call recorded"}

    return Tool(
        name=str(f.get("name")),
        description=str(f.get("description", "")),
        parameters=dict(f.get("parameters") or {"type": "object", "properties": {}}),
        fn=record,
    )


class JoyEnv(AECEnv):
    """The JoyAgents team environment (see the module documentation)."""

    metadata = {"name": "joy_v0", "render_modes": ["human", "ansi"], "is_parallelizable": False}

    def __init__(
        self,
        world: World,
        split: str = "train",
        max_cycles: int = 30,
        reward_config: RewardConfig | None = None,
        render_mode: str | None = None,
    ) -> None:
        super().__init__()
        self.world = world
        self.env_id = world.spec.env_id
        self.split = split
        self.max_cycles = max_cycles
        self.reward_config = reward_config or RewardConfig()
        self.render_mode = render_mode
        self.metadata = dict(self.metadata, name=self.env_id.replace("/", "_").replace("-", "_"))
        self.possible_agents = list(world.spec.agents)
        self.agents: list[str] = []
        self._sub_agents = [d.agent for d in world.spec.domains]
        self._dialogue = world.spec.dialogue
        self._customer = self._dialogue.agent if self._dialogue is not None else None
        """The customer of a dialogue (an agent of the env unless its ``Dialogue.policy`` plays it inside)."""
        self._action_spaces = {
            a: spaces.Text(max_length=MAX_ACTION_CHARS, charset=string.printable) for a in self.possible_agents
        }
        self._observation_spaces = {
            a: spaces.Dict(
                {
                    "observation": spaces.Box(low=0, high=10**9, shape=(4,), dtype=np.int64),
                    "text": spaces.Text(max_length=TEXT_MAX, charset=string.printable),
                }
            )
            for a in self.possible_agents
        }
        self._call_agent = Tool(
            name="call_agent",
            description=_CALL_AGENT_DESC,
            parameters={
                "type": "object",
                "properties": {
                    "agent": {
                        "type": "string",
                        "enum": list(self._sub_agents),
                        "description": "sub-agent name",
                    },
                    "query": {
                        "type": "string",
                        "maxLength": 2000,
                        "description": "the sub-task, self-contained (default: the user's request)",
                    },
                },
                "required": ["agent"],
            },
            fn=lambda ctx, **kw: None,
        )
        self._prompts = {"master": world.spec.master_prompt or MASTER_PROMPT}
        self._prompts.update({d.agent: d.system_prompt or f"You are the {d.agent} agent." for d in world.spec.domains})
        self._base_schemas = {"master": [self._call_agent.schema()]}
        self._base_schemas.update({a: [t.schema() for t in tools.values()] for a, tools in world.tools.items()})
        self._customer_tools: dict[str, Tool] = {}
        self._conversation: Conversation | None = None
        if self._dialogue is not None:
            self._conversation = Conversation(self._dialogue, self._run_tool, self._schemas_for, MAX_ACTION_CHARS)
            self._customer_tools = {t.name: t for t in self._dialogue.tools}
            self._base_schemas[self._customer] = [t.schema() for t in self._dialogue.tools]
        self._extra_tools: tuple[str, dict[str, Tool]] = ("", {})
        self._dbs: dict[str, Any] = {a: database.load(img) for a, img in world.images.items()}
        self._db_ref = dict(world.images)  # the image each connection equals while total_changes == mark
        self._db_mark = {a: c.total_changes for a, c in self._dbs.items()}
        self._audits = {d.agent: dict(d.audit) for d in world.spec.domains if d.build_db is not None}
        self._ep: Episode | None = None
        self._closed = False
        self._text_cache: dict[str, tuple[list, int, str]] = {}
        self.np_random = np.random.default_rng(world.seed)

    # ---------------------------------------------------------------- PettingZoo API

    def observation_space(self, agent: str) -> spaces.Space:
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self._action_spaces[agent]

    @property
    def num_tasks(self) -> int:
        """Number of tasks in this env's split."""
        return self.world.tasks.size(self.split)

    def get_task(self, index: int) -> Task:
        """Task ``index`` of this env's split (cached)."""
        key = (self.split, index)
        task = self.world.cache.get(key)
        if task is None:
            task = self.world.tasks.task(self.split, index)
            self.world.cache[key] = task
        return task

    @property
    def task(self) -> Task | None:
        """The task of the current episode."""
        return self._ep.task if self._ep else None

    @property
    def dialogue(self) -> Dialogue | None:
        """How a customer converses with the team in this env (``None``: the request is one message)."""
        return self._dialogue

    @property
    def customer(self) -> str | None:
        """The name of the dialogue's customer (``None`` without a dialogue); an agent of the env only when no
        ``Dialogue.policy`` plays it inside."""
        return self._customer

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self._check_open("reset()")
        if seed is not None:
            self.np_random = np.random.default_rng(check_seed(seed, "reset seed"))
        options = dict(options or {})
        task, index = self._choose_task(options)
        for agent, conn in self._dbs.items():
            start = start_image(self.world, task, agent)  # the pristine image unless the domain prepares tasks
            if self._db_ref[agent] is not start or conn.total_changes != self._db_mark[agent]:
                database.load(start, conn)  # ~0.1 ms for the 1.4 MB shop; cheaper than undoing rows
                self._db_ref[agent] = start
                self._db_mark[agent] = conn.total_changes
        dialogue = self._dialogue
        opening = [] if dialogue is not None else [{"role": "user", "content": task.query}]
        master = Frame("master", [self._system("master"), *opening])
        contexts = {a: [self._system(a)] for a in self._sub_agents}
        contexts["master"] = master.messages
        callers = [*self._sub_agents, *([self._customer] if dialogue is not None else [])]
        self._ep = Episode(
            task=task,
            index=index,
            stack=[master],
            contexts=contexts,
            agent_turns={a: 0 for a in (*self.possible_agents, *callers)},
            executed={a: [] for a in callers},
            attempted={a: [] for a in callers},
        )
        if dialogue is None:
            self._ep.log.append(("master", master.messages[1]))
        else:  # the service side greets the customer, who speaks first
            self._conversation.start(self._ep)
        self.agents = list(self.possible_agents)
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: {} for a in self.agents}
        self.agent_selection = "master"
        self._skip_agent_selection = None
        if dialogue is not None and dialogue.policy is None:
            self.agent_selection = self._customer
        elif dialogue is not None:
            self._conversation.play(self._ep)  # its opening message goes to the master
        self._refresh_info(self.agent_selection)
        if self._ep.termination is not None:  # an in-env customer that stopped or failed before the team acted
            self._finish(truncated=self._ep.termination != "user_stop")

    def observe(self, agent: str) -> dict[str, Any]:
        self._check_running("observe()", after_end=True)
        ep = self._ep
        depth = 0 if agent == "master" else int(bool(ep.stack and ep.stack[-1].agent == agent))
        counters = np.array(
            [ep.turn, ep.agent_turns.get(agent, 0), depth, max(0, self.max_cycles - ep.turn)], dtype=np.int64
        )
        return {"observation": counters, "text": self._text(agent)}

    def last(self, observe: bool = True) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self._check_running("last()")
        return super().last(observe)

    def agent_iter(self, max_iter: int = 2**63) -> Any:
        self._check_running("agent_iter()", after_end=True)
        return super().agent_iter(max_iter)

    def step(self, action: Any) -> None:
        self._check_running("step()")
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            if action is not None:
                raise ValueError(
                    f"agent {agent!r} is done (terminated or truncated); the only valid action for it is None, "
                    f"got {clip(repr(action), 60)}"
                )
            self._was_dead_step(action)
            return
        ep = self._ep
        self._cumulative_rewards[agent] = 0.0
        self._clear_rewards()
        if agent == self._customer:
            self._conversation.customer_turn(ep, action, self._new_node(agent))
        else:
            self._turn(agent, action)
        if self._dialogue is not None:
            done = ep.termination is not None
            if not done and ep.errors >= self._dialogue.max_errors:
                ep.termination, done = "too_many_errors", True
        else:
            done = ep.final_answer is not None
            ep.termination = "agent_stop" if done else None
        if not done and ep.turn >= self.max_cycles:
            ep.termination = "max_steps"
            self._finish(truncated=True)
        elif done:
            self._finish(truncated=ep.termination not in ("agent_stop", "user_stop"))
        else:
            self.agent_selection = self._conversation.next_agent(ep) if self._conversation else ep.stack[-1].agent
            self._refresh_info(self.agent_selection)
        self._accumulate_rewards()
        if self.render_mode == "human":
            self.render()

    def render(self) -> str | None:
        if self._ep is None:
            return None
        agent = self.agent_selection
        text = self._text(agent)[-2000:]
        out = f"--- {self.env_id} | task {self._ep.task.task_id} | turn {self._ep.turn} | {agent} ---\n{text}"
        if self.render_mode == "human":
            print(out)
            return None
        return out

    def close(self) -> None:
        """Release the databases (and an in-env customer's worker process); the env cannot be used afterwards
        (calling ``close`` again is fine)."""
        for conn in self._dbs.values():
            conn.close()
        if self._conversation is not None:
            self._conversation.close()
        self._dbs = {}
        self._closed = True

    def _check_open(self, call: str) -> None:
        if self._closed:
            raise RuntimeError(
                f"{call} on a closed env: close() released its databases; make a new env with "
                f"joy_env.make({self.env_id!r}, ...)"
            )

    def _check_running(self, call: str, after_end: bool = False) -> None:
        """Raise a clear error unless an episode was started (and, unless ``after_end``, some agent is left)."""
        self._check_open(call)
        if self._ep is None:
            raise RuntimeError(f"{call} before reset(): call env.reset() first to start an episode")
        if not after_end and not self.agents:
            raise RuntimeError(
                f"{call} after the episode ended: every agent is done and was removed from env.agents "
                "(the result is in env.episode_breakdown); call env.reset() to start a new episode"
            )

    # ---------------------------------------------------------------- branching

    def snapshot(self) -> EnvSnapshot:
        """Capture the whole state; cheap when the databases did not change since the last capture.

        Database images are only serialised when a tool wrote since the last reset, snapshot or
        restore; otherwise the snapshot shares the image already held.
        """
        self._check_open("snapshot()")
        images = {}
        for agent, conn in self._dbs.items():
            if conn.total_changes != self._db_mark[agent]:
                self._db_ref[agent] = database.image(conn)
                self._db_mark[agent] = conn.total_changes
            images[agent] = self._db_ref[agent]
        pz = (
            list(self.agents),
            dict(self.rewards),
            dict(self._cumulative_rewards),
            dict(self.terminations),
            dict(self.truncations),
            {a: dict(i) for a, i in self.infos.items()},
            self.agent_selection,
            getattr(self, "_skip_agent_selection", None),
        )
        ep = self._ep.copy() if self._ep else None
        return EnvSnapshot(ep, pz, self.np_random.bit_generator.state, images, id(self.world))

    def restore(self, snap: EnvSnapshot) -> None:
        """Return to the state captured by :meth:`snapshot` (of this env or of one made with the
        same env id, seed and options)."""
        self._check_open("restore()")
        if not isinstance(snap, EnvSnapshot):
            raise TypeError(f"restore expects an EnvSnapshot from env.snapshot(), got {type(snap).__name__}")
        if snap.world_id != id(self.world):
            raise ValueError("this snapshot comes from an env with another env id, seed or options")
        for agent, conn in self._dbs.items():
            img = snap.db_images[agent]
            if self._db_ref[agent] is not img or conn.total_changes != self._db_mark[agent]:
                database.load(img, conn)
                self._db_ref[agent] = img
                self._db_mark[agent] = conn.total_changes
        self._ep = snap.episode.copy() if snap.episode else None
        agents, rewards, cum, terms, truncs, infos, selection, skip = snap.pz
        self.agents = list(agents)
        self.rewards = dict(rewards)
        self._cumulative_rewards = dict(cum)
        self.terminations = dict(terms)
        self.truncations = dict(truncs)
        self.infos = {a: dict(i) for a, i in infos.items()}
        self.agent_selection = selection
        self._skip_agent_selection = skip
        self.np_random = np.random.default_rng()
        self.np_random.bit_generator.state = snap.rng

    def clone(self) -> JoyEnv:
        """A new env in the same state (shares the read-only world, owns its databases)."""
        other = JoyEnv(self.world, self.split, self.max_cycles, self.reward_config, self.render_mode)
        other.restore(self.snapshot())
        return other

    def transcript(self) -> list[tuple[str, dict[str, Any]]]:
        """Every message of the episode in order, as ``(agent, message)``: each conversation's request,
        every agent's turns and every tool or sub-agent result, a dialogue's customer messages included
        (``joy-demo`` prints it)."""
        return list(self._ep.log) if self._ep else []

    @property
    def current_frame(self) -> Frame | None:
        """The conversation frame of the acting agent (used by the expert policy)."""
        return self._ep.stack[-1] if self._ep and self._ep.stack else None

    @property
    def invocations(self) -> list[str]:
        """Sub-agents called so far in the episode, in order."""
        return list(self._ep.called) if self._ep else []

    # ---------------------------------------------------------------- internals

    def _choose_task(self, options: dict) -> tuple[Task, int]:
        # "options" is what PettingZoo's conformance test passes (reset(options={"options": 1})): accepted, unused
        unknown = sorted(str(k) for k in set(options) - {"task", "task_id", "task_index", "options"})
        if unknown:
            raise ValueError(f"unknown reset option(s) {unknown}; valid: task, task_id, task_index")
        if "task" in options:
            task = options["task"]
            if not isinstance(task, Task):
                raise TypeError(f"options['task'] must be a joy_env.core.Task, got {type(task).__name__}")
            return task, -1
        if "task_id" in options:
            tid = str(options["task_id"])
            index_of = getattr(self.world.tasks, "index_of", None)  # sources with their own ids (tau2)
            if index_of is not None:
                index = index_of(self.split, tid)
            else:
                parts = tid.rsplit("/", 2)
                if len(parts) != 3 or parts[1] != self.split or not parts[2].isdigit():
                    raise ValueError(
                        f"task_id {tid!r} is not of this env's split; expected '<domain>/{self.split}/<index>'"
                    )
                index = int(parts[2])
        elif "task_index" in options:
            index = options["task_index"]
        else:
            index = int(self.np_random.integers(self.num_tasks))
        if not isinstance(index, (int, np.integer)) or not 0 <= index < self.num_tasks:
            raise ValueError(f"task_index must be an int in [0, {self.num_tasks}), got {index!r}")
        return self.get_task(int(index)), int(index)

    def _system(self, agent: str) -> dict[str, Any]:
        return {"role": "system", "content": self._prompts.get(agent, "")}

    def _tools_for(self, agent: str) -> dict[str, Tool]:
        if agent == self._customer:
            return self._customer_tools
        tools = self.world.tools.get(agent, {})
        extra = self._ep.task.tools.get(agent) if self._ep else None
        if not extra:
            return tools
        if self._extra_tools[0] != self._ep.task.task_id:
            built: dict[str, dict[str, Tool]] = {}
            for a, schemas in self._ep.task.tools.items():
                built[a] = {t.name: t for t in map(_recorder, schemas)}
            self._extra_tools = (self._ep.task.task_id, built)
        return self._extra_tools[1].get(agent, {})

    def _schemas_for(self, agent: str) -> list[dict[str, Any]]:
        extra = self._ep.task.tools.get(agent) if self._ep else None
        if not extra:
            return self._base_schemas.get(agent, [])
        return [t.schema() for t in self._tools_for(agent).values()]

    def _text(self, agent: str) -> str:
        msgs = self._ep.contexts.get(agent) or [self._system(agent)]
        cached = self._text_cache.get(agent)
        start, text = 0, ""
        if cached and cached[0] is msgs and cached[1] <= len(msgs):
            if cached[1] == len(msgs):
                return cached[2]
            start, text = cached[1], cached[2]  # messages are only appended: render the new ones
        parts = [text]
        for m in msgs[start:]:
            head = f"[{m['role']}" + (f" {m['name']}" if m.get("name") else "") + "]"
            parts.append(to_printable(f"{head}\n{m['content']}\n"))
        text = "".join(parts)
        if len(text) > TEXT_MAX:
            text = text[-TEXT_MAX:]
        self._text_cache[agent] = (msgs, len(msgs), text)  # holds the list: its id cannot be reused
        return text

    def _refresh_info(self, agent: str) -> None:
        ep = self._ep
        self.infos[agent] = {
            "messages": list(ep.contexts[agent]),
            "tools": self._schemas_for(agent),
            "task_id": ep.task.task_id,
            "domain": ep.task.domain,
            "turn": ep.turn,
        }

    def _append(self, frame: Frame, message: dict[str, Any]) -> None:
        frame.messages.append(message)
        self._ep.log.append((frame.agent, message))

    def _new_node(self, agent: str) -> dict[str, Any]:
        """The record of an agent's turn (``episode["nodes"]``), counted in the episode's turns."""
        ep = self._ep
        ep.agent_turns[agent] += 1
        ep.turn_id += 1
        node = {
            "agent": agent,
            "turn": ep.turn,
            "format_ok": True,
            "errors": [],
            "calls": 0,
            "tool_errors": 0,
            "answer": False,
        }
        ep.nodes.append(node)
        ep.turn += 1
        return node

    def _turn(self, agent: str, action: Any) -> None:
        ep = self._ep
        frame = ep.stack[-1]
        frame.turns += 1
        node = self._new_node(agent)
        parsed = parse_action(action)
        content = action_content(action, MAX_ACTION_CHARS)
        self._append(frame, {"role": "assistant", "content": content})
        if parsed.errors:
            node["format_ok"] = False
            node["errors"].extend(parsed.errors)
        feedback = None
        if parsed.errors:
            feedback = {"role": "user", "content": "Format error: " + " | ".join(parsed.errors)}
        if parsed.answer is not None:
            node["answer"] = True
            if feedback:
                self._append(frame, feedback)
            if self._conversation is not None:  # the agent holding the conversation speaks to the customer
                self._conversation.to_customer(ep, parsed.answer)
                return
            if agent == "master":
                ep.final_answer = parsed.answer
                ep.events.append({"kind": "message", "role": "assistant", "content": parsed.answer})
                return
            ep.stack.pop()
            master = ep.stack[-1]
            answer = parsed.answer if len(parsed.answer) <= MAX_SUB_ANSWER_CHARS else clip(parsed.answer, 2000)
            master.results.append(self._tool_message("call_agent", {"agent": agent, "answer": answer}))
            self._run_master(master)
            return
        if agent == "master":
            frame.node = len(ep.nodes) - 1
            frame.pending = list(parsed.calls)
            frame.results = []
            if feedback:
                frame.pending.append({"__feedback__": feedback})
            self._run_master(frame)
            return
        for call in parsed.calls:
            self._append(frame, self._run_tool(agent, call, node))
        if feedback:
            self._append(frame, feedback)

    def _run_master(self, frame: Frame) -> None:
        """Run the master's pending calls until one opens a sub-agent frame or none are left."""
        ep = self._ep
        node = ep.nodes[frame.node]
        while frame.pending:
            call = frame.pending.pop(0)
            if "__feedback__" in call:
                frame.results.append(call["__feedback__"])
                continue
            ep.n_calls += 1
            node["calls"] += 1
            if call["name"] != "call_agent":
                self._format_error(
                    node, f"unknown tool {clip(call['name'], 60)!r}; the master's only tool is call_agent"
                )
                frame.results.append(self._tool_message(call["name"], {"error": node["errors"][-1]}))
                continue
            errors = validate(call["arguments"], self._call_agent.parameters)
            if errors:
                self._format_error(node, "call_agent: " + "; ".join(errors))
                frame.results.append(self._tool_message("call_agent", {"error": node["errors"][-1]}))
                continue
            sub = call["arguments"]["agent"]
            query = call["arguments"].get("query", ep.request if ep.request is not None else self.task.query)
            ep.called.append(sub)
            sub_frame = Frame(
                sub, [self._system(sub), {"role": "user", "content": query}], invocation=len(ep.called) - 1
            )
            ep.stack.append(sub_frame)
            ep.contexts[sub] = sub_frame.messages
            ep.log.append((sub, sub_frame.messages[1]))
            return
        for message in frame.results:
            self._append(frame, message)
        frame.results = []

    def _format_error(self, node: dict[str, Any], message: str) -> None:
        node["format_ok"] = False
        node["errors"].append(message)

    def _tool_message(self, name: str, result: Any) -> dict[str, Any]:
        text = _json_text(result)
        if len(text) > MAX_RESULT_CHARS:
            text = text[:MAX_RESULT_CHARS] + f"...[cut {len(text) - MAX_RESULT_CHARS} chars]"
        return {"role": "tool", "name": clip(name, 80), "content": text}

    def _record_call(self, agent: str, call: dict[str, Any], text: str, error: bool) -> None:
        """Keep a call that reached its tool in the episode's events (whole result text, as tau2 shows it)."""
        requestor = "user" if agent == self._customer else "assistant"
        event = {"kind": "tool", "agent": agent, "requestor": requestor, "name": call["name"]}
        event.update(arguments=call["arguments"], content=text, error=error, turn=self._ep.turn_id)
        self._ep.events.append(event)

    def _run_tool(self, agent: str, call: dict[str, Any], node: dict[str, Any] | None) -> dict[str, Any]:
        """Run one call of ``agent`` (``node``: its turn's record; ``None`` for an in-env customer's turn)."""
        ep = self._ep
        node = node if node is not None else {"calls": 0, "tool_errors": 0, "errors": [], "format_ok": True}
        ep.n_calls += agent != self._customer
        node["calls"] += 1
        tools = self._tools_for(agent)
        tool = tools.get(call["name"])
        if tool is None:
            names = ", ".join(sorted(tools)) or "none"
            self._format_error(node, f"unknown tool {clip(call['name'], 60)!r} for agent {agent}; available: {names}")
            return self._tool_message(call["name"], {"error": node["errors"][-1]})
        errors = validate(call["arguments"], tool.parameters)
        if errors:
            self._format_error(node, f"{tool.name}: " + "; ".join(errors))
            return self._tool_message(tool.name, {"error": node["errors"][-1]})
        # the calls that reach a tool, whatever their result: tau2's action check reads these
        ep.attempted.setdefault(agent, []).append({"name": call["name"], "arguments": call["arguments"]})
        owner = self._dialogue.db_agent if agent == self._customer else agent
        ctx = ToolContext(db=self._dbs.get(owner), task=ep.task)
        try:
            result = tool.fn(ctx, **call["arguments"])
        except Exception as exc:  # a refusal, or a tool bug: neither may crash the episode
            node["tool_errors"] += 1
            ep.errors += 1
            message = str(exc) if isinstance(exc, ToolError) else f"internal error in {tool.name}: {type(exc).__name__}"
            self._record_call(agent, call, "Error: " + message, True)
            return self._tool_message(tool.name, {"error": clip(message, 500)})
        self._record_call(agent, call, result if isinstance(result, str) else _json_text(result), False)
        ep.executed.setdefault(agent, []).append({"name": tool.name, "arguments": call["arguments"]})
        return self._tool_message(tool.name, result)

    # ---------------------------------------------------------------- scoring

    def _accuracy(self) -> dict[str, float]:
        """The accuracy checks of the finished episode (:func:`joy_env.checks.accuracy_checks`)."""
        unchanged = {
            agent: self._db_ref[agent] is self.world.images[agent] and conn.total_changes == self._db_mark[agent]
            for agent, conn in self._dbs.items()
        }
        state = FinalState(self.world, self._ep, self._dbs, self._audits, unchanged, self._schemas_for, self._dialogue)
        return accuracy_checks(state)

    def _finish(self, truncated: bool) -> None:
        ep, cfg = self._ep, self.reward_config
        if not truncated and ep.final_answer is None:  # a customer who stops before the service side says a word
            ep.final_answer = ""
        checks = self._accuracy()
        unpaid = (self._customer,) if self._customer is not None else ()
        ep.breakdown = episode_breakdown(ep, cfg, checks, truncated, unpaid)
        total, task = ep.breakdown["R"], ep.task
        acted = {nd["agent"] for nd in ep.nodes}
        for agent in self.agents:
            self.rewards[agent] = total if agent in acted else 0.0
            if truncated:
                self.truncations[agent] = True
            else:
                self.terminations[agent] = True
            self.infos[agent] = {
                "messages": list(ep.contexts.get(agent, [])),
                "tools": self._schemas_for(agent),
                "task_id": task.task_id,
                "domain": task.domain,
                "turn": ep.turn,
                "episode": ep.breakdown,
            }

    @property
    def episode_breakdown(self) -> dict[str, Any] | None:
        """The reward breakdown of the finished episode (``None`` while it runs)."""
        return self._ep.breakdown if self._ep else None
