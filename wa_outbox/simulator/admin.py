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
    POST /_admin/reset                                   back to the state at start
    GET  /_admin/stats                                   {"requests", "accepted", "outcomes", "webhooks"}
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

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
    if not isinstance(data, dict) or set(data) - _INBOUND_KEYS:
        raise ValueError(f"the body must be a JSON object with keys among {', '.join(sorted(_INBOUND_KEYS))}")
    wamid = simulator.inbound(str(data.get("from") or ""), data.get("text"),
                              phone_number_id=data.get("phone_number_id"), name=data.get("name"),
                              message=data.get("message"))
    return {"id": wamid}


def _reset(simulator: Simulator, query: dict[str, str], data: Any) -> Any:
    simulator.reset()
    return {"ok": True}


def _stats(simulator: Simulator, query: dict[str, str], data: Any) -> Any:
    return simulator.stats()


_ROUTES: dict[tuple[str, str], Callable[[Simulator, dict[str, str], Any], Any]] = {
    ("GET", "messages"): _messages,
    ("GET", "faults"): _get_faults,
    ("PUT", "faults"): _put_faults,
    ("GET", "config"): _get_config,
    ("PUT", "config"): _put_config,
    ("POST", "config"): _put_config,
    ("POST", "inbound"): _inbound,
    ("POST", "reset"): _reset,
    ("GET", "stats"): _stats,
}
