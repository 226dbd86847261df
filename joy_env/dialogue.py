"""The customer's side of a dialogue (:class:`~joy_env.spec.Dialogue`): who acts next, the service side's
messages to the customer, the customer's turns and the in-env customer. :class:`~joy_env.env.JoyEnv` holds one
:class:`Conversation` when its spec has a dialogue; the rules are documented in :mod:`joy_env.env`, "Dialogue".

An in-env customer other than the env's own (``Dialogue.policy`` other than ``Dialogue.expert``) runs under a
deadline per turn (``Dialogue.customer_timeout_s``), in one of two ways (``Dialogue.customer_isolation``):

* ``"thread"`` (the default): in a worker thread of the env's process (:func:`call_before`). The customer shares
  the process: what it records is there to read, and anything it raises (``SystemExit`` from ``sys.exit()``
  included) is a customer failure. The deadline holds while the customer runs Python code or waits (I/O,
  ``time.sleep``, a lock); it cannot interrupt a C call that keeps the GIL (a catastrophic regular expression,
  say), and ``os._exit()`` ends the whole process.
* ``"process"``: in a worker process of the env's own (:class:`CustomerProcess`), forked on the first turn (or,
  on a platform without ``fork``, spawned, which needs a customer that ``pickle`` accepts) and killed at the
  deadline, so the deadline always holds; a customer that exits or dies is a customer failure too. The
  customer's state lives in the worker (it carries from turn to turn and episode to episode) and is not seen by
  the env's process; a worker that is killed is forked again, from the customer as the env's process holds it,
  on the next turn. Each turn sends the customer's view to the worker and the answer back (see
  :class:`CustomerProcess`); forking a process that holds CUDA state or busy threads is unsafe,
  so keep such a customer in a thread.
"""

from __future__ import annotations

import multiprocessing
import pickle
import signal
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from joy_env.episode import Episode
from joy_env.protocol import clip, parse_action
from joy_env.spec import Dialogue

__all__ = [
    "Conversation",
    "CustomerFailure",
    "CustomerProcess",
    "action_content",
    "call_before",
    "start_method",
]


class CustomerFailure(Exception):
    """An in-env customer's turn that failed: the customer raised (anything, ``SystemExit`` included), gave no
    answer before the turn's deadline, or its worker process ended; ``str()`` says which, in one line."""


def describe(exc: BaseException) -> str:
    """``repr(exc)``, or its type's name when its ``repr`` fails."""
    try:
        return repr(exc)
    except Exception:  # noqa: BLE001 - a customer's exception may have a broken __repr__
        return type(exc).__name__


def _late(seconds: float) -> CustomerFailure:
    return CustomerFailure(f"no answer within {seconds:g} s (its re-asks included)")


def call_before(fn: Callable[[Any], Any], arg: Any, deadline: float, seconds: float) -> Any:
    """``fn(arg)`` in a worker thread, waited for until ``deadline`` (``time.monotonic()``; ``seconds``: the
    allowance it ends, for the message): its result, or a :class:`CustomerFailure` naming what it raised, or one
    once the deadline passes (the thread, which cannot be stopped, is left to end on its own; it is a daemon).

    Whatever ``fn`` raises is its failure, ``SystemExit`` and ``KeyboardInterrupt`` included: raised in the
    worker thread, they are ``fn``'s own (the user's Ctrl-C reaches the main thread, never the worker)."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise _late(seconds)
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn(arg)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc

    worker = threading.Thread(target=run, name="joy-env-customer", daemon=True)
    worker.start()
    worker.join(left)
    if worker.is_alive():
        raise _late(seconds)
    if "error" in box:
        raise CustomerFailure(describe(box["error"])) from None
    return box["value"]


def start_method() -> str:
    """How :class:`CustomerProcess` starts its worker: ``"fork"`` where the platform has it (the customer is
    inherited as it is, nothing is pickled), else ``"spawn"`` (the customer is pickled to the worker)."""
    return "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"


def check_picklable(customer: Any, method: str) -> None:
    """Nothing under ``fork``; under ``spawn``, a one-line ``ValueError`` when ``pickle`` refuses ``customer``."""
    if method == "fork":
        return
    try:
        pickle.dumps(customer)
    except Exception as exc:  # noqa: BLE001 - any refusal is the same problem
        raise ValueError(
            f"customer_isolation='process' spawns the customer's worker here (no fork on this platform), which "
            f"needs a customer that pickle accepts; {customer!r} is refused ({describe(exc)}); pass a function "
            "defined at module level, or customer_isolation='thread'"
        ) from None


def _serve(customer: Callable[[Any], Any], conn: Any) -> None:
    """The worker process: answers each view it receives with ``("ok", answer)`` or ``("error", description)``,
    until the env's end of the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the user's Ctrl-C is for the env's process, which kills this one
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not a handler inherited from the env's process
    while True:
        try:
            view = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply = ("ok", customer(view))
        except BaseException as exc:  # noqa: BLE001 - every failure goes back as a description
            reply = ("error", describe(exc))
        try:
            conn.send(reply)
        except Exception as exc:  # noqa: BLE001 - an answer that pickle refuses
            conn.send(("error", f"its answer could not be sent back: {describe(exc)}"))


def _stop(process: Any, conn: Any, grace: float = 0.0) -> None:
    if grace > 0:
        process.join(grace)
    if process.is_alive():
        process.kill()
    process.join()
    conn.close()


class CustomerProcess:
    """``customer`` played in a worker process (``customer_isolation="process"``): started on the first
    :meth:`ask`, killed when a turn passes its deadline (the next :meth:`ask` starts another), ended by
    :meth:`close` or when this object is collected.

    A turn costs the round trip of the view and the answer through a pipe; starting the worker costs a fork
    (more for a process holding a large model) or, under ``spawn``, a new interpreter. The figures, beside a
    worker thread's: ``benchmarks/customer_isolation.py`` (docs/results.md)."""

    def __init__(self, customer: Callable[[Any], Any]) -> None:
        self.customer = customer
        self._process: Any = None
        self._conn: Any = None
        self._finalizer: Any = None

    @property
    def pid(self) -> int | None:
        """The worker's process id (``None`` before the first turn or after a kill)."""
        return self._process.pid if self._process is not None else None

    def _start(self) -> None:
        method = start_method()
        check_picklable(self.customer, method)
        context = multiprocessing.get_context(method)
        ours, theirs = context.Pipe()
        process = context.Process(target=_serve, args=(self.customer, theirs), name="joy-env-customer", daemon=True)
        try:
            process.start()
        except Exception as exc:  # noqa: BLE001 - e.g. inside a daemonic process, which may not have children
            ours.close()
            raise RuntimeError(
                f"customer_isolation='process' could not start the customer's worker process ({describe(exc)}); "
                "use customer_isolation='thread'"
            ) from None
        finally:
            theirs.close()
        self._process, self._conn = process, ours
        self._finalizer = weakref.finalize(self, _stop, process, ours)

    def ask(self, view: Any, deadline: float, seconds: float) -> Any:
        """The customer's answer to ``view``, or a :class:`CustomerFailure` naming what it raised, saying that it
        gave no answer before ``deadline`` (``time.monotonic()``; ``seconds``: the allowance, for the message) or
        that its worker ended. The user's Ctrl-C while waiting kills the worker and propagates."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise _late(seconds)
        if self._process is None:
            self._start()
        answered = False
        try:
            self._conn.send(view)
            answered = self._conn.poll(max(0.0, deadline - time.monotonic()))
            reply = self._conn.recv() if answered else None
        except (EOFError, OSError):  # the worker ended: os._exit(), a signal, a crash
            raise self._ended() from None
        except BaseException as exc:  # the user's Ctrl-C, a view or an answer that pickle refuses
            self.close()
            if isinstance(exc, Exception) and answered:  # the answer: the customer's failure
                raise CustomerFailure(f"its answer could not be read back: {describe(exc)}") from None
            raise
        if reply is None:
            self.close()
            raise _late(seconds)
        kind, value = reply
        if kind == "error":
            raise CustomerFailure(value)
        return value

    def _ended(self) -> CustomerFailure:
        process, conn = self._process, self._conn
        self._finalizer.detach()
        self._process = self._conn = self._finalizer = None
        _stop(process, conn, grace=1.0)  # its exit code, unless it hangs on after closing the pipe
        return CustomerFailure(f"its worker process ended without an answer (exit code {process.exitcode})")

    def close(self) -> None:
        """Kill the worker, if any (the next :meth:`ask` starts another)."""
        if self._finalizer is not None:
            self._finalizer()
        self._process = self._conn = self._finalizer = None


def action_content(action: Any, limit: int) -> str:
    """What an agent wrote, as kept in its conversation (cut past ``limit`` characters; a non-string action as
    its repr)."""
    if isinstance(action, str):
        return action if len(action) <= limit else clip(action, 2000)
    return clip(repr(action), 200)


class Conversation:
    """The customer's side of one env's dialogues.

    ``run_tool(agent, call, node)`` runs one of the customer's calls (``node``: its turn's record, ``None`` for
    an in-env customer) and returns the tool message; ``schemas(agent)`` gives its tool schemas;
    ``max_chars`` caps what is kept of a turn."""

    def __init__(
        self,
        dialogue: Dialogue,
        run_tool: Callable[[str, dict[str, Any], dict[str, Any] | None], dict[str, Any]],
        schemas: Callable[[str], list[dict[str, Any]]],
        max_chars: int,
    ) -> None:
        self.dialogue = dialogue
        self.customer = dialogue.agent
        self._run_tool = run_tool
        self._schemas = schemas
        self._max_chars = max_chars
        self._worker: CustomerProcess | None = None

    def start(self, ep: Episode) -> None:
        """The customer's conversation at the start: its instructions, then the service side's greeting."""
        greeting = {"role": "user", "content": self.dialogue.greeting}
        ep.contexts[self.customer] = [{"role": "system", "content": self.dialogue.system_prompt(ep.task)}, greeting]
        ep.log.append((self.customer, greeting))

    def next_agent(self, ep: Episode) -> str:
        """Who acts next: the customer when it has something to answer (a message, tool results, a format
        error), else the agent holding the conversation (the top of the stack)."""
        if ep.contexts[self.customer][-1]["role"] != "assistant":
            return self.customer
        return ep.stack[-1].agent

    def to_customer(self, ep: Episode, text: str) -> None:
        """The service side's message to the customer (the ``<answer>`` of the agent holding the conversation):
        an agent stop when it holds ``Dialogue.agent_stop``; else the customer answers (inside the env when
        ``Dialogue.policy`` plays it)."""
        ep.said.append(text)
        ep.events.append({"kind": "message", "role": "assistant", "content": text})
        ep.final_answer = text
        message = {"role": "user", "content": text}
        ep.contexts[self.customer].append(message)
        ep.log.append((self.customer, message))
        if self.dialogue.agent_stop in text:
            ep.termination = "agent_stop"
        elif self.dialogue.policy is not None:
            self.play(ep)

    def customer_turn(self, ep: Episode, action: Any, node: dict[str, Any] | None) -> None:
        """One turn of the customer: tool calls on its own tools, or a message to the agent holding the
        conversation (a user stop when it holds one of ``Dialogue.user_stops``); a malformed turn, or one with both,
        gets a format error, as an agent's does."""
        if node is None:
            ep.turn_id += 1
        messages = ep.contexts[self.customer]
        parsed = parse_action(action)
        said = {"role": "assistant", "content": action_content(action, self._max_chars)}
        messages.append(said)
        ep.log.append((self.customer, said))
        errors = list(parsed.errors)
        if parsed.answer is not None and parsed.calls:
            errors.append("a turn is either tool calls or one <answer>...</answer> message to the agent, not both")
        elif parsed.answer is None and not parsed.calls and not errors:
            errors.append("write tool calls or one <answer>...</answer> message to the agent")
        if errors and node is not None:
            node["format_ok"] = False
            node["errors"].extend(errors)
        if parsed.answer is not None and not parsed.calls:
            if node is not None:
                node["answer"] = True
            ep.customer_streak = 0
            ep.events.append({"kind": "message", "role": "user", "content": parsed.answer})
            if any(stop in parsed.answer for stop in self.dialogue.user_stops):
                ep.termination = "user_stop"
                return
            if ep.request is None:  # the opening message: the master's request
                ep.request = parsed.answer
            frame = ep.stack[-1]
            message = {"role": "user", "content": parsed.answer}
            frame.messages.append(message)
            ep.log.append((frame.agent, message))
            return
        ep.customer_streak += 1
        if parsed.answer is None:
            for call in parsed.calls:
                result = self._run_tool(self.customer, call, node)
                messages.append(result)
                ep.log.append((self.customer, result))
        if errors:
            feedback = {"role": "user", "content": "Format error: " + " | ".join(errors)}
            messages.append(feedback)
            ep.log.append((self.customer, feedback))

    def play(self, ep: Episode) -> None:
        """The in-env customer (``Dialogue.policy``) takes its turns until it sends a message. One that fails,
        or keeps calling tools or writing malformed turns past ``max_customer_turns``, ends the conversation
        prematurely (``customer_error``); so do ``max_errors`` tool errors (``too_many_errors``)."""
        dialogue = self.dialogue
        ep.customer_streak = 0
        deadline = time.monotonic() + dialogue.customer_timeout_s  # the turn's, its re-asks included
        while ep.termination is None:
            if ep.customer_streak >= dialogue.max_customer_turns:
                ep.termination = "customer_error"
                return
            view = {
                "messages": list(ep.contexts[self.customer]),
                "tools": self._schemas(self.customer),
                "task": ep.task,
            }
            try:
                action = self._ask(view, deadline)
            except CustomerFailure as exc:  # a customer's failure ends the conversation, it never crashes the env
                ep.termination = "customer_error"
                failure = {"role": "assistant", "content": clip(f"[the customer failed: {exc}]", 300)}
                ep.log.append((self.customer, failure))
                return
            self.customer_turn(ep, action, None)
            if ep.customer_streak == 0 or ep.termination is not None:
                return
            if ep.errors >= dialogue.max_errors:
                ep.termination = "too_many_errors"
                return

    def _ask(self, view: dict[str, Any], deadline: float) -> Any:
        """The in-env customer's next turn, played as ``Dialogue.customer_isolation`` says (the env's own
        customer, ``Dialogue.expert``, is a plain function called directly)."""
        dialogue = self.dialogue
        if dialogue.policy is dialogue.expert:
            try:
                return dialogue.policy(view)
            except Exception as exc:  # noqa: BLE001 - the user's Ctrl-C still propagates
                raise CustomerFailure(describe(exc)) from None
        if dialogue.customer_isolation == "thread":
            return call_before(dialogue.policy, view, deadline, dialogue.customer_timeout_s)
        if self._worker is None or self._worker.customer is not dialogue.policy:
            self.close()
            self._worker = CustomerProcess(dialogue.policy)
        return self._worker.ask(view, deadline, dialogue.customer_timeout_s)

    def close(self) -> None:
        """End the customer's worker process, if it has one (the env's ``close()`` calls it)."""
        if self._worker is not None:
            self._worker.close()
            self._worker = None
