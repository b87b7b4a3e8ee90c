"""Inbound webhooks, the pure part: signature check, payload validation, and splitting a POST into stored events.

No I/O here. The Flask view (`web/webhook_views.py`) calls `verify_signature`, then `events_of_body` (parse, split,
sanitize), then hands the events to one set-based INSERT … ON CONFLICT DO NOTHING.

Each event is one update with a dedup key that does not depend on how Meta batches a (re)delivery:
- an inbound message (`messages[]`, `message_echoes[]`): `m:<wamid>`;
- a status (`statuses[]`): `s:<wamid>:<status>`, plus `:<participant>` for group statuses (one read per member);
- anything else (calls, template and account updates, user preferences, account-level errors, …): `d:<sha256>` of
  the canonical JSON of the change and its account id.
An event's payload is the change narrowed to that one update (`{"field", "value"}` with a one-element list), so a
handler sees exactly the shape Meta documents. A natural key longer than MAX_NATURAL_KEY_LENGTH (no real wamid is)
falls back to the digest key: the unique index cannot hold arbitrarily long keys.

Poison that passes the signature (Meta relays what customers type): JSON that Postgres' jsonb cannot hold is stored
sanitized — NUL and lone surrogates become U+FFFD, NaN/±Infinity and numbers beyond Python's float or int range are
kept as their literal text (a JSON string) — and such an event says `raw_body=True`, so the POST's exact bytes are
stored beside it. JSON that cannot be split at all (nesting deeper than Python's parser follows) becomes one `dead`
event holding the raw bytes (`unprocessable_event`). Clean bodies (all of Meta's) skip the sanitizing walk: a scan of
the raw bytes (`_may_hold_unstorable_chars`) and the parser's number hooks decide.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
import threading
from collections.abc import Iterable
from json.decoder import scanstring  # type: ignore[attr-defined]  # undocumented, so typeshed leaves it out
from typing import Any, NamedTuple

SIGNATURE_HEADER = "X-Hub-Signature-256"
WEBHOOK_PATH = "/webhooks/whatsapp"  # where Meta posts (the callback URL is https://<app>/webhooks/whatsapp)

# Natural keys (m:<wamid>, s:<wamid>:<status>[:<participant>]) up to this many characters; longer ones are digested.
MAX_NATURAL_KEY_LENGTH = 512
# The `field` of the one dead event that stands for a body that cannot be split into events.
UNPROCESSABLE_FIELD = "unprocessable"

# Lists inside a change's value that hold separately deduplicated updates, and the kind each one is stored as.
_ITEM_LISTS = {"messages": "message", "message_echoes": "message", "statuses": "status"}


class SignatureError(Exception):
    """The request is not from Meta: `status` is 401 (no signature) or 403 (wrong signature)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class PayloadError(ValueError):
    """The body is not a WhatsApp Business Account webhook; the message names the problem."""


class WebhookEvent(NamedTuple):
    """One stored update. Immutable; a NamedTuple rather than a frozen dataclass: a POST builds one per update, and a
    frozen dataclass's __init__ (one object.__setattr__ per field) cost four times as much."""
    dedup_key: str
    field: str
    kind: str  # message | status | change
    account_id: str | None
    phone_number_id: str | None
    wamid: str | None
    update_status: str | None
    payload: dict[str, Any]
    raw_body: bool = False          # sanitized: the POST's raw bytes are stored with it (webhook_bodies)
    dead_reason: str | None = None  # stored `dead` at once, with this as last_error: it cannot be processed


def sign(secret: str | bytes, body: bytes) -> str:
    """The `X-Hub-Signature-256` header value Meta sends for `body`."""
    key = secret.encode() if isinstance(secret, str) else secret
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def verify_signature(secret: str | bytes, body: bytes, header: str | None) -> None:
    """Check `header` against the HMAC-SHA256 of the raw `body`, in constant time. Raises SignatureError."""
    if not header:
        raise SignatureError(f"missing {SIGNATURE_HEADER} header", 401)
    expected = sign(secret, body)
    # compare_digest wants ASCII str; a non-ASCII header cannot match anyway.
    provided = header.strip().lower()
    if not provided.isascii() or not hmac.compare_digest(expected, provided):
        raise SignatureError(f"{SIGNATURE_HEADER} does not match the body", 403)


def verifying_apps(candidates: Iterable[tuple[str | None, bytes, float | None]], body: bytes, header: str | None,
                   now: float) -> list[str | None]:
    """The apps (None: WHATSAPP_APP_SECRET) among `candidates` — (app id, secret as UTF-8 bytes, epoch seconds it
    verifies until or None) — whose secret signed `body` as `header` says. Every live candidate's HMAC is computed
    and compared in constant time, whichever matches: how long this takes says how many secrets there are, never
    which one matched. Raises SignatureError."""
    if not header:
        raise SignatureError(f"missing {SIGNATURE_HEADER} header", 401)
    provided = header.strip().lower()
    # compare_digest wants ASCII str; a non-ASCII header, or one without the prefix, cannot match anyway
    given = provided[7:] if provided.startswith("sha256=") and provided.isascii() else ""
    found = []
    for app_id, key, expires_at in candidates:
        if expires_at is not None and expires_at <= now:  # a rotated-out secret whose overlap ended
            continue
        if hmac.compare_digest(hmac.new(key, body, hashlib.sha256).hexdigest(), given):
            found.append(app_id)
    if not found:
        raise SignatureError(f"{SIGNATURE_HEADER} does not match the body", 403)
    return found


def events_of_body(body: bytes) -> list[WebhookEvent]:
    """The events to store for a signed POST body: split, and sanitized where jsonb could not hold them; or one
    dead event for JSON that cannot be split. Raises PayloadError when the body is not JSON or not a webhook (400)."""
    try:
        payload, numbers_kept_as_text = _parse(body)
    except RecursionError:
        if not is_json(_decode(body)):
            raise PayloadError("body is not valid JSON") from None
        if not _decode(body).lstrip(" \t\n\r").startswith("{"):
            raise PayloadError("body must be a JSON object") from None
        return [unprocessable_event(body, "nested deeper than Python's JSON parser can follow")]
    try:
        events = split_payload(payload)
        if not (numbers_kept_as_text or _may_hold_unstorable_chars(body)):
            return events
        return [_sanitized(event) for event in events]
    except RecursionError:  # parsed, but too deep to digest or sanitize here
        return [unprocessable_event(body, "nested too deeply to digest or sanitize")]


def parse_body(body: bytes) -> dict[str, Any]:
    """The JSON object in `body`, numbers Python or jsonb cannot hold kept as their text. Raises PayloadError."""
    return _parse(body)[0]


def _parse(body: bytes) -> tuple[dict[str, Any], bool]:
    """The payload, and whether numbers had to be kept as text."""
    _numbers_kept.count = 0
    try:
        payload = _DECODER.decode(_decode(body))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PayloadError(f"body is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise PayloadError("body must be a JSON object")
    return payload, _numbers_kept.count > 0


_numbers_kept = threading.local()  # per request thread: how many numbers the current parse kept as text


def _as_text(literal: str) -> str:
    """NaN, ±Infinity, 1e400, a 5,000-digit integer: the JSON text, as a string."""
    _numbers_kept.count += 1
    return _NumberText(literal)


def _finite_float(literal: str) -> float | str:
    number = float(literal)
    return number if math.isfinite(number) else _as_text(literal)


def _bounded_int(literal: str) -> int | str:
    try:
        return int(literal)
    except ValueError:  # past sys.get_int_max_str_digits()
        return _as_text(literal)


# Built once: the hooks only run for numbers (ints and floats are rare in Meta's payloads) and NaN/Infinity.
_DECODER = json.JSONDecoder(parse_float=_finite_float, parse_int=_bounded_int, parse_constant=_as_text)


def _decode(body: bytes) -> str:
    """The text json.loads would read from `body` (UTF-8, -16 or -32; lone surrogates passed through)."""
    return body.decode(json.detect_encoding(body), "surrogatepass")


class _NumberText(str):
    """A JSON number Python or jsonb cannot hold, kept as its literal text: marks the event as sanitized."""
    __slots__ = ()


# Escapes that may decode to NUL or a lone surrogate; raw UTF-8 surrogates start with 0xED.
_SUSPECT_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])")
_UNSTORABLE_CHAR = re.compile("[\x00\ud800-\udfff]")  # surrogates in a str are always lone ones


def _may_hold_unstorable_chars(body: bytes) -> bool:
    """False only when `body` surely decodes to no NUL and no lone surrogate; True means: walk and see. A few
    microseconds per kilobyte (memchr and a literal-prefixed regex): Meta escapes emoji as surrogate pairs, so only
    bodies with emoji, NUL or surrogates pay for the walk."""
    return (json.detect_encoding(body) not in ("utf-8", "utf-8-sig") or b"\xed" in body
            or _SUSPECT_ESCAPE.search(body) is not None)


def sanitize(value: Any) -> tuple[Any, bool]:
    """`value` made storable as jsonb, and whether anything changed: NUL and lone surrogates (in strings and keys)
    become U+FFFD, non-finite floats their JSON text, numbers kept as text plain strings. Pure; returns `value`
    itself when nothing changed, so a clean value costs one walk and no copy."""
    kind = type(value)
    if kind is str:
        if _UNSTORABLE_CHAR.search(value):
            return _UNSTORABLE_CHAR.sub("\ufffd", value), True
        return value, False
    if kind is dict:
        changed = False
        clean = {}
        for key, item in value.items():
            clean_key, key_changed = sanitize(key)
            clean_item, item_changed = sanitize(item)
            clean[clean_key] = clean_item
            changed = changed or key_changed or item_changed
        return (clean, True) if changed else (value, False)
    if kind is list:
        changed = False
        items = []
        for item in value:
            clean_item, item_changed = sanitize(item)
            items.append(clean_item)
            changed = changed or item_changed
        return (items, True) if changed else (value, False)
    if kind is _NumberText:
        return sanitize(str(value))[0], True
    if kind is float and not math.isfinite(value):
        return ("NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"), True
    if isinstance(value, str):  # any other str subclass
        return sanitize(str(value))
    return value, False


def _sanitized(event: WebhookEvent) -> WebhookEvent:
    payload, changed = sanitize(event.payload)
    texts = {}
    for name in ("dedup_key", "field", "account_id", "phone_number_id", "wamid", "update_status"):
        text, text_changed = sanitize(getattr(event, name))
        texts[name] = text
        changed = changed or text_changed
    if not changed:
        return event
    return event._replace(payload=payload, raw_body=True, **texts)


def unprocessable_event(body: bytes, reason: str) -> WebhookEvent:
    """The one event that stands for a signed body that cannot be split or stored as events: dead at once, keyed by
    the digest of the raw bytes (so a redelivery stores nothing new), the bytes kept (webhook_bodies)."""
    key = "d:" + hashlib.sha256(body).hexdigest()
    return WebhookEvent(key, UNPROCESSABLE_FIELD, "change", None, None, None, None,
                        {"field": UNPROCESSABLE_FIELD, "value": {}}, raw_body=True,
                        dead_reason=f"cannot be processed: {reason}"[:1000])


_WHITESPACE = re.compile(r"[ \t\n\r]*")
_SCALAR = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|true|false|null|NaN|-?Infinity")


def _after_whitespace(text: str, pos: int) -> int:
    found = _WHITESPACE.match(text, pos)
    assert found is not None  # no whitespace matches too
    return found.end()


def is_json(text: str) -> bool:
    """Whether `text` is one JSON value as Python's json module reads it (NaN and Infinity included), however deep:
    iterative, for bodies too deeply nested for the recursive parser."""
    open_containers: list[str] = []
    pos = _after_whitespace(text, 0)
    try:
        while True:
            # a value starts at pos
            char = text[pos:pos + 1]
            if char in ("{", "["):
                pos = _after_whitespace(text, pos + 1)
                if text.startswith("}" if char == "{" else "]", pos):
                    pos += 1
                else:
                    open_containers.append(char)
                    if char == "{":
                        pos = _object_key(text, pos)
                    continue
            elif char == '"':
                pos = scanstring(text, pos + 1)[1]
            else:
                scalar = _SCALAR.match(text, pos)
                if scalar is None:
                    return False
                pos = scalar.end()
            # a value ended at pos: close what it closes, then expect the next one
            while True:
                pos = _after_whitespace(text, pos)
                if not open_containers:
                    return pos == len(text)
                if text.startswith(",", pos):
                    pos = _after_whitespace(text, pos + 1)
                    if open_containers[-1] == "{":
                        pos = _object_key(text, pos)
                    break
                if text.startswith("}" if open_containers[-1] == "{" else "]", pos):
                    open_containers.pop()
                    pos += 1
                    continue
                return False
    except (json.JSONDecodeError, ValueError):
        return False


def _object_key(text: str, pos: int) -> int:
    """After a key and its colon: where the value starts. ValueError when there is no `"key":` at pos."""
    if not text.startswith('"', pos):
        raise ValueError("expected a key")
    pos = _after_whitespace(text, scanstring(text, pos + 1)[1])
    if not text.startswith(":", pos):
        raise ValueError("expected ':'")
    return _after_whitespace(text, pos + 1)


def split_payload(payload: dict[str, Any]) -> list[WebhookEvent]:
    """Every update in a webhook POST as a WebhookEvent, in payload order. Raises PayloadError on a broken shape."""
    if payload.get("object") != "whatsapp_business_account":
        raise PayloadError(f"object must be 'whatsapp_business_account', got {payload.get('object')!r}")
    entries = payload.get("entry")
    if not isinstance(entries, list):
        raise PayloadError("entry must be a list")
    events: list[WebhookEvent] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise PayloadError(f"entry[{i}] must be an object")
        changes = entry.get("changes")
        if not isinstance(changes, list):
            raise PayloadError(f"entry[{i}].changes must be a list")
        account_id = _str_or_none(entry.get("id"))
        for j, change in enumerate(changes):
            where = f"entry[{i}].changes[{j}]"
            if not isinstance(change, dict):
                raise PayloadError(f"{where} must be an object")
            field = change.get("field")
            if type(field) is not str or not field:  # not a _NumberText either: NaN is no field name
                raise PayloadError(f"{where}.field must be a non-empty string")
            value = change.get("value")
            if not isinstance(value, dict):
                raise PayloadError(f"{where}.value must be an object")
            events.extend(_split_change(where, account_id, field, value, entry.get("time")))
    return events


# Changes that say what something IS now, with no time of their own in `value`: a template paused, approved, paused
# again sends the same value twice, which the digest alone would take for a redelivery and drop. Their key also
# holds the entry's `time` (a redelivery of one POST keeps it; a new change has its own).
# https://developers.facebook.com/documentation/business-messaging/whatsapp/webhooks/reference/
# message_template_status_update
_TIMED_FIELDS = frozenset({"message_template_status_update", "message_template_quality_update",
                           "template_category_update"})


def _split_change(where: str, account_id: str | None, field: str, value: dict[str, Any],
                  entry_time: Any = None) -> list[WebhookEvent]:
    metadata = value.get("metadata")
    phone_number_id = _str_or_none(metadata.get("phone_number_id")) if isinstance(metadata, dict) else None
    # Only the `messages` field (and its echo twin) carries wamid-keyed updates; e.g. `calls` has a `statuses`
    # list too, but of call ids, which are digested with the rest of their change.
    split_lists = [k for k in _ITEM_LISTS if field in ("messages", "smb_message_echoes") and k in value]
    if not split_lists:
        timed = entry_time if field in _TIMED_FIELDS and isinstance(entry_time, int | str) else None
        event = _digest_event(account_id, field, phone_number_id, value, timed)
        if timed is None:
            return [event]
        # the entry's time rides along (Meta sends no order guarantee: the newest change wins by it)
        return [event._replace(payload={**event.payload, "time": timed})]

    events = []
    rest = {k: v for k, v in value.items() if k not in split_lists}
    for list_name in split_lists:
        items = value[list_name]
        if not isinstance(items, list):
            raise PayloadError(f"{where}.value.{list_name} must be a list")
        for n, item in enumerate(items):
            if not isinstance(item, dict):
                raise PayloadError(f"{where}.value.{list_name}[{n}] must be an object")
            narrowed = {**rest, list_name: [item]}
            wamid = _str_or_none(item.get("id"))
            kind = _ITEM_LISTS[list_name]
            update_status = _str_or_none(item.get("status")) if kind == "status" else None
            if wamid is None or (kind == "status" and update_status is None):
                events.append(_digest_event(account_id, field, phone_number_id, narrowed))  # no natural key
                continue
            if kind == "status":
                key = f"s:{wamid}:{update_status}"
                participant = _str_or_none(item.get("recipient_participant_id"))
                if participant:
                    key += f":{participant}"
            else:
                key = f"m:{wamid}"
            if len(key) > MAX_NATURAL_KEY_LENGTH:  # not a real wamid: no natural key either
                events.append(_digest_event(account_id, field, phone_number_id, narrowed))
                continue
            events.append(WebhookEvent(key, field, kind, account_id, phone_number_id, wamid, update_status,
                                       {"field": field, "value": narrowed}))
    # Whatever else rides along (value.errors: account-level errors) is its own event.
    leftovers = {k: v for k, v in rest.items() if isinstance(v, list) and k != "contacts"}
    if leftovers:
        events.append(_digest_event(account_id, field, phone_number_id, rest))
    return events


def _digest_event(account_id: str | None, field: str, phone_number_id: str | None,
                  value: dict[str, Any], entry_time: int | str | None = None) -> WebhookEvent:
    digested = [account_id, field, value] if entry_time is None else [account_id, field, value, str(entry_time)]
    canonical = json.dumps(digested, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    # surrogatepass: lone surrogates (sanitized later) digest losslessly; valid text encodes exactly as UTF-8.
    key = "d:" + hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()
    return WebhookEvent(key, field, "change", account_id, phone_number_id, None, None,
                        {"field": field, "value": value})


def _str_or_none(value: Any) -> str | None:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None
