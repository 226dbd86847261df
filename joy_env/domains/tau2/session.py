"""Tool bodies over a per-call session, as tau2's tools behave: shared by the retail and airline packages
(telecom adds its sync, :mod:`joy_env.domains.tau2.telecom`)."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable
from typing import Any, Protocol

from joy_env.core import ToolContext, ToolError


class Flushable(Protocol):
    def flush(self) -> None: ...


def session_tool(
    make_session: Callable[[sqlite3.Connection], Flushable], domain: str
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator that turns ``body(session, **arguments)`` into a tool ``fn(ctx, **arguments)``: one session
    over ``ctx.db`` per call, its changes written back even when the call fails half-way (tau2's tools change
    its objects in place), and every failure a :class:`~joy_env.core.ToolError` with the message tau2 shows
    (``Error: <message>``)."""

    def wrap(body: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(body)
        def tool(ctx: ToolContext, **arguments: Any) -> Any:
            if ctx.db is None:
                raise ToolError(f"the {domain} database is not available")
            session = make_session(ctx.db)
            try:
                return body(session, **arguments)
            except ToolError:
                raise
            except Exception as exc:  # tau2 turns any exception into "Error: <message>"
                raise ToolError(str(exc)) from None
            finally:
                session.flush()

        return tool

    return wrap
