"""The simulator's message templates: what `GET /{waba-id}/message_templates` lists, what a test pauses, approves or
disables (`POST /_admin/templates`), and what a send of a template draws while it is so: 132015 while PAUSED, 132016
while DISABLED (https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes). Each change is
posted as Meta posts it: a `message_template_status_update` (or `..._quality_update`, `template_category_update`)
to the app's webhook URL (https://developers.facebook.com/documentation/business-messaging/whatsapp/webhooks/
reference/message_template_status_update). A template the simulator was never told of is sent as before.
"""

from __future__ import annotations

import base64
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

# 132001: "Template name does not exist in the translation" (a deleted template); 132015 paused; 132016 disabled.
# https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes
REFUSALS = {"PAUSED": 132015, "DISABLED": 132016, "DELETED": 132001}
_IDS = itertools.count(1_300_000_000_000_000)
STATUS_WORDS = {"APPROVED", "PAUSED", "DISABLED", "PENDING", "REJECTED", "REINSTATED", "FLAGGED", "IN_APPEAL",
                "LIMIT_EXCEEDED", "ARCHIVED", "PENDING_DELETION", "DELETED"}
_ADMIN_KEYS = {"waba", "name", "language", "status", "reason", "category", "quality", "after_sends",
               "correct_category", "category_update_timestamp", "components", "webhook_delay_ms"}


@dataclass
class Template:
    waba: str
    name: str
    language: str
    id: str = field(default_factory=lambda: str(next(_IDS)))
    status: str = "APPROVED"
    category: str = "UTILITY"
    quality: str = "UNKNOWN"
    components: list[Any] = field(default_factory=list)
    sends: int = 0                       # sends accepted
    webhook_delay_s: float = 0.0         # Meta's webhooks of its last change are posted this long after it
    # a change to make once this many more sends are accepted (a test's "paused after the 10th send")
    then: tuple[int, dict[str, Any]] | None = None

    def listed(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "language": self.language, "status": self.status,
                "category": self.category, "quality_score": {"score": self.quality}, "components": self.components}


class TemplateBook:
    """Thread-safe state of the templates of every WABA."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._templates: dict[tuple[str, str, str], Template] = {}

    def clear(self) -> None:
        with self._lock:
            self._templates.clear()

    def refusal(self, waba: str, name: str, language: str) -> int | None:
        """The error code a send of this template draws now (None: it goes)."""
        with self._lock:
            template = self._templates.get((waba, name, language))
            return REFUSALS.get(template.status) if template is not None else None

    def accepted(self, waba: str, name: str, language: str) -> list[dict[str, Any]]:
        """Count an accepted send; the webhook payloads of the change it triggered (`after_sends`), if any."""
        with self._lock:
            template = self._templates.get((waba, name, language))
            if template is None:
                return []
            template.sends += 1
            if template.then is None or template.sends < template.then[0]:
                return []
            change = template.then[1]
            template.then = None
            return self._apply(template, change)

    def change(self, data: Any, default_waba: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Apply an admin change (`POST /_admin/templates`); (the template as listed, the webhooks to post).
        ValueError for a bad body."""
        if not isinstance(data, dict) or set(data) - _ADMIN_KEYS:
            raise ValueError(f"the body must be a JSON object with keys among {', '.join(sorted(_ADMIN_KEYS))}")
        name, language = data.get("name"), data.get("language")
        if not isinstance(name, str) or not name or not isinstance(language, str) or not language:
            raise ValueError('"name" and "language" must be non-empty strings')
        waba = data.get("waba") or default_waba
        if not isinstance(waba, str):
            raise ValueError('"waba" must be a string')
        status = data.get("status")
        if status is not None and (not isinstance(status, str) or status.upper() not in STATUS_WORDS):
            raise ValueError(f'"status" must be one of {", ".join(sorted(STATUS_WORDS))}')
        after = data.get("after_sends")
        if after is not None and (not isinstance(after, int) or isinstance(after, bool) or after < 1):
            raise ValueError('"after_sends" must be a positive integer')
        delay = data.get("webhook_delay_ms", 0)
        if not isinstance(delay, int | float) or isinstance(delay, bool) or not 0 <= delay <= 3_600_000:
            raise ValueError('"webhook_delay_ms" must be a number of milliseconds (0 to 3600000)')
        change = {k: v for k, v in data.items() if k not in ("waba", "name", "language", "after_sends")}
        with self._lock:
            key = (waba, name, language)
            created = key not in self._templates
            template = self._templates.setdefault(key, Template(waba, name, language))
            if after is not None:
                template.then = (template.sends + after, change)
                return template.listed(), []
            if created and status is None:
                change.setdefault("status", "APPROVED")
            return template.listed(), self._apply(template, change, announce=not created or status is not None)

    def webhook_delay(self, waba: str, name: str, language: str) -> float:
        with self._lock:
            template = self._templates.get((waba, name, language))
            return template.webhook_delay_s if template is not None else 0.0

    def _apply(self, template: Template, change: dict[str, Any], announce: bool = True) -> list[dict[str, Any]]:
        """Make the change (lock held); Meta's webhooks for it."""
        now = int(time.time())
        template.webhook_delay_s = float(change.get("webhook_delay_ms") or 0) / 1000
        posts = []
        common = {"message_template_id": int(template.id), "message_template_name": template.name,
                  "message_template_language": template.language}
        if isinstance(change.get("components"), list):
            template.components = change["components"]
        if isinstance(change.get("category"), str) and change.get("correct_category") is None:
            previous, template.category = template.category, change["category"]
            if announce and previous != template.category:
                posts.append(_entry(template.waba, now, "template_category_update", {
                    **common, "previous_category": previous, "new_category": template.category}))
        if isinstance(change.get("correct_category"), str):  # announced: takes effect at category_update_timestamp
            at = change.get("category_update_timestamp")
            posts.append(_entry(template.waba, now, "template_category_update", {
                **common, "correct_category": change["correct_category"], "new_category": template.category,
                "category_update_timestamp": at if isinstance(at, int) else now + 7 * 86400}))
        if isinstance(change.get("quality"), str):
            previous, template.quality = template.quality, change["quality"]
            posts.append(_entry(template.waba, now, "message_template_quality_update", {
                "previous_quality_score": previous, "new_quality_score": template.quality, **common}))
        if isinstance(change.get("status"), str):
            template.status = change["status"].upper()
            if announce:
                reason = change.get("reason") if isinstance(change.get("reason"), str) else "NONE"
                posts.append(_entry(template.waba, now, "message_template_status_update", {
                    "event": template.status, **common, "reason": reason,
                    "message_template_category": template.category}))
        return posts

    def templates(self, waba: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [{**t.listed(), "waba": t.waba, "sends": t.sends} for t in self._templates.values()
                    if waba is None or t.waba == waba]

    def page(self, waba: str, limit: int, after: str | None) -> tuple[list[dict[str, Any]], str | None]:
        """One page of `GET /{waba-id}/message_templates`: the templates after cursor `after`, and the cursor of the
        next page (None: this is the last)."""
        with self._lock:  # a deleted template is no longer listed, as at Meta
            listed = [t.listed() for t in self._templates.values() if t.waba == waba and t.status != "DELETED"]
        start = offset(after)
        page = listed[start:start + limit]
        more = start + limit < len(listed)
        return page, cursor(start + limit) if more else None


def _entry(waba: str, at: int, field_name: str, value: dict[str, Any]) -> dict[str, Any]:
    return {"object": "whatsapp_business_account",
            "entry": [{"id": waba, "time": at, "changes": [{"value": value, "field": field_name}]}]}


def cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"offset:{offset}".encode()).decode().rstrip("=")


def offset(cursor: str | None) -> int:
    if not cursor:
        return 0
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        return max(0, int(text.removeprefix("offset:")))
    except ValueError as exc:
        raise ValueError(f"bad cursor {cursor!r}") from exc
