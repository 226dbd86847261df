"""The telecom tools (:data:`AGENT_TOOLS` for the carrier's agent, :data:`USER_TOOLS` for the customer's phone)
with their JSON schemas, and the environment functions tasks call by name (:func:`run_env_function`,
:func:`run_env_assertion`, :func:`run_initialization_actions`) (see :mod:`joy_env.domains.tau2.telecom`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from joy_env.core import Task, Tool, ToolContext, ToolError
from joy_env.domains.tau2.telecom import carrier, phone
from joy_env.domains.tau2.telecom.data import APN_NAMES, DEFAULT_MMSC_URL
from joy_env.domains.tau2.telecom.sync import call, sync
from joy_env.domains.tau2.tooling import ToolSpec, boolean, make_tools, number, params, spec, string
from joy_env.schema import validate

ENV_TYPES = ("assistant", "user")
"""The two sides: the carrier's (tau2's ``assistant`` tools) and the customer's phone (``user``)."""


_CUSTOMER_ID = string("customer id, e.g. 'C1001'")
_LINE_ID = string("line id of one of the customer's lines, e.g. 'L1002'")
_LINE_ARGS = {"customer_id": _CUSTOMER_ID, "line_id": _LINE_ID}
_APP_NAME = string("app name as check_installed_apps lists it, e.g. 'messaging'")

_APN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "the new APN settings; a field left out takes its default",
    "properties": {
        "apn_name": {"type": "string", "enum": list(APN_NAMES), "description": "default 'internet'"},
        "reset_at_reboot": boolean("whether the settings reset to the defaults at the next reboot (default false)"),
        "mms_apn": {"type": ["string", "null"], "description": "APN for MMS traffic (default 'mms')"},
        "mmsc_url": {"type": ["string", "null"], "description": f"MMS center URL (default '{DEFAULT_MMSC_URL}')"},
        "mms_proxy": {"type": ["string", "null"], "description": "MMS proxy address (default none)"},
        "mms_port": {"type": ["integer", "null"], "description": "MMS proxy port (default none)"},
    },
    "required": [],
}


@dataclass(frozen=True)
class EnvFunction:
    """A function of one side that tasks may call by name: its body (taking a session) and argument schema."""

    body: Callable[..., Any]
    parameters: Mapping[str, Any]


AGENT_SPECS: tuple[ToolSpec, ...] = (
    spec(
        carrier.get_customer_by_phone,
        params(phone_number=string("phone number, e.g. '555-123-2002'")),
        "Find the customer whose contact number, or the number of one of whose lines, is this phone number. "
        "Returns the customer: id, name, date of birth, contact details, account status, payment methods, "
        "line ids and bill ids.",
    ),
    spec(carrier.get_customer_by_id, params(customer_id=_CUSTOMER_ID), "The customer with this id (as above)."),
    spec(
        carrier.get_customer_by_name,
        params(full_name=string("e.g. 'John Smith'"), dob=string("date of birth, YYYY-MM-DD")),
        "The customers whose full name (any case) and date of birth both match: a list, possibly empty.",
    ),
    spec(
        carrier.get_details_by_id,
        params(id=string("an id such as 'L1002', 'D1001', 'B1002', 'C1001' or 'P1001'")),
        "The record an id names, by its first letter: L line, D device, B bill, C customer, P plan.",
    ),
    spec(
        carrier.suspend_line,
        params(**_LINE_ARGS, reason=string("why the customer wants the line suspended")),
        "Suspend an active line of the customer from today ($5/month holding fee). Returns a message and the line.",
        writes=True,
    ),
    spec(
        carrier.resume_line,
        params(**_LINE_ARGS),
        "Reactivate a suspended (or pending activation) line of the customer. Returns a message and the line.",
        writes=True,
    ),
    spec(
        carrier.get_bills_for_customer,
        params(
            optional=("limit",),
            customer_id=_CUSTOMER_ID,
            limit={"type": "integer", "description": "at most this many bills (default 12)", "default": 12},
        ),
        "The customer's bills, latest issue date first: period, dates, total due, items and status.",
    ),
    spec(
        carrier.send_payment_request,
        params(customer_id=_CUSTOMER_ID, bill_id=string("id of one of the customer's bills, e.g. 'B1002'")),
        "Ask the customer to pay one of their bills (it becomes Awaiting Payment and the request shows on their "
        "phone). Refused while another of their bills awaits payment; it does not check that the bill is unpaid.",
        writes=True,
    ),
    spec(
        carrier.get_data_usage,
        params(**_LINE_ARGS),
        "The line's data use in this billing cycle: GB used, the plan's limit in GB, GB refueled, cycle end date.",
    ),
    spec(
        carrier.enable_roaming,
        params(**_LINE_ARGS),
        "Allow international roaming on the customer's line (the carrier's side; the phone has its own switch).",
        writes=True,
    ),
    spec(
        carrier.disable_roaming,
        params(**_LINE_ARGS),
        "Stop international roaming on the customer's line.",
        writes=True,
    ),
    spec(
        carrier.transfer_to_human_agents,
        params(summary=string("the customer's issue in a few sentences")),
        "Hand the customer over to a human agent; only when they ask for one or the policy and tools cannot "
        "solve their issue.",
    ),
    spec(
        carrier.refuel_data,
        params(**_LINE_ARGS, gb_amount=number("GB of data to add, more than 0")),
        "Add data to the line for this billing cycle, charged at the plan's refuel price per GB on the "
        "customer's next (draft) bill.",
        writes=True,
    ),
)

_NOTHING = params()

USER_SPECS: tuple[ToolSpec, ...] = (
    spec(
        phone.check_status_bar,
        _NOTHING,
        "What the phone's status bar shows: signal, network type, mobile data and data saver, Wi-Fi, VPN, battery "
        "(or airplane mode).",
    ),
    spec(
        phone.check_network_status,
        _NOTHING,
        "The phone's connection details: airplane mode, SIM, cellular connection, signal and network type, mobile "
        "data and data roaming switches, Wi-Fi radio and connection.",
    ),
    spec(phone.check_network_mode_preference, _NOTHING, "The phone's preferred network mode."),
    spec(
        phone.set_network_mode_preference,
        params(mode=string("'4g_5g_preferred', '4g_only', '3g_only' or '2g_only'")),
        "Set the phone's preferred network mode; another value is refused with a message. The phone then "
        "searches the network again.",
        writes=True,
    ),
    spec(
        phone.run_speed_test,
        _NOTHING,
        "Measure the phone's mobile data download speed and say what it is good for (fails without mobile data).",
    ),
    spec(
        phone.toggle_airplane_mode,
        _NOTHING,
        "Switch airplane mode on or off; on, every radio is off and Wi-Fi and VPN disconnect.",
        writes=True,
    ),
    spec(phone.check_sim_status, _NOTHING, "Whether the SIM card is active, missing, or locked by a PIN or PUK."),
    spec(
        phone.reseat_sim_card,
        _NOTHING,
        "Take the SIM card out and put it back; the phone then searches the network again.",
        writes=True,
    ),
    spec(phone.toggle_data, _NOTHING, "Switch mobile data on or off.", writes=True),
    spec(
        phone.toggle_roaming,
        _NOTHING,
        "Switch data roaming on or off on the phone (abroad, mobile data needs it and a line that allows roaming).",
        writes=True,
    ),
    spec(phone.check_data_restriction_status, _NOTHING, "Whether data saver mode is on."),
    spec(phone.toggle_data_saver_mode, _NOTHING, "Switch data saver mode on or off (on, data is slower).", writes=True),
    spec(phone.check_apn_settings, _NOTHING, "The phone's APN name and MMS center URL (for picture messages)."),
    spec(
        phone.set_apn_settings,
        params(apn_settings=_APN_SCHEMA),
        "Replace the phone's APN settings; the phone then searches the network again.",
        writes=True,
    ),
    spec(
        phone.reset_apn_settings,
        _NOTHING,
        "Have the APN settings return to their defaults at the next reboot.",
        writes=True,
    ),
    spec(phone.check_wifi_status, _NOTHING, "Whether Wi-Fi is on, which network it is connected to, its signal."),
    spec(phone.toggle_wifi, _NOTHING, "Switch Wi-Fi on or off (not in airplane mode).", writes=True),
    spec(phone.check_wifi_calling_status, _NOTHING, "Whether Wi-Fi calling is on."),
    spec(phone.toggle_wifi_calling, _NOTHING, "Switch Wi-Fi calling on or off.", writes=True),
    spec(phone.check_vpn_status, _NOTHING, "Whether a VPN is set up or connected, with the connection's details."),
    spec(phone.connect_vpn, _NOTHING, "Connect the phone's VPN.", writes=True),
    spec(phone.disconnect_vpn, _NOTHING, "Disconnect the phone's VPN.", writes=True),
    spec(phone.check_installed_apps, _NOTHING, "The names of the apps on the phone."),
    spec(phone.check_app_status, params(app_name=_APP_NAME), "An app's status: the permissions it has, one a line."),
    spec(phone.check_app_permissions, params(app_name=_APP_NAME), "The permissions an app has, in one sentence."),
    spec(
        phone.grant_app_permission,
        params(app_name=_APP_NAME, permission=string("'sms', 'storage', 'phone' or 'network'")),
        "Give an app a permission.",
        writes=True,
    ),
    spec(phone.can_send_mms, _NOTHING, "Whether the messaging app can send MMS (picture) messages now."),
    spec(
        phone.reboot_device,
        _NOTHING,
        "Restart the phone: a pending APN reset takes effect and the phone searches the network again.",
        writes=True,
    ),
    spec(phone.check_payment_request, _NOTHING, "Whether the carrier has asked for a payment: bill and amount."),
    spec(phone.make_payment, _NOTHING, "Pay the bill of the pending payment request.", writes=True),
)


def _tool_fn(body: Callable[..., Any]) -> Callable[..., Any]:
    def fn(ctx: ToolContext, **arguments: Any) -> Any:
        if ctx.db is None:
            raise ToolError("the telecom database is not available")
        return call(ctx.db, body, arguments)

    fn.__name__ = fn.__qualname__ = body.__name__
    fn.__doc__ = f"Tool ``{body.__name__}``: the body, then the sync; failures as ToolError."
    return fn


AGENT_TOOLS: tuple[Tool, ...] = make_tools(AGENT_SPECS, _tool_fn)
"""The carrier agent's tools (tau2's ``TelecomTools``)."""
USER_TOOLS: tuple[Tool, ...] = make_tools(USER_SPECS, _tool_fn)
"""The customer's phone tools (tau2's ``TelecomUserTools``)."""
WRITE_TOOLS = frozenset(t.name for t in AGENT_TOOLS + USER_TOOLS if t.writes)
"""The tools tau2 marks as writes, on both sides."""

if {t.name for t in AGENT_TOOLS} & {t.name for t in USER_TOOLS}:  # pragma: no cover - tau2's solo mode needs this
    raise RuntimeError("telecom tool names of the carrier and the phone overlap")

_BOOL_STATUS = params(expected_status=boolean("the expected state"))

_AGENT_FUNCTIONS = {
    carrier.get_available_plan_ids: _NOTHING,
    carrier.set_data_usage: params(**_LINE_ARGS, data_used_gb=number("GB used this cycle")),
    carrier.suspend_line_for_overdue_bill: params(
        customer_id=_CUSTOMER_ID,
        line_id=string("line id"),
        new_bill_id=string("id of the overdue bill to create"),
        contract_ended=boolean("whether the line's contract ended last month"),
    ),
    carrier.assert_data_refueling_amount: params(**_LINE_ARGS, expected_amount=number("GB")),
    carrier.assert_line_status: params(**_LINE_ARGS, expected_status=string("e.g. 'Active'")),
    carrier.assert_overdue_bill_exists: params(customer_id=_CUSTOMER_ID, overdue_bill_id=string("bill id")),
    carrier.assert_no_overdue_bill: params(overdue_bill_id=string("bill id")),
}

_USER_FUNCTIONS = {
    phone.set_user_info: params(name=string("the customer's name"), phone_number=string("their line's number")),
    phone.set_user_location: params(abroad=boolean("whether the customer is abroad")),
    phone.turn_airplane_mode_on: _NOTHING,
    phone.turn_airplane_mode_off: _NOTHING,
    phone.unseat_sim_card: _NOTHING,
    phone.lock_sim_card: params(mode=string("'pin' or 'puk'")),
    phone.turn_data_on: _NOTHING,
    phone.turn_data_off: _NOTHING,
    phone.turn_roaming_on: _NOTHING,
    phone.turn_roaming_off: _NOTHING,
    phone.turn_data_saver_mode_on: _NOTHING,
    phone.turn_data_saver_mode_off: _NOTHING,
    phone.break_apn_settings: _NOTHING,
    phone.break_apn_mms_setting: _NOTHING,
    phone.set_wifi_calling: params(
        optional=("mms_over_wifi",),
        enabled=boolean("Wi-Fi calling on or off"),
        mms_over_wifi={"type": ["boolean", "null"], "description": "MMS over Wi-Fi on or off; null: unchanged"},
    ),
    phone.break_vpn: _NOTHING,
    phone.remove_app_permission: params(app_name=_APP_NAME, permission=string("permission name")),
    phone.simulate_network_search: _NOTHING,
    phone.assert_airplane_mode_status: _BOOL_STATUS,
    phone.assert_service_status: params(expected_status=string("e.g. 'connected' or 'no_service'")),
    phone.assert_mobile_data_status: _BOOL_STATUS,
    phone.assert_mobile_roaming_status: _BOOL_STATUS,
    phone.assert_mobile_data_saver_mode_status: _BOOL_STATUS,
    phone.assert_internet_speed: params(
        optional=("expected_desc",),
        expected_speed=number("Mbps at least"),
        expected_desc={"type": ["string", "null"], "description": "e.g. 'excellent'; null: any"},
    ),
    phone.assert_internet_not_excellent: _NOTHING,
    phone.assert_can_send_mms: _BOOL_STATUS,
    phone.assert_mobile_data_usage_exceeded: _BOOL_STATUS,
}


def _functions(
    specs: tuple[ToolSpec, ...], extra: Mapping[Callable[..., Any], dict[str, Any]]
) -> dict[str, EnvFunction]:
    table = {s.body.__name__: EnvFunction(s.body, s.parameters) for s in specs}
    table.update({body.__name__: EnvFunction(body, parameters) for body, parameters in extra.items()})
    return table


ENV_FUNCTIONS: dict[str, dict[str, EnvFunction]] = {
    "assistant": _functions(AGENT_SPECS, _AGENT_FUNCTIONS),
    "user": _functions(USER_SPECS, _USER_FUNCTIONS),
}
"""Every function tasks may call by name, per side: the tools, the scenario set-up functions and the
assertions (tau2's public functions of ``TelecomTools`` and ``TelecomUserTools``)."""


def run_env_function(
    conn: sqlite3.Connection, env_type: str, func_name: str, arguments: Mapping[str, Any], *, then_sync: bool = True
) -> Any:
    """tau2's ``run_env_function_call``: the function ``func_name`` of side ``env_type`` (``"assistant"``: the
    carrier, ``"user"``: the phone) on ``arguments``, then the sync (unless ``then_sync`` is false: a caller that
    knows the state is synced and the function only reads may skip it). Returns its result (a tool's result as
    the tool returns it; ``None``, a text, a bool or a tuple for the others).

    Raises ``ValueError`` for an unknown side or function or arguments its schema refuses (nothing runs), and
    :class:`~joy_env.core.ToolError` with tau2's message when the function (or the sync after it) fails; the
    changes made before a failure are kept, as in tau2.
    """
    if env_type not in ENV_FUNCTIONS:
        raise ValueError(f"Invalid environment type: {env_type!r}; expected 'assistant' or 'user'")
    table = ENV_FUNCTIONS[env_type]
    function = table.get(func_name) if isinstance(func_name, str) else None
    if function is None:
        raise ValueError(
            f"Function {func_name!r} not found in the telecom {env_type} functions; known: {', '.join(sorted(table))}"
        )
    if not isinstance(arguments, Mapping):
        raise ValueError(
            f"{env_type} function {func_name}: arguments must be an object, got {type(arguments).__name__}"
        )
    errors = validate(dict(arguments), function.parameters)
    if errors:
        raise ValueError(f"{env_type} function {func_name}: {'; '.join(errors)}")
    return call(conn, function.body, dict(arguments), then_sync=then_sync)


def run_env_assertion(conn: sqlite3.Connection, assertion: Mapping[str, Any], *, then_sync: bool = True) -> bool:
    """tau2's ``run_env_assertion(..., raise_assertion_error=False)`` on a task's assertion
    (``{"env_type", "func_name", "arguments", "assert_value", "message"}``): whether the function's result
    equals ``assert_value`` (default true). A function that returns something else than a bool is a
    ``ValueError``; failures as in :func:`run_env_function` (``then_sync`` too: the assertion functions only
    read, so on a synced state the sync after them changes nothing)."""
    func_name = assertion["func_name"]
    arguments = assertion.get("arguments") or {}
    result = run_env_function(conn, assertion["env_type"], func_name, arguments, then_sync=then_sync)
    if not isinstance(result, bool):
        raise ValueError(f"Function {func_name} returned {type(result)} instead of bool")
    return result == assertion.get("assert_value", True)


def run_initialization_actions(conn: sqlite3.Connection, actions: Iterable[Mapping[str, Any]]) -> None:
    """A task's ``initial_state.initialization_actions`` (``{"env_type", "func_name", "arguments"}`` each), as
    tau2's ``set_state`` runs them: one by one through :func:`run_env_function`, then a last sync."""
    for action in actions:
        run_env_function(conn, action["env_type"], action["func_name"], action.get("arguments") or {})
    sync(conn)


def prepare_task(conn: sqlite3.Connection, task: Task) -> None:
    """Set ``task``'s starting state on a fresh database: its initialization actions, each then a sync, and a last
    sync, as tau2's ``set_state`` does (:attr:`joy_env.core.Domain.prepare`)."""
    run_initialization_actions(conn, task.meta.get("initialization_actions") or ())


def assertions_hold(conn: sqlite3.Connection, assertions: Sequence[Mapping[str, Any]]) -> bool:
    """Whether every state assertion holds on a final database. tau2 replays the conversation into a fresh
    environment, whose ``set_state`` ends with a sync, then runs each assertion function (which only reads: the
    sync after each is skipped, it would change nothing). An assertion that fails to run (tau2's evaluation would
    stop with its error) does not hold."""
    try:
        sync(conn)
        return all(run_env_assertion(conn, a, then_sync=False) for a in assertions)
    except (ToolError, ValueError):
        return False
