"""Validation of what the app asks to send, shared by the HTTP API, the Python `enqueue` and the CLI. Pure.

The rules are owned by the SQL functions wa_outbox.recipient_problem(), message_problem() and key_problem()
(wa_outbox/sql/schema.sql), which every SQL entry point calls; this module mirrors them with the same
reasons, so a Python caller hears them before anything touches its transaction. It also refuses what Postgres or a
JSON parser would refuse before those functions even run (NUL, lone surrogates, NaN/Infinity, values that are not
JSON, nesting too deep to parse): a Python caller never gets a raw database error for its input.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

MESSAGE_TYPES = ("text", "template", "image", "audio", "video", "document", "sticker", "location", "contacts",
                 "interactive", "reaction")
MEDIA_TYPES = ("image", "audio", "video", "document", "sticker")
MAX_MESSAGE_BYTES = 64 * 1024  # a text body is ≤ 4096 characters; templates and interactive bodies are small too
MAX_DEPTH = 64  # Cloud API bodies nest a handful of levels; JSON parsers recurse per level
MAX_JSON_NUMBER = 2 ** 53 - 1  # RFC 8259 §6: the integers every JSON parser reads exactly
# Meta allows 512 characters of biz_opaque_callback_data; "<outbox id>:" (≤ 19 digits and ':') goes first.
# https://developers.facebook.com/docs/whatsapp/cloud-api/reference/messages
MAX_TRACKER = 512 - 20
MAX_KEY = 255
_SEPARATORS = re.compile(r"[ \t\n\r\f\v().-]")  # as recipient_digits(): what people type inside a number
_E164_DIGITS = re.compile(r"[1-9][0-9]{6,14}")
_PHONE_NUMBER_ID = re.compile(r"[0-9]{1,32}")
# A registered sender's alias (senders.alias's CHECK): whether one exists, wa_outbox.sender_choice() decides.
_SENDER_ALIAS = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")
# jsonb's text form (", " and ": " separators, Unicode as is): what octet_length(message::text) measures. One encoder
# for the process: json.dumps() with any non-default argument builds a new one per call (most of its cost here).
_JSONB_TEXT = json.JSONEncoder(ensure_ascii=False).encode


class InvalidMessage(ValueError):
    """The message cannot be queued; str(error) says why."""


def _quoted(value: str) -> str:
    """A string as Postgres prints it in jsonb (so both sides give the same reason); \\u-escaped if not Unicode."""
    return json.dumps(value, ensure_ascii=_has_surrogate(value))


_SURROGATE = re.compile("[\ud800-\udfff]")


def _has_surrogate(text: str) -> bool:
    return not text.isascii() and _SURROGATE.search(text) is not None


def recipient_digits(to: str) -> str | None:
    """E.164 ('+55 11 98765-4321') → the digits Meta calls wa_id ('5511987654321'); None if it is not one."""
    digits = _SEPARATORS.sub("", to).lstrip("+")
    return digits if _E164_DIGITS.fullmatch(digits) else None


def normalize_recipient(to: Any) -> str:
    """The recipient's digits, or InvalidMessage with the reason wa_outbox.recipient_problem() gives."""
    if not isinstance(to, str):
        raise InvalidMessage("`to` must be a string such as '+5511987654321'")
    digits = recipient_digits(to)
    if digits is None:
        raise InvalidMessage(f"invalid recipient {_quoted(to)}: expected an E.164 phone number such as +5511987654321")
    return digits


def format_phone(digits: str | None) -> str:
    """A stored phone number (a recipient's digits, as normalize_recipient() keeps it) as the CLI and the ops page
    print it: E.164 with its `+`, e.g. +5511987654321. Anything that is not bare digits (a display number Meta
    already formatted, such as "+1 555-0100") is shown as it is; None as ''."""
    if not digits:
        return ""
    return f"+{digits}" if digits.isascii() and digits.isdigit() else digits


def _storable(value: Any, path: str, depth: int = 0) -> None:
    """What Postgres's jsonb and a JSON parser accept: JSON values only, text without NUL or lone surrogates, finite
    numbers, and no deeper than MAX_DEPTH (also keeps this walk's own recursion bounded)."""
    if depth > MAX_DEPTH:
        raise InvalidMessage(f"message is nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        _storable_text(value, path)
    elif value is None or isinstance(value, bool):
        pass
    elif isinstance(value, int):
        if abs(value) > MAX_JSON_NUMBER:
            raise InvalidMessage(f"message has a number beyond {MAX_JSON_NUMBER} (2^53 - 1) in magnitude, the range "
                                 "JSON parsers read exactly")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidMessage(f"{path} is {value}: JSON numbers must be finite")
        if abs(value) > MAX_JSON_NUMBER:
            raise InvalidMessage(f"message has a number beyond {MAX_JSON_NUMBER} (2^53 - 1) in magnitude, the range "
                                 "JSON parsers read exactly")
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidMessage(f"{path} has a key that is not a string: {key!r}")
            _storable_text(key, f"a key of {path}")
            _storable(item, f"{path}.{key}", depth + 1)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _storable(item, f"{path}[{index}]", depth + 1)
    else:
        raise InvalidMessage(f"{path} is a {type(value).__name__}, which is not a JSON value")


def _storable_text(text: str, where: str) -> None:
    if "\x00" in text:
        raise InvalidMessage(f"{where} contains a NUL character (\\u0000), which Postgres cannot store")
    if _has_surrogate(text):
        raise InvalidMessage(f"{where} contains a lone surrogate: it is not valid Unicode")


def message_text(message: Any) -> str:
    """`message` as JSON text in jsonb's form (the size rule measures it; it is also what enqueue_many() sends)."""
    return _JSONB_TEXT(message)


def message_problem(message: Any, text: str | None = None) -> str | None:
    """Why `message` cannot be queued, or None: wa_outbox.message_problem(), rule for rule and word for word.
    `text`: message_text(message) when the caller has it already."""
    if not isinstance(message, dict):
        return "`message` must be a JSON object (a Cloud API message body)"
    if "status" in message or "message_id" in message:
        return ("read receipts and typing indicators (status/message_id) are not outbound messages: "
                "send them directly, they need no outbox")
    kind = message.get("type")
    if kind is None:
        kind = _implied_type(message)
    elif not isinstance(kind, str) or kind not in MESSAGE_TYPES:
        shown = json.dumps(kind, ensure_ascii=False)
        return f"unknown message type {shown}: expected one of {', '.join(MESSAGE_TYPES)}"
    content = message.get(kind)
    if not (isinstance(content, dict) or (kind == "contacts" and isinstance(content, list))):
        return f"message of type '{kind}' needs a '{kind}' object"
    if kind == "text" and isinstance(content, dict):  # (a text message's content is an object: said above)
        body = content.get("body")
        if not isinstance(body, str):
            return "a text message needs text.body (a string of at most 4096 characters)"
        if len(body) > 4096:
            return f"text.body is {len(body)} characters; the Cloud API allows 4096"
    tracker = message.get("biz_opaque_callback_data")
    if tracker is not None and not isinstance(tracker, str):
        return "`biz_opaque_callback_data` must be a string"
    if tracker is not None and len(tracker) > MAX_TRACKER:
        return (f"biz_opaque_callback_data is {len(tracker)} characters: at most {MAX_TRACKER} fit, as Meta allows "
                '512 and "<outbox id>:" goes first')
    if kind in MEDIA_TYPES and isinstance(content, dict) and "upload" in content:
        problem = upload_problem(kind, content)
        if problem:
            return problem
    return size_problem(_JSONB_TEXT(message) if text is None else text)


MAX_UPLOAD_ID = 10 ** 18 - 1  # at most 18 digits, as the SQL rule's pattern: every bigint id fits for ages


def upload_problem(kind: str, content: dict[str, Any]) -> str | None:
    """The `upload` rules of message_problem(): a media message may name a file handed over to wa-outbox (POST
    /v1/media, upload_media()) instead of Meta's media `id` or a public `link`. Whether that file exists is the
    database's to say, at enqueue (the trigger check_message_upload())."""
    upload = content["upload"]
    if not (isinstance(upload, int) and not isinstance(upload, bool) and 1 <= upload <= MAX_UPLOAD_ID):
        return f"{kind}.upload must be the id POST /v1/media or upload_media() returned (a positive integer)"
    if "id" in content or "link" in content:
        return f"{kind}.upload stands for {kind}.id and {kind}.link: give only one of the three"
    return None


def upload_of(message: dict[str, Any]) -> tuple[str, int] | None:
    """(type, upload id) of a valid stored message that names an upload (its `<type>.upload`), or None."""
    kind = message.get("type")
    kind = kind if isinstance(kind, str) else _implied_type(message)
    content = message.get(kind)
    if kind not in MEDIA_TYPES or not isinstance(content, dict):
        return None
    upload = content.get("upload")
    return (kind, upload) if isinstance(upload, int) and not isinstance(upload, bool) else None


def size_problem(text: str) -> str | None:
    """The last rule of message_problem(), on the message's message_text()."""
    # In bytes of UTF-8 (at most 4 per character: a shorter text cannot be too large, and needs no encoding).
    if len(text) * 4 > MAX_MESSAGE_BYTES and len(text.encode()) > MAX_MESSAGE_BYTES:
        return f"message is larger than {MAX_MESSAGE_BYTES} bytes"
    return None


def validate_message(message: Any) -> str:
    """Check a Cloud API message body; return its type. `to` and the fields wa-outbox sets are ignored."""
    _checked_text(message)
    kind = message.get("type")
    return kind if kind is not None else _implied_type(message)


def _checked_text(message: Any) -> str:
    """Check a Cloud API message body; return its message_text()."""
    _storable(message, "message")
    text = _JSONB_TEXT(message) if isinstance(message, dict) else None  # storable: it encodes
    problem = message_problem(message, text)
    if problem:
        raise InvalidMessage(problem)
    assert text is not None  # anything but an object has a problem
    return text


def _implied_type(message: dict) -> str:
    """A body without `type`: the one message object it carries (a reply with only `interactive`), else text —
    as the Cloud API reads it. The body is sent as given; the type is only for validation."""
    present = [t for t in MESSAGE_TYPES if t in message]
    return present[0] if len(present) == 1 else "text"


def validate_phone_number_id(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _PHONE_NUMBER_ID.fullmatch(value):
        raise InvalidMessage("`phone_number_id` must be the numeric id of a business phone number")
    return value


def validate_sender(value: Any) -> str | None:
    """A message's sender as given: a phone number id, or the form of a sender's alias (whether one has it, the
    database's wa_outbox.sender_choice() decides)."""
    if isinstance(value, str) and _SENDER_ALIAS.fullmatch(value):
        return value
    return validate_phone_number_id(value)


def validate_key(name: str, value: Any, limit: int = MAX_KEY) -> str | None:
    """An idempotency key or correlation id, as wa_outbox.key_problem() checks it (and storable as text)."""
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= limit:
        raise InvalidMessage(f"`{name}` must be a string of 1 to {limit} characters")
    _storable_text(value, f"`{name}`")
    return value


@dataclass(frozen=True)
class Checked:
    """One request, validated: what goes to wa_outbox.enqueue() besides the message."""
    recipient: str
    idempotency_key: str | None
    correlation_id: str | None
    phone_number_id: str | None
    message_text: str = ""  # the message as message_text() gives it


def check_request(*, to: Any, message: Any, idempotency_key: Any = None, correlation_id: Any = None,
                  phone_number_id: Any = None, key_name: str = "idempotency_key",
                  validate_mode: str | None = None) -> Checked:
    """Every rule, in the order the SQL functions apply them; InvalidMessage names the first that fails. With
    WA_OUTBOX_VALIDATE=meta, then the rules of Meta's schema (wa_outbox/meta_schema.py). `validate_mode`: that
    variable's meta_schema.mode(), when a caller checking many messages has read it once already."""
    recipient = normalize_recipient(to)
    text = _checked_text(message)
    if validate_mode is None:
        # the one impure step: the opt-in reads the environment
        from . import meta_schema  # noqa: PLC0415 - `import wa_outbox` loads no configuration
        validate_mode = meta_schema.mode()
    if validate_mode == "meta":
        from . import meta_schema  # noqa: PLC0415 - as above
        problem = meta_schema.meta_problem(recipient, message)
        if problem:
            raise InvalidMessage(problem)
    return Checked(recipient, validate_key(key_name, idempotency_key), validate_key("correlation_id", correlation_id),
                   validate_sender(phone_number_id), text)


def validate_ordered(value: Any) -> bool:
    """`ordered`: absent (None: true) or a boolean. False opts a message out of order per recipient."""
    if value is None:
        return True
    if not isinstance(value, bool):
        raise InvalidMessage("`ordered` must be true or false")
    return value
