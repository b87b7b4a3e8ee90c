"""Opt-in: refuse at enqueue what Meta would refuse at send (`WA_OUTBOX_VALIDATE=meta`).

The check is the simulator's own (wa_outbox/simulator/validation.py over openapi/message-schema.json, shipped inside
the package): Meta's OpenAPI schema, patched where Meta's message reference and mainstream clients disagree with it.
It runs on the body the worker will send (`messaging_product`, `recipient_type` and `to` added), so an app hears
"Param image['link'] is not a valid URI." from enqueue() instead of finding a dead letter a minute later.

Off by default: a schema can lag behind Meta, and then `meta` would refuse a body Meta takes. The schema check needs
jsonschema (the `simulator` extra); `meta` without it is a configuration error at start-up, not at the first send.
The mode is read from the environment at each call, so the HTTP API, the CLI and a Python app's enqueue() all follow
the same variable.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Mapping

from .config import ConfigError

ENV = "WA_OUTBOX_VALIDATE"
MODES = ("off", "meta")


def mode(env: Mapping[str, str] | None = None) -> str:
    """`off` or `meta`; ConfigError for any other value, or for `meta` without jsonschema installed."""
    raw = (os.environ if env is None else env).get(ENV, "").strip().lower() or "off"
    if raw not in MODES:
        raise ConfigError(f"{ENV}={raw!r} is not valid: expected off or meta")
    if raw == "meta":
        _checker()
    return raw


@functools.cache
def _checker():
    try:
        from .simulator.validation import RequestChecker
    except ImportError as exc:
        raise ConfigError(f"{ENV}=meta needs the jsonschema package ({exc.name} is not installed): "
                          "pip install 'wa-outbox[simulator]', or set WA_OUTBOX_VALIDATE=off") from None
    return RequestChecker()


def meta_problem(recipient: str, message: dict[str, Any]) -> str | None:
    """Why Meta would refuse `message` sent to `recipient` (digits), naming the field as Meta does; or None."""
    from .simulator.validation import InvalidRequest
    body = {"messaging_product": "whatsapp", "recipient_type": "individual", "to": f"+{recipient}", **message}
    try:
        _checker().parse(body)
    except InvalidRequest as exc:
        return f"Meta would refuse this message (WA_OUTBOX_VALIDATE=meta): {exc}"
    return None
