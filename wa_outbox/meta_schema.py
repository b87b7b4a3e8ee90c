"""Opt-in: refuse at enqueue what Meta would refuse at send (`WA_OUTBOX_VALIDATE=meta`).

The check is the simulator's own, which lives outside it (wa_outbox/meta_validation.py over
simulator/openapi/message-schema.json, shipped inside the package): Meta's OpenAPI schema, patched where Meta's
message reference and mainstream clients disagree with it. It runs on the body the worker will send
(`messaging_product`, `recipient_type` and `to` added), so an app hears "Param image['link'] is not a valid URI." from
enqueue() instead of finding a dead letter a minute later.

Off by default: a schema can lag behind Meta, and then `meta` would refuse a body Meta takes. The schema check needs
jsonschema (the `simulator` extra); `meta` without it is a configuration error at start-up, not at the first send.
The mode is read from the environment at each call, so the HTTP API, the CLI and a Python app's enqueue() all follow
the same variable. The variable's rule is config.validate_mode's (config never imports this module).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any

from .config import VALIDATE_ENV as ENV, VALIDATE_MODES as MODES, validate_mode

__all__ = ["ENV", "MODES", "mode", "meta_problem"]


def mode(env: Mapping[str, str] | None = None) -> str:
    """`off` or `meta`; ConfigError for any other value, or for `meta` without jsonschema installed."""
    raw = validate_mode(os.environ if env is None else env)
    if raw == "meta":
        _checker()
    return raw


@functools.cache
def _checker() -> Any:
    # jsonschema, an optional dependency: validate_mode said it is installed
    from .meta_validation import RequestChecker  # noqa: PLC0415 - optional dependency
    return RequestChecker()


def as_sent(message: dict[str, Any]) -> dict[str, Any]:
    """The message as the worker sends it, for Meta's schema: an `upload` (wa-outbox's own, not Meta's) goes as the
    media `id` the worker puts in its place (worker/_uploads.py), so its form is judged, not the field's name."""
    from .messages import upload_of  # noqa: PLC0415 - kept beside its one use
    named = upload_of(message)
    if named is None:
        return message
    kind, upload = named
    media = {key: value for key, value in message[kind].items() if key != "upload"}
    return {**message, kind: {**media, "id": str(upload)}}


def meta_problem(recipient: str, message: dict[str, Any]) -> str | None:
    """Why Meta would refuse `message` sent to `recipient` (digits), naming the field as Meta does; or None."""
    from .meta_validation import InvalidRequest  # noqa: PLC0415 - optional dependency (jsonschema)
    body = {"messaging_product": "whatsapp", "recipient_type": "individual", "to": f"+{recipient}",
            **as_sent(message)}
    try:
        _checker().parse(body)
    except InvalidRequest as exc:
        return f"Meta would refuse this message (WA_OUTBOX_VALIDATE=meta): {exc}"
    return None
