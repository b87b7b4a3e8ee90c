"""The admin endpoints under `/_admin/`, JSON in and out, mirroring the Python API of `SimulatorServer`.

They have NO authentication: the simulator is a local development and test tool. Bind it to 127.0.0.1 (the default)
and never expose it.

    GET  /_admin/messages[?to=+5511…&phone_number_id=…]  {"messages": [accepted messages, oldest first]}
    GET  /_admin/faults                                  {"faults": [rules, each with "remaining"]}
    PUT  /_admin/faults      [rules] or {"faults": [rules]}   replaces every rule
    GET  /_admin/config                                  {"config": {…}}
    PUT  /_admin/config      {"key": value, …}           changes only the keys given (POST: the same)
                             many numbers and apps: {"apps": {"APP_ID": {"secret": …}}, "numbers": {"PHONE_NUMBER_ID":
                             {"token": … (null: revoked), "app": "APP_ID", "waba": "WABA_ID"}}}, merged by id
    POST /_admin/inbound     {"from", "text" | "message", "phone_number_id"?, "name"?}  -> {"id": wamid}
                             with a file: {"from", "type", "file": {"base64", "mime_type", "filename"?}, "caption"?}
                             (or multipart, or raw bytes: simulator/media.py)  -> {"id", "media_id", "sha256"}
    POST /_admin/number_update {"field": "phone_number_quality_update" | "account_update", "value": {…},
                             "phone_number_id"?}  -> {"payload": the webhook posted} (quality, tier, throughput,
                             restrictions of a number: issue 20)
    POST /_admin/reset                                   back to the state at start
    GET  /_admin/stats                                   {"requests", "accepted", "outcomes", "webhooks", "uploads"}
    GET  /_admin/templates[?waba=…]                      {"templates": [each with "waba" and "sends" accepted]}
    POST /_admin/templates   {"name", "language", "waba"?, "status"?, "reason"?, "category"?, "quality"?,
                              "correct_category"?, "category_update_timestamp"?, "components"?, "after_sends"?}
                             creates or changes a template (PAUSED: sends draw 132015, DISABLED: 132016) and posts
                             Meta's webhook of the change; "after_sends": N makes the change after N more sends
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from . import media
from .core import Simulator

PREFIX = "/_admin/"
_INBOUND_KEYS = {"from", "text", "message", "phone_number_id", "name"}


def handle(simulator: Simulator, method: str, path: str, query: dict[str, str], raw_body: bytes) -> tuple[int, Any]:
    """(HTTP status, JSON-able answer) for one admin request."""
    name = path[len(PREFIX):].strip("/")
    route = _ROUTES.get((method, name))
    if route is None:
        if any(known == name for _, known in _ROUTES):
            return 405, {"error": f"{method} is not allowed on {path}"}
        return 404, {"error": f"no admin endpoint {path}"}
    try:
        data = json.loads(raw_body) if raw_body.strip() else None
        return 200, route(simulator, query, data)
    except ValueError as exc:  # bad JSON, or a value the simulator refused
        return 400, {"error": str(exc)}


def _messages(simulator: Simulator, query: dict[str, str], data: Any) -> Any:
    messages = simulator.messages(to=query.get("to"), phone_number_id=query.get("phone_number_id"))
    return {"count": len(messages), "messages": messages}


def _get_faults(simulator: Simulator, query: dict[str, str], data: Any) -> Any:
    return {"faults": simulator.faults()}


def _put_faults(simulator: Simulator, query: dict[str, str], data: Any) -> Any:
    rules = data.get("faults") if isinstance(data, dict) else data
    simulator.set_faults(rules if rules is not None else [])
    return {"faults": simulator.faults()}


def _get_config(simulator: Simulator, query: dict[str, str], data: Any) -> Any:
    return {"config": simulator.config.to_dict()}


def _put_config(simulator: Simulator, query: dict[str, str], data: Any) -> Any:
    if not isinstance(data, dict):
        raise ValueError("the body must be a JSON object of config keys")
    return {"config": simulator.configure(data).to_dict()}


def _inbound(simulator: Simulator, query: dict[str, str], data: Any) -> Any:
    if isinstance(data, dict) and "file" in data:  # a message carrying media
        return media.admin_inbound(simulator, data)
    if not isinstance(data, dict) or set(data) - _INBOUND_KEYS:
        raise ValueError(f"the body must be a JSON object with keys among {', '.join(sorted(_INBOUND_KEYS))}")
    wamid = simulator.inbound(str(data.get("from") or ""), data.get("text"),
                              phone_number_id=data.get("phone_number_id"), name=data.get("name"),
                              message=data.get("message"))
    return {"id": wamid}


_NUMBER_UPDATE_KEYS = {"field", "value", "phone_number_id"}


def _number_update(simulator: Simulator, query: dict[str, str], data: Any) -> Any:
    if not isinstance(data, dict) or set(data) - _NUMBER_UPDATE_KEYS or "field" not in data:
        raise ValueError(f"the body must be a JSON object with keys among {', '.join(sorted(_NUMBER_UPDATE_KEYS))}"
                         " (field required)")
    number = data.get("phone_number_id")
    if number is not None and (not isinstance(number, str) or not number.isdigit()):
        raise ValueError("phone_number_id must be a string of digits")
    return {"payload": simulator.number_update(str(data["field"]), data.get("value", {}), phone_number_id=number)}


def _reset(simulator: Simulator, query: dict[str, str], data: Any) -> Any:
    simulator.reset()
    return {"ok": True}


def _stats(simulator: Simulator, query: dict[str, str], data: Any) -> Any:
    return simulator.stats()


def _get_templates(simulator: Simulator, query: dict[str, str], data: Any) -> Any:
    return {"templates": simulator.templates.templates(query.get("waba"))}


def _post_templates(simulator: Simulator, query: dict[str, str], data: Any) -> Any:
    return simulator.change_template(data)


_ROUTES: dict[tuple[str, str], Callable[[Simulator, dict[str, str], Any], Any]] = {
    ("GET", "messages"): _messages,
    ("GET", "faults"): _get_faults,
    ("PUT", "faults"): _put_faults,
    ("GET", "config"): _get_config,
    ("PUT", "config"): _put_config,
    ("POST", "config"): _put_config,
    ("POST", "inbound"): _inbound,
    ("POST", "reset"): _reset,
    ("POST", "number_update"): _number_update,
    ("GET", "stats"): _stats,
    ("GET", "templates"): _get_templates,
    ("POST", "templates"): _post_templates,
}
