"""The template lifecycle's decisions, pure (no I/O; tests/unit/test_templates.py): what a template's status word
means for the messages of that template, what a send's error code says about its template, and the fields of
Meta's template webhooks and of `GET /{waba-id}/message_templates` as the statements' input.

Status words (https://developers.facebook.com/documentation/business-messaging/whatsapp/webhooks/reference/
message_template_status_update): APPROVED and REINSTATED (unpaused) let its messages go; PAUSED holds them (Meta
pauses a template for its quality, 3 h then 6 h, and answers 132015 meanwhile); PENDING, IN_APPEAL, REJECTED,
LIMIT_EXCEEDED and ARCHIVED hold them as not approved (they would be refused); DISABLED dead-letters them with the
reason `template_disabled` (132016: it will not come back). FLAGGED is still sendable (a warning before a pause).
Any other word (DELETED, PENDING_DELETION, one Meta adds later) holds nothing: messages it held go again (else a
template deleted while paused would hold them for ever) and Meta's answer decides, as for a template wa-outbox never
heard of. A template `templates sync` no longer finds in Meta's whole listing is recorded as DELETED (`vanished`).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .states import HoldReason


class TemplateAction(enum.Enum):
    RELEASE = "release"              # sendable: messages it held go again, in their order
    HOLD_PAUSED = "hold_paused"      # held (hold_reason template_paused): no attempt spent, not dead
    HOLD_NOT_APPROVED = "hold_not_approved"  # held (template_not_approved)
    DEAD = "dead"                    # dead-lettered with reason template_disabled, their campaigns paused


SENDABLE = frozenset({"APPROVED", "REINSTATED", "FLAGGED"})
PAUSED = frozenset({"PAUSED"})
NOT_APPROVED = frozenset({"PENDING", "IN_APPEAL", "REJECTED", "LIMIT_EXCEEDED", "ARCHIVED"})
DISABLED = frozenset({"DISABLED"})
DISABLED_REASON = "template_disabled"  # the dead-letter reason (last_error.reason, the timeline's detail)

# A send refused for its template: 132015 "Template is paused", 132016 "Template is disabled"
# (https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes). The code is taken as Meta's word
# on the template's status, as a webhook would say it.
REFUSAL_STATUS = {132015: "PAUSED", 132016: "DISABLED"}
# A 132015 for a sender outside the registry (its business account unknown, so no template row to hold by): the
# message waits this long (Meta's first pause, 3 h) without spending an attempt, instead of being dead-lettered.
UNREGISTERED_PAUSE_SECONDS = 3 * 3600.0

MAX_WORD_CHARS = 64
MAX_REASON_CHARS = 2000
MAX_NAME_CHARS = 512
MAX_LANGUAGE_CHARS = 32
FIELDS = ("message_template_status_update", "message_template_quality_update", "template_category_update")


def template_action(status: str | None) -> TemplateAction | None:
    """What a template in `status` means for its messages (None: nothing; they go as before)."""
    word = (status or "").upper()
    if word in SENDABLE:
        return TemplateAction.RELEASE
    if word in PAUSED:
        return TemplateAction.HOLD_PAUSED
    if word in NOT_APPROVED:
        return TemplateAction.HOLD_NOT_APPROVED
    if word in DISABLED:
        return TemplateAction.DEAD
    return TemplateAction.RELEASE if word else None  # a word that holds nothing lets go what was held


def hold_reason(action: TemplateAction) -> HoldReason | None:
    return {TemplateAction.HOLD_PAUSED: HoldReason.TEMPLATE_PAUSED,
            TemplateAction.HOLD_NOT_APPROVED: HoldReason.TEMPLATE_NOT_APPROVED}.get(action)


def refusal_status(code: int | None) -> str | None:
    """The template status a send's error code announces (132015 PAUSED, 132016 DISABLED), else None."""
    return REFUSAL_STATUS.get(code) if code is not None else None


def status_action(status: str | None, status_news: bool) -> TemplateAction | None:
    """What to do to a template's messages after a batch of changes: its (stored) status's action when the batch said
    something of its status, else nothing (a quality or category change moves no message). Acting again on the same
    status is harmless (a held message is not held twice; releasing finds nothing held), and makes a retried batch
    finish what a failure interrupted."""
    return template_action(status) if status_news else None


def held_words() -> dict[str, list[str]]:
    """The status words as the statements' parameters (the rule stays here; SQL gets it as lists)."""
    return {"paused_words": sorted(PAUSED), "not_approved_words": sorted(NOT_APPROVED),
            "disabled_words": sorted(DISABLED)}


def template_of(message: Any) -> tuple[str, str] | None:
    """A stored message's template (name, language code), or None when it is not a template message."""
    template = message.get("template") if isinstance(message, dict) else None
    if not isinstance(template, dict):
        return None
    name, language = template.get("name"), template.get("language")
    code = language.get("code") if isinstance(language, dict) else language
    if isinstance(name, str) and name and isinstance(code, str) and code:
        return name, code
    return None


# --- parsing Meta's webhooks and listings (never raising: garbage is dropped) ----------------------------------------

def _word(value: Any, limit: int = MAX_WORD_CHARS) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()[:limit]
    return None


def _id(value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    return value[:64] if isinstance(value, str) and value.isascii() and value.isdigit() else None


def _timestamp(value: Any) -> int | None:  # the one rule for Meta's timestamps
    from .worker._inbound import parse_timestamp  # noqa: PLC0415 - the worker imports this module
    return parse_timestamp(value)


@dataclass(frozen=True)
class TemplateChange:
    """One template webhook (or sync item) as apply_template_changes.sql's input."""
    event_id: int | None
    waba_id: str | None
    name: str
    language: str
    template_id: str | None = None
    status: str | None = None
    reason: str | None = None
    quality: str | None = None
    category: str | None = None
    category_pending: str | None = None
    category_change_at: int | None = None   # unix seconds
    components: Any = None
    ts: int | None = None                   # unix seconds: when Meta changed it (the entry's time)

    def as_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def webhook_change(event_id: int | None, field: str | None, payload: Any, waba_id: str | None = None,
                   entry_time: Any = None) -> TemplateChange | None:
    """A stored template change (`payload`: {"field", "value"}) as a TemplateChange, or None when it names no
    template (no name or language): such an event is kept, and only passed on to apps. No `waba_id`: the statement
    takes the stored event's business account (webhook_events.account_id, entry[].id) and, without `entry_time`,
    its arrival as the time of the change."""
    value = payload.get("value") if isinstance(payload, dict) else None
    if not isinstance(value, dict) or field not in FIELDS:
        return None
    name = _word(value.get("message_template_name"), MAX_NAME_CHARS)
    language = _word(value.get("message_template_language"), MAX_LANGUAGE_CHARS)
    if name is None or language is None:
        return None
    common: dict[str, Any] = {"event_id": event_id, "waba_id": _id(waba_id), "name": name, "language": language,
              "template_id": _id(value.get("message_template_id")),
              "ts": _timestamp(entry_time)}
    if field == "message_template_status_update":
        reason = _word(value.get("reason"), MAX_REASON_CHARS)
        info = value.get("rejection_info") or value.get("other_info") or value.get("disable_info")
        if isinstance(info, dict):
            detail = "; ".join(f"{k}: {v}" for k, v in info.items() if isinstance(v, str | int))
            reason = f"{reason or ''} ({detail})"[:MAX_REASON_CHARS] if detail else reason
        event = _word(value.get("event"))
        return TemplateChange(**common, status=event.upper() if event else None,
                              reason=None if reason == "NONE" else reason,
                              category=_word(value.get("message_template_category")))
    if field == "message_template_quality_update":
        return TemplateChange(**common, quality=_word(value.get("new_quality_score")))
    # template_category_update: announced (correct_category + category_update_timestamp: new_category is still the
    # current one) or done (previous_category + new_category).
    # https://developers.facebook.com/documentation/business-messaging/whatsapp/webhooks/reference/
    # template_category_update
    correct = _word(value.get("correct_category"))
    at = _timestamp(value.get("category_update_timestamp"))
    if correct is not None:
        return TemplateChange(**common, category=_word(value.get("new_category")), category_pending=correct,
                              category_change_at=at)
    return TemplateChange(**common, category=_word(value.get("new_category")))


VANISHED_STATUS = "DELETED"
VANISHED_REASON = "not in Meta's listing (templates sync)"


def vanished(waba_id: str, known: Iterable[tuple[str, str, str | None]], listed: Iterable[TemplateChange],
             now: int) -> list[TemplateChange]:
    """The templates of `waba_id` wa-outbox knows (`known`: name, language, status) that Meta's whole listing
    (`listed`) no longer has, as changes to DELETED (those already DELETED: none). Only for a listing read to its end:
    a page not read would make its templates look deleted."""
    seen = {(c.name, c.language) for c in listed}
    return [TemplateChange(event_id=None, waba_id=waba_id, name=name, language=language, status=VANISHED_STATUS,
                           reason=VANISHED_REASON, ts=now)
            for name, language, status in known
            if (name, language) not in seen and (status or "").upper() != VANISHED_STATUS]


def sync_change(waba_id: str, item: Any, now: int) -> TemplateChange | None:
    """One element of `GET /{waba-id}/message_templates`'s `data` as a TemplateChange (None: not a template)."""
    if not isinstance(item, dict):
        return None
    name = _word(item.get("name"), MAX_NAME_CHARS)
    language = _word(item.get("language"), MAX_LANGUAGE_CHARS)
    waba = _id(waba_id)
    if waba is None or name is None or language is None:
        return None
    quality = item.get("quality_score")
    status = _word(item.get("status"))
    components = item.get("components")
    return TemplateChange(
        event_id=None, waba_id=waba, name=name, language=language, template_id=_id(item.get("id")),
        status=status.upper() if status else None, category=_word(item.get("category")),
        reason=_word(item.get("rejected_reason"), MAX_REASON_CHARS) if item.get("rejected_reason") != "NONE" else None,
        quality=_word(quality.get("score")) if isinstance(quality, dict) else _word(quality),
        components=components if isinstance(components, list) else None, ts=now)
