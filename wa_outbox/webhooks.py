"""Inbound webhooks, the pure part: signature check, payload validation, and splitting a POST into stored events.

No I/O here. The Flask view (`web/webhook_views.py`) calls `verify_signature`, then `split_payload`, then hands the
events to one set-based INSERT … ON CONFLICT DO NOTHING.

Each event is one update with a dedup key that does not depend on how Meta batches a (re)delivery:
- an inbound message (`messages[]`, `message_echoes[]`): `m:<wamid>`;
- a status (`statuses[]`): `s:<wamid>:<status>`, plus `:<participant>` for group statuses (one read per member);
- anything else (calls, template and account updates, user preferences, account-level errors, …): `d:<sha256>` of
  the canonical JSON of the change and its account id.
An event's payload is the change narrowed to that one update (`{"field", "value"}` with a one-element list), so a
handler sees exactly the shape Meta documents.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

SIGNATURE_HEADER = "X-Hub-Signature-256"

# Lists inside a change's value that hold separately deduplicated updates, and the kind each one is stored as.
_ITEM_LISTS = {"messages": "message", "message_echoes": "message", "statuses": "status"}


class SignatureError(Exception):
    """The request is not from Meta: `status` is 401 (no signature) or 403 (wrong signature)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class PayloadError(ValueError):
    """The body is not a WhatsApp Business Account webhook; the message names the problem."""


@dataclass(frozen=True, slots=True)
class WebhookEvent:
    dedup_key: str
    field: str
    kind: str  # message | status | change
    account_id: str | None
    phone_number_id: str | None
    wamid: str | None
    update_status: str | None
    payload: dict[str, Any]


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


def parse_body(body: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PayloadError(f"body is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise PayloadError("body must be a JSON object")
    return payload


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
            if not isinstance(field, str) or not field:
                raise PayloadError(f"{where}.field must be a non-empty string")
            value = change.get("value")
            if not isinstance(value, dict):
                raise PayloadError(f"{where}.value must be an object")
            events.extend(_split_change(where, account_id, field, value))
    return events


def _split_change(where: str, account_id: str | None, field: str, value: dict[str, Any]) -> list[WebhookEvent]:
    metadata = value.get("metadata")
    phone_number_id = _str_or_none(metadata.get("phone_number_id")) if isinstance(metadata, dict) else None
    # Only the `messages` field (and its echo twin) carries wamid-keyed updates; e.g. `calls` has a `statuses`
    # list too, but of call ids, which are digested with the rest of their change.
    split_lists = [k for k in _ITEM_LISTS if field in ("messages", "smb_message_echoes") and k in value]
    if not split_lists:
        return [_digest_event(account_id, field, phone_number_id, value)]

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
            events.append(WebhookEvent(key, field, kind, account_id, phone_number_id, wamid, update_status,
                                       {"field": field, "value": narrowed}))
    # Whatever else rides along (value.errors: account-level errors) is its own event.
    leftovers = {k: v for k, v in rest.items() if isinstance(v, list) and k != "contacts"}
    if leftovers:
        events.append(_digest_event(account_id, field, phone_number_id, rest))
    return events


def _digest_event(account_id: str | None, field: str, phone_number_id: str | None,
                  value: dict[str, Any]) -> WebhookEvent:
    canonical = json.dumps([account_id, field, value], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    key = "d:" + hashlib.sha256(canonical.encode()).hexdigest()
    return WebhookEvent(key, field, "change", account_id, phone_number_id, None, None,
                        {"field": field, "value": value})


def _str_or_none(value: Any) -> str | None:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None
