"""Validation of what the app asks to send, shared by the HTTP API, the Python `enqueue` and the CLI. Pure.

The SQL function wa_outbox.enqueue() checks the same rules for callers that go straight to SQL; checking here first
gives a clear error before anything touches the caller's transaction.
"""

from __future__ import annotations

import json
import re
from typing import Any

MESSAGE_TYPES = ("text", "template", "image", "audio", "video", "document", "sticker", "location", "contacts",
                 "interactive", "reaction")
MAX_MESSAGE_BYTES = 64 * 1024  # a text body is ≤ 4096 characters; templates and interactive bodies are small too
_SEPARATORS = re.compile(r"[\s().-]")


class InvalidMessage(ValueError):
    """The message cannot be queued; str(error) says why."""


def normalize_recipient(to: Any) -> str:
    """E.164 ('+55 11 98765-4321') → the digits Meta calls wa_id ('5511987654321')."""
    if not isinstance(to, str):
        raise InvalidMessage("`to` must be a string such as '+5511987654321'")
    digits = _SEPARATORS.sub("", to).lstrip("+")
    if not re.fullmatch(r"[1-9][0-9]{6,14}", digits):
        raise InvalidMessage(f"invalid recipient {to!r}: expected an E.164 phone number such as +5511987654321")
    return digits


def validate_message(message: Any) -> str:
    """Check a Cloud API message body; return its type. `to` and the fields wa-outbox sets are ignored."""
    if not isinstance(message, dict):
        raise InvalidMessage("`message` must be a JSON object (a Cloud API message body)")
    if "status" in message or "message_id" in message:
        raise InvalidMessage("read receipts and typing indicators (status/message_id) are not outbound messages: "
                             "send them directly, they need no outbox")
    kind = message.get("type") or _implied_type(message)
    if kind not in MESSAGE_TYPES:
        raise InvalidMessage(f"unknown message type {kind!r}: expected one of {', '.join(MESSAGE_TYPES)}")
    content = message.get(kind)
    if not (isinstance(content, dict) or (kind == "contacts" and isinstance(content, list))):
        raise InvalidMessage(f"message of type {kind!r} needs a {kind!r} object")
    if kind == "text" and not isinstance(content.get("body"), str):
        raise InvalidMessage("a text message needs text.body (a string of at most 4096 characters)")
    if kind == "text" and len(content["body"]) > 4096:
        raise InvalidMessage(f"text.body is {len(content['body'])} characters; the Cloud API allows 4096")
    if len(json.dumps(message, separators=(",", ":"))) > MAX_MESSAGE_BYTES:
        raise InvalidMessage(f"message is larger than {MAX_MESSAGE_BYTES} bytes")
    return kind


def _implied_type(message: dict) -> str:
    """A body without `type`: the one message object it carries (a reply with only `interactive`), else text —
    as the Cloud API reads it. The body is sent as given; the type is only for validation."""
    present = [t for t in MESSAGE_TYPES if t in message]
    return present[0] if len(present) == 1 else "text"


def validate_phone_number_id(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not re.fullmatch(r"[0-9]{1,32}", value):
        raise InvalidMessage("`phone_number_id` must be the numeric id of a business phone number")
    return value


def validate_key(name: str, value: Any, limit: int = 255) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= limit:
        raise InvalidMessage(f"`{name}` must be a string of 1 to {limit} characters")
    return value
