"""tau2-bench's telecom data read into canonical form: the carrier's records (``db.toml``) and the customer's
phone and surroundings (``user_db.toml``), each as tau2's ``model_dump()`` gives them -- every field present, in
tau2's field order -- in JSON form: dates are ``"YYYY-MM-DD"``, datetimes ``"YYYY-MM-DD HH:MM:SS"`` (``str()`` of
the value, which is what tau2's hash and tool results print), enums their values (see
:mod:`joy_env.domains.tau2.telecom`)."""

from __future__ import annotations

import datetime
import functools
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

DATA_FILES = (
    "db.toml",
    "user_db.toml",
    "tasks.json",
    "split_tasks.json",
    "main_policy.md",
    "main_policy_solo.md",
    "tech_support_manual.md",
)
"""The files of tau2's telecom data directory this domain uses (the policies tau2 reads for its ``manual``
policy type: ``main_policy.md`` with an assisting user, ``main_policy_solo.md`` alone; the technical-support
manual in both modes)."""
SPLITS = ("train", "test", "all", "small", "full")
"""tau2's ``train`` and ``test`` splits, ``all`` (tau2's ``base`` set, 114 tasks), ``small`` (20) and ``full``
(2,285: every generated telecom task)."""

TODAY = datetime.date(2025, 2, 25)
"""tau2's fixed "today" of the telecom domain."""

DEFAULT_CREATED_AT = "2025-01-01"
"""A customer's ``created_at`` when the data leaves it out: tau2's default is a *date* (never validated into a
datetime), so it prints without a time."""

LINE_STATUSES = ("Active", "Suspended", "Pending Activation", "Closed")
BILL_STATUSES = ("Draft", "Issued", "Awaiting Payment", "Paid", "Overdue", "Disputed")
ACCOUNT_STATUSES = ("Active", "Suspended", "Pending Verification", "Closed")
PAYMENT_METHOD_TYPES = ("Credit Card", "Debit Card", "PayPal")
DEVICE_TYPES = ("phone", "router", "tablet", "watch", "other")
SIM_STATUSES = ("active", "missing", "locked_pin", "locked_puk")
NETWORK_TECHNOLOGIES = ("none", "2G", "3G", "4G", "5G")
NETWORK_MODES = ("4g_5g_preferred", "4g_only", "3g_only", "2g_only")
SIGNAL_STRENGTHS = ("none", "poor", "fair", "good", "excellent")
PERFORMANCE_LEVELS = ("unknown", "poor", "fair", "good", "excellent")
NETWORK_STATUSES = ("connected", "searching", "no_service", "emergency_only")
APN_NAMES = ("internet", "broken")
PERMISSIONS = ("sms", "storage", "phone", "network")
"""The app permissions tau2 tracks, in its field order."""

DEFAULT_MMSC_URL = "http://mms.carrier.com/mms/wapenc"


class _Reader:
    """Checks and converts one record as tau2's pydantic models validate it: numbers as floats, ISO dates,
    tau2's defaults for the fields left out, unknown fields refused."""

    def __init__(self, raw: Any, what: str, fields: Iterable[str]) -> None:
        if not isinstance(raw, Mapping):
            raise ValueError(f"{what}: expected a table, got {type(raw).__name__}")
        unknown = sorted(set(raw) - set(fields))
        if unknown:
            raise ValueError(f"{what}: unknown field(s) {unknown}")
        self.raw, self.what = raw, what

    def get(self, key: str, default: Any) -> Any:
        if key in self.raw:
            return self.raw[key]
        if default is _REQUIRED:
            raise ValueError(f"{self.what}: missing field {key!r}")
        return default

    def str(self, key: str, default: Any = None, optional: bool = False) -> Any:
        value = self.get(key, _REQUIRED if default is None and not optional else default)
        if value is None and optional:
            return None
        if not isinstance(value, str):
            raise ValueError(f"{self.what}.{key}: expected a string, got {value!r}")
        return plain(value)

    def enum(self, key: str, allowed: tuple[str, ...], default: Any = None) -> str:
        value = self.get(key, _REQUIRED if default is None else default)
        if value not in allowed:
            raise ValueError(f"{self.what}.{key}: {value!r} is not one of {allowed}")
        return plain(value)

    def float(self, key: str, default: Any = None) -> float:
        value = self.get(key, _REQUIRED if default is None else default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{self.what}.{key}: expected a number, got {value!r}")
        return float(value)

    def int(self, key: str, default: Any = None, optional: bool = False) -> Any:
        value = self.get(key, _REQUIRED if default is None and not optional else default)
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{self.what}.{key}: expected an integer, got {value!r}")
        return value

    def bool(self, key: str, default: Any = None) -> bool:
        value = self.get(key, _REQUIRED if default is None else default)
        if not isinstance(value, bool):
            raise ValueError(f"{self.what}.{key}: expected true or false, got {value!r}")
        return value

    def date(self, key: str, optional: bool = False) -> Any:
        value = self.get(key, None if optional else _REQUIRED)
        return None if value is None else date_text(value, f"{self.what}.{key}")

    def datetime(self, key: str, optional: bool = False, default: Any = None) -> Any:
        if optional and key not in self.raw:
            return default
        value = self.get(key, _REQUIRED)
        return None if value is None and optional else datetime_text(value, f"{self.what}.{key}")

    def list(self, key: str, item: Callable[[Any, str], Any]) -> list[Any]:
        value = self.get(key, [])
        if not isinstance(value, list):
            raise ValueError(f"{self.what}.{key}: expected a list, got {value!r}")
        return [item(v, f"{self.what}.{key}[{i}]") for i, v in enumerate(value)]


_REQUIRED = object()


def plain(value: Any) -> Any:
    """``value`` with a string subclass (an enum member of tau2's models) turned into a plain string."""
    return str.__str__(value) if isinstance(value, str) else value


def date_text(value: Any, what: str = "date") -> str:
    """A date as tau2 prints it (``"YYYY-MM-DD"``), from an ISO string or a date."""
    if isinstance(value, datetime.datetime):
        if value.time() != datetime.time(0) or value.tzinfo is not None:
            raise ValueError(f"{what}: {value!r} is not a date")
        return str(value.date())
    if isinstance(value, datetime.date):
        return str(value)
    if isinstance(value, str):
        try:
            return str(datetime.date.fromisoformat(value))
        except ValueError:
            pass
    raise ValueError(f"{what}: expected a date YYYY-MM-DD, got {value!r}")


def datetime_text(value: Any, what: str = "datetime") -> str:
    """A datetime as tau2 prints it (``str()``: ``"YYYY-MM-DD HH:MM:SS"``), from an ISO string or a datetime."""
    if isinstance(value, datetime.datetime):
        return str(value)
    if isinstance(value, datetime.date):
        return str(datetime.datetime(value.year, value.month, value.day))
    if isinstance(value, str):
        try:
            return str(datetime.datetime.fromisoformat(value))
        except ValueError:
            pass
    raise ValueError(f"{what}: expected a datetime YYYY-MM-DDTHH:MM:SS, got {value!r}")


def _strings(raw: Any, what: str) -> str:
    if not isinstance(raw, str):
        raise ValueError(f"{what}: expected a string, got {raw!r}")
    return plain(raw)


def canon_plan(raw: Any, what: str = "plan") -> dict[str, Any]:
    r = _Reader(raw, what, ("plan_id", "name", "data_limit_gb", "price_per_month", "data_refueling_price_per_gb"))
    return {
        "plan_id": r.str("plan_id"),
        "name": r.str("name"),
        "data_limit_gb": r.float("data_limit_gb"),
        "price_per_month": r.float("price_per_month"),
        "data_refueling_price_per_gb": r.float("data_refueling_price_per_gb"),
    }


def _address(raw: Any, what: str) -> dict[str, Any]:
    r = _Reader(raw, what, ("street", "city", "state", "zip_code"))
    return {"street": r.str("street"), "city": r.str("city"), "state": r.str("state"), "zip_code": r.str("zip_code")}


def _payment_method(raw: Any, what: str) -> dict[str, Any]:
    r = _Reader(raw, what, ("method_type", "account_number_last_4", "expiration_date"))
    return {
        "method_type": r.enum("method_type", PAYMENT_METHOD_TYPES),
        "account_number_last_4": r.str("account_number_last_4"),
        "expiration_date": r.str("expiration_date"),
    }


_CUSTOMER_FIELDS = (
    "customer_id",
    "full_name",
    "date_of_birth",
    "email",
    "phone_number",
    "address",
    "account_status",
    "payment_methods",
    "line_ids",
    "bill_ids",
    "created_at",
    "last_extension_date",
    "goodwill_credit_used_this_year",
)


def canon_customer(raw: Any, what: str = "customer") -> dict[str, Any]:
    r = _Reader(raw, what, _CUSTOMER_FIELDS)
    return {
        "customer_id": r.str("customer_id"),
        "full_name": r.str("full_name"),
        "date_of_birth": r.str("date_of_birth"),
        "email": r.str("email"),
        "phone_number": r.str("phone_number"),
        "address": _address(r.get("address", _REQUIRED), f"{what}.address"),
        "account_status": r.enum("account_status", ACCOUNT_STATUSES, "Pending Verification"),
        "payment_methods": r.list("payment_methods", _payment_method),
        "line_ids": r.list("line_ids", _strings),
        "bill_ids": r.list("bill_ids", _strings),
        "created_at": r.datetime("created_at", optional=True, default=DEFAULT_CREATED_AT),
        "last_extension_date": r.date("last_extension_date", optional=True),
        "goodwill_credit_used_this_year": r.float("goodwill_credit_used_this_year", 0.0),
    }


_LINE_FIELDS = (
    "line_id",
    "phone_number",
    "status",
    "plan_id",
    "device_id",
    "data_used_gb",
    "data_refueling_gb",
    "roaming_enabled",
    "contract_end_date",
    "last_plan_change_date",
    "last_sim_replacement_date",
    "suspension_start_date",
)


def canon_line(raw: Any, what: str = "line") -> dict[str, Any]:
    r = _Reader(raw, what, _LINE_FIELDS)
    return {
        "line_id": r.str("line_id"),
        "phone_number": r.str("phone_number"),
        "status": r.enum("status", LINE_STATUSES, "Pending Activation"),
        "plan_id": r.str("plan_id"),
        "device_id": r.str("device_id", optional=True),
        "data_used_gb": r.float("data_used_gb", 0.0),
        "data_refueling_gb": r.float("data_refueling_gb", 0.0),
        "roaming_enabled": r.bool("roaming_enabled", False),
        "contract_end_date": r.date("contract_end_date", optional=True),
        "last_plan_change_date": r.date("last_plan_change_date", optional=True),
        "last_sim_replacement_date": r.date("last_sim_replacement_date", optional=True),
        "suspension_start_date": r.date("suspension_start_date", optional=True),
    }


def _line_item(raw: Any, what: str) -> dict[str, Any]:
    r = _Reader(raw, what, ("description", "amount", "date", "item_type"))
    return {
        "description": r.str("description"),
        "amount": r.float("amount"),
        "date": r.date("date"),
        "item_type": r.str("item_type"),
    }


_BILL_FIELDS = (
    "bill_id",
    "customer_id",
    "period_start",
    "period_end",
    "issue_date",
    "total_due",
    "due_date",
    "line_items",
    "status",
)


def canon_bill(raw: Any, what: str = "bill") -> dict[str, Any]:
    r = _Reader(raw, what, _BILL_FIELDS)
    return {
        "bill_id": r.str("bill_id"),
        "customer_id": r.str("customer_id"),
        "period_start": r.date("period_start"),
        "period_end": r.date("period_end"),
        "issue_date": r.date("issue_date"),
        "total_due": r.float("total_due"),
        "due_date": r.date("due_date"),
        "line_items": r.list("line_items", _line_item),
        "status": r.enum("status", BILL_STATUSES, "Draft"),
    }


_DEVICE_FIELDS = (
    "device_id",
    "device_type",
    "model",
    "imei",
    "is_esim_capable",
    "activated",
    "activation_date",
    "last_esim_transfer_date",
)


def canon_device(raw: Any, what: str = "device") -> dict[str, Any]:
    r = _Reader(raw, what, _DEVICE_FIELDS)
    return {
        "device_id": r.str("device_id"),
        "device_type": r.enum("device_type", DEVICE_TYPES),
        "model": r.str("model"),
        "imei": r.str("imei", optional=True),
        "is_esim_capable": r.bool("is_esim_capable"),
        "activated": r.bool("activated", False),
        "activation_date": r.datetime("activation_date", optional=True),
        "last_esim_transfer_date": r.datetime("last_esim_transfer_date", optional=True),
    }


AGENT_TABLES: tuple[tuple[str, Callable[[Any, str], dict[str, Any]]], ...] = (
    ("plans", canon_plan),
    ("customers", canon_customer),
    ("lines", canon_line),
    ("bills", canon_bill),
    ("devices", canon_device),
)
"""The carrier's lists in tau2's field order, each with the function that puts one record in canonical form."""


def canon_agent_db(raw: Any) -> dict[str, list[dict[str, Any]]]:
    """The carrier's database (``db.toml`` content, or a dump) in canonical form."""
    r = _Reader(raw, "telecom db", [name for name, _ in AGENT_TABLES])
    return {name: r.list(name, canon) for name, canon in AGENT_TABLES}


def canon_apn(raw: Any, what: str = "apn_settings") -> dict[str, Any]:
    """APN settings in canonical form; a missing field takes tau2's default."""
    r = _Reader(raw, what, ("apn_name", "reset_at_reboot", "mms_apn", "mmsc_url", "mms_proxy", "mms_port"))
    return {
        "apn_name": r.enum("apn_name", APN_NAMES, "internet"),
        "reset_at_reboot": r.bool("reset_at_reboot", False),
        "mms_apn": r.str("mms_apn", "mms", optional=True),
        "mmsc_url": r.str("mmsc_url", DEFAULT_MMSC_URL, optional=True),
        "mms_proxy": r.str("mms_proxy", None, optional=True),
        "mms_port": r.int("mms_port", None, optional=True),
    }


def _vpn_details(raw: Any, what: str) -> Any:
    if raw is None:
        return None
    r = _Reader(raw, what, ("server_address", "protocol", "server_performance"))
    return {
        "server_address": r.str("server_address", None, optional=True),
        "protocol": r.str("protocol", None, optional=True),
        "server_performance": r.enum("server_performance", PERFORMANCE_LEVELS, "unknown"),
    }


def _app_status(raw: Any, what: str) -> dict[str, Any]:
    r = _Reader(raw, what, ("app_name", "permissions"))
    p = _Reader(r.get("permissions", {}), f"{what}.permissions", PERMISSIONS)
    return {"app_name": r.str("app_name"), "permissions": {k: p.bool(k, False) for k in PERMISSIONS}}


def default_apps() -> dict[str, Any]:
    """tau2's default installed apps."""
    return {
        "messaging": {"app_name": "messaging", "permissions": dict(sms=True, storage=True, phone=True, network=False)},
        "browser": {"app_name": "browser", "permissions": dict(sms=False, storage=True, phone=False, network=True)},
    }


_PHONE_FIELDS = (
    "sim_card_status",
    "sim_card_missing",
    "airplane_mode",
    "network_signal_strength",
    "network_technology_connected",
    "network_connection_status",
    "battery_level",
    "data_enabled",
    "roaming_enabled",
    "network_mode_preference",
    "active_apn_settings",
    "wifi_enabled",
    "wifi_connected",
    "wifi_ssid",
    "wifi_signal_strength",
    "wifi_calling_enabled",
    "wifi_calling_mms_over_wifi",
    "data_saver_mode",
    "vpn_enabled_setting",
    "vpn_connected",
    "vpn_details",
    "app_statuses",
)


def canon_phone(raw: Any, what: str = "device") -> dict[str, Any]:
    """The phone's state in canonical form; a missing field takes tau2's default."""
    r = _Reader(raw, what, _PHONE_FIELDS)
    apps = r.get("app_statuses", None)
    if apps is None:
        apps_out = default_apps()
    elif isinstance(apps, Mapping):
        apps_out = {plain(k): _app_status(v, f"{what}.app_statuses.{k}") for k, v in apps.items()}
    else:
        raise ValueError(f"{what}.app_statuses: expected a table, got {apps!r}")
    return {
        "sim_card_status": r.enum("sim_card_status", SIM_STATUSES, "active"),
        "sim_card_missing": r.bool("sim_card_missing", False),
        "airplane_mode": r.bool("airplane_mode", False),
        "network_signal_strength": r.enum("network_signal_strength", SIGNAL_STRENGTHS, "good"),
        "network_technology_connected": r.enum("network_technology_connected", NETWORK_TECHNOLOGIES, "5G"),
        "network_connection_status": r.enum("network_connection_status", NETWORK_STATUSES, "connected"),
        "battery_level": r.int("battery_level", 80),
        "data_enabled": r.bool("data_enabled", True),
        "roaming_enabled": r.bool("roaming_enabled", False),
        "network_mode_preference": r.enum("network_mode_preference", NETWORK_MODES, "4g_5g_preferred"),
        "active_apn_settings": canon_apn(r.get("active_apn_settings", {}), f"{what}.active_apn_settings"),
        "wifi_enabled": r.bool("wifi_enabled", False),
        "wifi_connected": r.bool("wifi_connected", False),
        "wifi_ssid": r.str("wifi_ssid", None, optional=True),
        "wifi_signal_strength": r.enum("wifi_signal_strength", SIGNAL_STRENGTHS, "none"),
        "wifi_calling_enabled": r.bool("wifi_calling_enabled", False),
        "wifi_calling_mms_over_wifi": r.bool("wifi_calling_mms_over_wifi", False),
        "data_saver_mode": r.bool("data_saver_mode", False),
        "vpn_enabled_setting": r.bool("vpn_enabled_setting", False),
        "vpn_connected": r.bool("vpn_connected", False),
        "vpn_details": _vpn_details(r.get("vpn_details", None), f"{what}.vpn_details"),
        "app_statuses": apps_out,
    }


def _payment_request(raw: Any, what: str) -> Any:
    if raw is None:
        return None
    r = _Reader(raw, what, ("bill_id", "amount_due", "paid"))
    return {"bill_id": r.str("bill_id"), "amount_due": r.float("amount_due"), "paid": r.bool("paid", False)}


def default_signal() -> dict[str, str]:
    """tau2's default signal strength per network technology around the customer."""
    return {"2G": "poor", "3G": "fair", "4G": "good", "5G": "excellent"}


_SURROUNDINGS_FIELDS = (
    "name",
    "phone_number",
    "is_abroad",
    "roaming_allowed",
    "signal_strength",
    "mobile_data_usage_exceeded",
    "line_active",
    "payment_request",
)


def canon_surroundings(raw: Any, what: str = "surroundings") -> dict[str, Any]:
    """The customer's surroundings in canonical form; a missing field takes tau2's default."""
    r = _Reader(raw, what, _SURROUNDINGS_FIELDS)
    signal = r.get("signal_strength", None)
    if signal is None:
        signal_out = default_signal()
    elif isinstance(signal, Mapping):
        signal_out = {}
        for tech, strength in signal.items():
            if tech not in NETWORK_TECHNOLOGIES or strength not in SIGNAL_STRENGTHS:
                raise ValueError(f"{what}.signal_strength: bad entry {tech!r}: {strength!r}")
            signal_out[plain(tech)] = plain(strength)
    else:
        raise ValueError(f"{what}.signal_strength: expected a table, got {signal!r}")
    return {
        "name": r.str("name", None, optional=True),
        "phone_number": r.str("phone_number", None, optional=True),
        "is_abroad": r.bool("is_abroad", False),
        "roaming_allowed": r.bool("roaming_allowed", False),
        "signal_strength": signal_out,
        "mobile_data_usage_exceeded": r.bool("mobile_data_usage_exceeded", False),
        "line_active": r.bool("line_active", True),
        "payment_request": _payment_request(r.get("payment_request", None), f"{what}.payment_request"),
    }


def canon_user_db(raw: Any) -> dict[str, Any]:
    """The customer's side (``user_db.toml`` content, or a dump) in canonical form."""
    r = _Reader(raw, "telecom user db", ("device", "surroundings"))
    return {
        "device": canon_phone(r.get("device", {}), "device"),
        "surroundings": canon_surroundings(r.get("surroundings", {}), "surroundings"),
    }


@functools.lru_cache(maxsize=4)
def _load_text(root: str) -> str:
    base = Path(root)
    parts = {}
    for key, name, canon in (("agent", "db.toml", canon_agent_db), ("user", "user_db.toml", canon_user_db)):
        path = base / name
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(
                f"{path}: not readable as TOML ({type(exc).__name__}: {exc}); reinstall the data"
            ) from None
        try:
            parts[key] = canon(raw)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
    return json.dumps(parts)


def load_db(root: Path) -> dict[str, Any]:
    """``{"agent": ..., "user": ...}``: ``root / "db.toml"`` and ``root / "user_db.toml"`` in canonical form
    (tau2's ``TelecomDB.model_dump()`` and ``TelecomUserDB.model_dump()`` in JSON form). The files are read once
    per process; every call returns a fresh copy."""
    return json.loads(_load_text(str(Path(root))))


def read_policy(root: Path, solo: bool = True) -> str:
    """The policy the technical-support agent follows, as tau2 builds it for its ``manual`` policy type: the main
    policy (``main_policy_solo.md`` for an agent that works alone, tau2's solo mode, else ``main_policy.md``) and
    the technical-support manual, in tau2's ``<main_policy>`` / ``<tech_support_policy>`` wrapping."""
    main = (root / ("main_policy_solo.md" if solo else "main_policy.md")).read_text(encoding="utf-8")
    manual = (root / "tech_support_manual.md").read_text(encoding="utf-8")
    return f"<main_policy>\n{main}\n</main_policy>\n<tech_support_policy>\n{manual}\n</tech_support_policy>"
