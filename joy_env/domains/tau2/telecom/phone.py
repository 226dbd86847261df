"""The customer's side, tau2's ``TelecomUserTools`` call by call: the phone's tools, the functions tasks use to
break the phone or place the customer (``set_user_info``, ``break_vpn``, ``turn_airplane_mode_on``...) and the
assertion functions. Each body takes a :class:`~joy_env.domains.tau2.telecom.db.Session` and returns tau2's
text (see :mod:`joy_env.domains.tau2.telecom`)."""

from __future__ import annotations

from typing import Any

from joy_env.core import ToolError
from joy_env.domains.tau2.telecom.data import NETWORK_MODES, NETWORK_STATUSES, PERMISSIONS, canon_apn
from joy_env.domains.tau2.telecom.db import Session

Doc = dict[str, Any]

_SIGNAL_ICONS = {
    "none": "\U0001f4f5 No Signal",
    "poor": "\U0001f4f6\u00b9 Poor",
    "fair": "\U0001f4f6\u00b2 Fair",
    "good": "\U0001f4f6\u00b3 Good",
    "excellent": "\U0001f4f6\u2074 Excellent",
}
_PERFORMANCE_NAMES = {"unknown": "UNKNOWN", "poor": "POOR", "fair": "FAIR", "good": "GOOD", "excellent": "EXCELLENT"}
_MODE_TECH = {"4g_only": "4G", "3g_only": "3G", "2g_only": "2G"}
_SPEED_RANGES = {"2G": (0.1, 0.4), "3G": (1.0, 5.0), "4G": (10.0, 100.0), "5G": (50.0, 500.0), "none": (0.0, 0.0)}
_SIGNAL_FACTORS = {"poor": 0.2, "fair": 0.5, "good": 0.8, "excellent": 1.0, "none": 0.0}
_SPEED_ADVICE = {
    "Very Poor": "Connection is very slow. Basic web browsing might be difficult.",
    "Poor": "Connection is slow. Web browsing may be sluggish, streaming difficult.",
    "Fair": "Connection is okay for web browsing and some standard definition streaming.",
    "Good": "Connection is good for most activities, including HD streaming.",
    "Excellent": "Connection is very fast.",
}
_SIM_TEXTS = {
    "active": "Your SIM card is active and working.",
    "missing": "No SIM card detected in the phone.",
    "locked_pin": "The SIM card is locked with a PIN code.",
    "locked_puk": "The SIM card is locked with a PUK code.",
}
VPN_SERVER = {"server_address": "192.168.1.1", "protocol": "OpenVPN"}
"""The VPN profile tau2 connects to (its performance lives in the ``default_vpn`` row)."""


def on_off(flag: Any) -> str:
    return "ON" if flag else "OFF"


def _yes_no(flag: Any) -> str:
    return "Yes" if flag else "No"


# -- the simulation


def sim_status(d: Doc) -> str:
    return "missing" if d["sim_card_missing"] else d["sim_card_status"]


def _no_service(d: Doc) -> None:
    d["network_connection_status"] = "no_service"
    d["network_technology_connected"] = "none"
    d["network_signal_strength"] = "none"


def network_search(s: Session) -> None:
    """tau2's ``simulate_network_search``: reconnect according to the SIM, the preferred mode, the signal
    around the customer, airplane mode, the APN and whether the line is active."""
    d, around = s.device(), s.surroundings()
    signal = around["signal_strength"]
    if sim_status(d) == "active":
        d["network_connection_status"] = "connected"
        pref = d["network_mode_preference"]
        if pref == "4g_5g_preferred":
            five = signal.get("5G", "none")
            tech, strength = ("4G", signal.get("4G", "none")) if five == "none" else ("5G", five)
        else:
            tech = _MODE_TECH.get(pref, "4G")
            strength = signal.get(tech, "none")
        d["network_technology_connected"] = tech
        d["network_signal_strength"] = strength
    else:
        _no_service(d)
    if d["airplane_mode"] or d["active_apn_settings"]["apn_name"] == "broken" or not around["line_active"]:
        _no_service(d)


def status_bar(s: Session) -> str:
    d = s.device()
    items = []
    if d["airplane_mode"]:
        items.append("\u2708\ufe0f Airplane Mode")
    else:
        items.append(_SIGNAL_ICONS.get(d["network_signal_strength"], _SIGNAL_ICONS["none"]))
        tech = d["network_technology_connected"]
        if tech != "none":
            items.append(tech)
        if d["data_enabled"] and tech != "none":
            items.append("\U0001f4f1 Data Enabled")
            if d["data_saver_mode"]:
                items.append("\U0001f53d Data Saver")
        else:
            items.append("\U0001f4f5 Data Disabled")
    if d["wifi_enabled"] and d["wifi_connected"]:
        items.append(f"\U0001f4e1 Connected to {d['wifi_ssid']}" if d["wifi_ssid"] else "\U0001f4e1 Enabled")
    if d["vpn_connected"]:
        items.append("\U0001f512 VPN Connected")
    items.append(f"\U0001f50b {d['battery_level']}%")
    return " | ".join(items)


def _with_bar(s: Session, text: str) -> str:
    return f"{text}\nStatus Bar: {status_bar(s)}"


def mobile_data_working(s: Session) -> bool:
    d, around = s.device(), s.surroundings()
    if d["airplane_mode"] or d["network_signal_strength"] == "none":
        return False
    if d["network_connection_status"] == "no_service":
        return False
    if around["is_abroad"] and (not d["roaming_enabled"] or not around["roaming_allowed"]):
        return False
    if not d["data_enabled"]:
        return False
    return not around["mobile_data_usage_exceeded"]


def speed_test(s: Session) -> tuple[float | None, str]:
    """``(Mbps, description)``, or ``(None, "No Connection")`` without mobile data (tau2's formula)."""
    if not mobile_data_working(s):
        return None, "No Connection"
    d = s.device()
    vpn = d["vpn_details"]
    factor = 0.1 if d["vpn_connected"] and vpn and vpn["server_performance"] == "poor" else 1.0
    if d["data_saver_mode"]:
        factor *= 0.2
    low, high = _SPEED_RANGES.get(d["network_technology_connected"], (0.0, 0.0))
    signal = _SIGNAL_FACTORS.get(d["network_signal_strength"], 0.0)
    speed = round((low + high) / 2.0 * signal * factor, 2)
    if speed < 1:
        return speed, "Very Poor"
    if speed < 5:
        return speed, "Poor"
    if speed < 25:
        return speed, "Fair"
    if speed < 100:
        return speed, "Good"
    return speed, "Excellent"


def mms_possible(s: Session) -> bool:
    if not mobile_data_working(s):
        return False
    d = s.device()
    if d["network_technology_connected"] == "2G":
        return False
    if d["wifi_calling_enabled"] and d["wifi_calling_mms_over_wifi"]:
        return False
    if d["active_apn_settings"]["mmsc_url"] is None:
        return False
    app = d["app_statuses"].get("messaging")
    return app is not None and bool(app["permissions"]["storage"] and app["permissions"]["sms"])


def _toggle_airplane(s: Session) -> bool:
    d = s.device()
    was_on = d["airplane_mode"]
    d["airplane_mode"] = not was_on
    if was_on:
        d["network_connection_status"] = "searching"
    if not was_on or d["wifi_enabled"]:
        d["wifi_connected"] = False
        d["wifi_ssid"] = None
        d["wifi_signal_strength"] = "none"
    if not was_on and d["vpn_connected"]:
        _disconnect_vpn(s)
    network_search(s)
    return d["airplane_mode"]


def _toggle(s: Session, field: str, search: bool) -> bool:
    d = s.device()
    d[field] = not d[field]
    if search:
        network_search(s)
    return d[field]


def _connect_vpn(s: Session) -> bool | None:
    d = s.device()
    if d["vpn_connected"]:
        return None
    shared = s.part("default_vpn")
    d["vpn_connected"] = True
    d["vpn_details"] = {**VPN_SERVER, "server_performance": shared["server_performance"]}
    shared["in_use"] = True
    return True


def _disconnect_vpn(s: Session) -> bool:
    d = s.device()
    if not d["vpn_connected"]:
        return False
    d["vpn_connected"] = False
    d["vpn_details"] = None
    s.part("default_vpn")["in_use"] = False
    return True


def _vpn_details_text(details: Doc) -> str:
    # tau2 prints the model_dump() dict: Python reprs, the performance as an enum member
    perf = details["server_performance"]
    return (
        f"{{'server_address': {details['server_address']!r}, 'protocol': {details['protocol']!r}, "
        f"'server_performance': <PerformanceLevel.{_PERFORMANCE_NAMES[perf]}: {perf!r}>}}"
    )


def _granted(permissions: Doc) -> list[str]:
    return [name.replace("_", " ").lower() for name in PERMISSIONS if permissions[name]]


# -- the phone's tools


def check_status_bar(s: Session) -> str:
    return f"Status Bar: {status_bar(s)}"


def check_network_status(s: Session) -> str:
    d = s.device()
    lines = [
        f"Airplane Mode: {on_off(d['airplane_mode'])}",
        f"SIM Card Status: {sim_status(d)}",
        f"Cellular Connection: {d['network_connection_status']}",
        f"Cellular Signal: {d['network_signal_strength']}",
        f"Cellular Network Type: {d['network_technology_connected']}",
        f"Mobile Data Enabled: {_yes_no(d['data_enabled'])}",
        f"Data Roaming Enabled: {_yes_no(d['roaming_enabled'])}",
        f"Wi-Fi Radio: {on_off(d['wifi_enabled'])}",
        f"Wi-Fi Connected: {_yes_no(d['wifi_connected'])}",
    ]
    if d["wifi_connected"]:
        lines.append(f"Connected Wi-Fi Network: {d['wifi_ssid']}")
    return "\n".join(lines)


def check_network_mode_preference(s: Session) -> str:
    return f"Network Mode Preference: {s.device()['network_mode_preference']}"


def set_network_mode_preference(s: Session, mode: str) -> str:
    if mode not in NETWORK_MODES:
        options = ", ".join(NETWORK_MODES)
        return _with_bar(s, f"Failed to set network mode: '{mode}' is not a valid option. Please use one of: {options}")
    s.device()["network_mode_preference"] = mode
    network_search(s)
    return _with_bar(s, f"Preferred Network Mode set to: {mode}")


def run_speed_test(s: Session) -> str:
    speed, description = speed_test(s)
    if speed is None:
        return f"Speed test failed: {description or 'Could not determine speed'}."
    return f"Speed Test Result: {speed:.2f} Mbps ({description}). {_SPEED_ADVICE.get(description, '')}"


def toggle_airplane_mode(s: Session) -> str:
    return _with_bar(s, f"Airplane Mode is now {on_off(_toggle_airplane(s))}.")


def check_sim_status(s: Session) -> str:
    status = sim_status(s.device())
    return _SIM_TEXTS.get(status, f"Unknown SIM status: {status}")


def reseat_sim_card(s: Session) -> str:
    s.device()["sim_card_missing"] = False
    network_search(s)
    return _with_bar(s, "SIM card re-seated successfully.")


def toggle_data(s: Session) -> str:
    return _with_bar(s, f"Mobile Data is now {on_off(_toggle(s, 'data_enabled', search=True))}.")


def toggle_roaming(s: Session) -> str:
    return _with_bar(s, f"Data Roaming is now {on_off(_toggle(s, 'roaming_enabled', search=True))}.")


def check_data_restriction_status(s: Session) -> str:
    if s.device()["data_saver_mode"]:
        return "Data Saver mode is ON (limits data usage)."
    return "Data Saver mode is OFF."


def toggle_data_saver_mode(s: Session) -> str:
    return _with_bar(s, f"Data Saver Mode is now {on_off(_toggle(s, 'data_saver_mode', search=False))}.")


def check_apn_settings(s: Session) -> str:
    apn = s.device()["active_apn_settings"]
    return (
        f"Current APN Name: {apn['apn_name'] or 'Not Set'}\n"
        f"MMSC URL (for picture messages): {apn['mmsc_url'] or 'Not Set'}\n"
        "(These are technical settings, usually best left unchanged.)"
    )


def set_apn_settings(s: Session, apn_settings: Doc) -> str:
    try:
        apn = canon_apn(apn_settings)
    except ValueError as exc:  # the schema admits only valid settings; this is a second guard
        raise ToolError(f"invalid APN settings: {exc}") from None
    s.device()["active_apn_settings"] = apn
    network_search(s)
    return _with_bar(s, f"APN settings set to: {apn['apn_name']}")


def reset_apn_settings(s: Session) -> str:
    s.device()["active_apn_settings"]["reset_at_reboot"] = True
    network_search(s)
    return _with_bar(s, "APN settings will reset at reboot.")


def check_wifi_status(s: Session) -> str:
    d = s.device()
    if not d["wifi_enabled"]:
        return "Wi-Fi is turned OFF."
    if d["wifi_connected"]:
        return f"Wi-Fi is ON and connected to '{d['wifi_ssid']}'. Signal strength: {d['wifi_signal_strength']}."
    return "Wi-Fi is ON but not connected to any network."


def toggle_wifi(s: Session) -> str:
    d = s.device()
    if d["airplane_mode"]:
        return _with_bar(s, "Cannot change Wi-Fi settings while Airplane Mode is ON.")
    d["wifi_enabled"] = not d["wifi_enabled"]
    if not d["wifi_enabled"]:
        d["wifi_connected"] = False
        d["wifi_ssid"] = None
        d["wifi_signal_strength"] = "none"
    return _with_bar(s, f"Wi-Fi is now {on_off(d['wifi_enabled'])}.")


def check_wifi_calling_status(s: Session) -> str:
    return f"Wi-Fi Calling is currently turned {on_off(s.device()['wifi_calling_enabled'])}."


def toggle_wifi_calling(s: Session) -> str:
    return _with_bar(s, f"Wi-Fi Calling is now {on_off(_toggle(s, 'wifi_calling_enabled', search=False))}.")


def check_vpn_status(s: Session) -> str:
    d = s.device()
    if d["vpn_connected"]:
        if d["vpn_details"]:
            return f"VPN is ON and connected. Details: {_vpn_details_text(d['vpn_details'])}"
        return "VPN is ON and connected (no specific details available)."
    if d["vpn_enabled_setting"]:
        return "VPN is turned ON in settings, but currently not connected."
    return "VPN is turned OFF."


def connect_vpn(s: Session) -> str:
    if _connect_vpn(s) is None:
        return "VPN already connected."
    return _with_bar(s, "VPN connected successfully.")


def disconnect_vpn(s: Session) -> str:
    done = _disconnect_vpn(s)
    return _with_bar(s, "VPN disconnected successfully." if done else "No active VPN connection to disconnect.")


def check_installed_apps(s: Session) -> str:
    return f"The following apps are installed on the phone: {', '.join(s.device()['app_statuses'])}"


def check_app_status(s: Session, app_name: str) -> str:
    app = s.device()["app_statuses"].get(app_name)
    if app is None:
        return f"App '{app_name}' not found on this phone."
    lines = [f"Status for App: {app_name}"]
    granted = _granted(app["permissions"])
    if granted:
        lines.append(" - Permissions Granted:")
        lines.extend(f"   - {name}" for name in granted)
    else:
        lines.append(" - Permissions: None granted.")
    return "\n".join(lines)


def check_app_permissions(s: Session, app_name: str) -> str:
    app = s.device()["app_statuses"].get(app_name)
    if app is None:
        return f"App '{app_name}' not found on this phone."
    granted = _granted(app["permissions"])
    if not granted:
        return f"App '{app_name}' currently has no permissions granted."
    return f"App '{app_name}' has permission for: {', '.join(granted)}."


def grant_app_permission(s: Session, app_name: str, permission: str) -> str:
    app = s.device()["app_statuses"].get(app_name)
    permission = permission.lower()
    if app is None:
        text = f"Error. App '{app_name}' not found. Cannot grant permission."
    elif permission not in PERMISSIONS:
        text = (
            f"Error. Permission '{permission}' not tracked for app '{app_name}', "
            f"available permissions: {list(PERMISSIONS)}"
        )
    else:
        app["permissions"][permission] = True
        text = f"Success. Permission '{permission}' granted to app '{app_name}'."
    return _with_bar(s, text)


def can_send_mms(s: Session) -> str:
    if mms_possible(s):
        return "Your messaging app can send MMS messages."
    return "Your messaging app cannot send MMS messages."


def reboot_device(s: Session) -> str:
    d = s.device()
    lines = []
    if d["active_apn_settings"]["reset_at_reboot"]:
        lines.append("Resetting APN settings...")
        d["active_apn_settings"] = canon_apn({})
    lines.append("Restarting network services...")
    d["network_connection_status"] = "searching"
    network_search(s)
    return _with_bar(s, "\n".join(lines))


def check_payment_request(s: Session) -> str:
    request = s.surroundings()["payment_request"]
    if request is None:
        return "No payment request has been made."
    return f"You have a payment request for bill {request['bill_id']} of {request['amount_due']} USD."


def make_payment(s: Session) -> str:
    request = s.surroundings()["payment_request"]
    if request is None:
        return "You do not have a payment request."
    request["paid"] = True
    return f"Payment of {request['amount_due']} USD has been made for bill {request['bill_id']}."


# -- scenario set-up (not tools)


def set_user_info(s: Session, name: str, phone_number: str) -> None:
    around = s.surroundings()
    around["name"] = name
    around["phone_number"] = phone_number


def set_user_location(s: Session, abroad: bool) -> None:
    s.surroundings()["is_abroad"] = abroad


def turn_airplane_mode_on(s: Session) -> str:
    if not _toggle_airplane(s):
        _toggle_airplane(s)
    return "Airplane Mode is now ON."


def turn_airplane_mode_off(s: Session) -> str:
    if _toggle_airplane(s):
        _toggle_airplane(s)
    return "Airplane Mode is now OFF."


def unseat_sim_card(s: Session) -> str:
    s.device()["sim_card_missing"] = True
    network_search(s)
    return "SIM card un-seated successfully."


def lock_sim_card(s: Session, mode: str) -> str:
    d = s.device()
    if mode == "pin":
        d["sim_card_status"] = "locked_pin"
    elif mode == "puk":
        d["sim_card_status"] = "locked_puk"
    network_search(s)
    return f"SIM card locked successfully in {mode} mode."


def turn_data_on(s: Session) -> str:
    s.device()["data_enabled"] = True  # no network search, as in tau2
    return "Data connection restored."


def turn_data_off(s: Session) -> str:
    if _toggle(s, "data_enabled", search=True):
        _toggle(s, "data_enabled", search=True)
    return "Data connection broken."


def turn_roaming_on(s: Session) -> str:
    if not _toggle(s, "roaming_enabled", search=True):
        _toggle(s, "roaming_enabled", search=True)
    return "Data Roaming is now ON."


def turn_roaming_off(s: Session) -> str:
    if _toggle(s, "roaming_enabled", search=True):
        _toggle(s, "roaming_enabled", search=True)
    return "Data Roaming is now OFF."


def turn_data_saver_mode_on(s: Session) -> str:
    if not _toggle(s, "data_saver_mode", search=False):
        _toggle(s, "data_saver_mode", search=False)
    return "Data Saver Mode is now ON."


def turn_data_saver_mode_off(s: Session) -> str:
    if _toggle(s, "data_saver_mode", search=False):
        _toggle(s, "data_saver_mode", search=False)
    return "Data Saver Mode is now OFF."


def break_apn_settings(s: Session) -> str:
    s.device()["active_apn_settings"]["apn_name"] = "broken"
    network_search(s)
    return "APN settings broken. Please call reset_apn_settings() to fix."


def break_apn_mms_setting(s: Session) -> str:
    s.device()["active_apn_settings"]["mmsc_url"] = None
    return "APN MMS setting broken. Please call reset_apn_settings() to fix."


def set_wifi_calling(s: Session, enabled: bool, mms_over_wifi: bool | None = None) -> str:
    d = s.device()
    if d["wifi_calling_enabled"] != enabled:
        _toggle(s, "wifi_calling_enabled", search=False)
    text = f"Wi-Fi Calling is now {on_off(enabled)}."
    if mms_over_wifi is not None:
        d["wifi_calling_mms_over_wifi"] = mms_over_wifi
        text += f"\nMMS over Wi-Fi is now {on_off(mms_over_wifi)}."
    return text


def break_vpn(s: Session) -> str:
    connect_vpn(s)
    d = s.device()
    if d["vpn_details"] is None:
        raise ToolError("'NoneType' object has no attribute 'server_performance'")
    d["vpn_details"]["server_performance"] = "poor"
    shared = s.part("default_vpn")
    if shared["in_use"]:  # the phone's profile is the shared one: every later connection is poor too
        shared["server_performance"] = "poor"
    return "VPN connection broken."


def remove_app_permission(s: Session, app_name: str, permission: str) -> tuple[bool, str]:
    app = s.device()["app_statuses"].get(app_name)
    permission = permission.lower()
    if app is None:
        return False, f"App '{app_name}' not found. Cannot remove permission."
    if permission not in PERMISSIONS:
        return False, f"Permission '{permission}' not tracked for app '{app_name}'."
    app["permissions"][permission] = False
    return True, f"Permission '{permission}' removed from app '{app_name}'."


def simulate_network_search(s: Session) -> None:
    network_search(s)


# -- assertions


def assert_airplane_mode_status(s: Session, expected_status: bool) -> bool:
    return s.device()["airplane_mode"] == expected_status


def assert_service_status(s: Session, expected_status: str) -> bool:
    if expected_status not in NETWORK_STATUSES:
        raise ToolError(f"{expected_status!r} is not a valid NetworkStatus")
    return s.device()["network_connection_status"] == expected_status


def assert_mobile_data_status(s: Session, expected_status: bool) -> bool:
    return mobile_data_working(s) == expected_status


def assert_mobile_roaming_status(s: Session, expected_status: bool) -> bool:
    return s.device()["roaming_enabled"] == expected_status


def assert_mobile_data_saver_mode_status(s: Session, expected_status: bool) -> bool:
    return s.device()["data_saver_mode"] == expected_status


def assert_internet_speed(s: Session, expected_speed: float, expected_desc: str | None = None) -> bool:
    speed, description = speed_test(s)
    speed = speed or 0.0
    if expected_desc is None:
        return speed >= expected_speed
    return speed >= expected_speed and description.lower() == expected_desc.lower()


def assert_internet_not_excellent(s: Session) -> bool:
    return speed_test(s)[1].lower() != "excellent"


def assert_can_send_mms(s: Session, expected_status: bool) -> bool:
    return mms_possible(s) == expected_status


def assert_mobile_data_usage_exceeded(s: Session, expected_status: bool) -> bool:
    return s.surroundings()["mobile_data_usage_exceeded"] == expected_status
