"""What to do after a send, decided from what the transport saw: Graph `error.code` first, HTTP status second.
Pure: no I/O, tested without a database. The table follows Meta's error codes:
https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any


class Action(enum.Enum):
    SENT = "sent"                    # accepted: wamid returned
    RETRY = "retry"                  # transient: back off and try again (attempt counted)
    RETRY_AT = "retry_at"            # transient with a known wait (maintenance, marketing cap)
    THROTTLE_SENDER = "throttle"     # the sender is over a rate: pause it, the message waits without an attempt
    PAUSE_SENDER = "pause_sender"    # nothing will work until a human acts (auth, blocked): pause, alert
    PAIR_LIMIT = "pair_limit"        # too fast to this recipient: pause the recipient only
    HOLD_TEMPLATE = "hold_template"  # 132015: its template is paused: held with every queued message of it
    DEAD = "dead"                    # permanent: dead-letter queue now
    UNKNOWN = "unknown"              # the request may have reached Meta: settle from status webhooks


@dataclass(frozen=True)
class SendResult:
    """What happened on the wire."""
    http_status: int | None = None
    body: Any = None                   # parsed JSON, when there was some
    failure: str | None = None         # connect | read_timeout | connection_lost | bad_response
    failure_detail: str | None = None
    retry_after: float | None = None   # seconds, from a Retry-After header
    elapsed_ms: float = 0.0
    request_at: float | None = None    # time.time() when the request went (passed its deadline check), if known


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str
    code: int | None = None
    wamid: str | None = None
    wait_seconds: float | None = None  # RETRY_AT delay, or how long to pause a sender
    alert: bool = False
    error: dict | None = None          # Meta's error object, kept on the row


RETRYABLE = {1, 2, 131000, 131016, 133004}
SENDER_THROTTLED = {4, 80007, 130429}
SENDER_BROKEN = {0, 190, 368, 131031, 131042}
# The token lacks a permission (10, 200-299): every message from this sender would draw it, so the sender is paused
# with an alert, not each message dead-lettered.
TOKEN_PERMISSION = {10} | set(range(200, 300))
PERMISSION = {3, 131005}
# The account itself, not its token (blocked, locked, unpaid): a new token would not help.
ACCOUNT_BROKEN = {368, 131031, 131042}
# 100 with subcode 33 on a send: the phone number id "does not exist, cannot be loaded due to missing permissions":
# the token has no access to this number (another number's or business's token). Meta's error-codes page lists 100
# as a parameter error; the subcode says which (https://developers.facebook.com/docs/graph-api/guides/error-handling;
# the answer as sent: https://github.com/sajuthankappan/whatsapp-cloud-api-rs/issues/3).
NO_ACCESS_SUBCODE = 33
PERMANENT = {131050, 131026, 131047, 131051, 100, 131008, 131009, 131021, 133010} | set(range(132000, 132017))
ALERTING = SENDER_BROKEN | TOKEN_PERMISSION | {133010}
# Answers that say the campaign, not just this message, must stop until a human looks: the spam rate limit (131048)
# and a template disabled for its quality rating (132016). A paused template (132015) holds its messages instead,
# until Meta approves it again (wa_outbox/templates.py): the campaign goes on with them then.
# https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes
CAMPAIGN_PAUSING = {131048, 132016}
TEMPLATE_PAUSED = 132015

THROTTLE_PAUSE_SECONDS = {130429: 2.0, 80007: 60.0, 4: 60.0}
BROKEN_SENDER_PAUSE_SECONDS = 300.0   # re-probe every 5 minutes until the token or account is fixed
MAINTENANCE_WAIT_SECONDS = 60.0       # 131057: the sender is paused "about a minute"
MARKETING_CAP_WAIT_SECONDS = 86400.0  # 131049: no sooner than 24 h
SPAM_LIMIT_WAIT_SECONDS = 3600.0      # 131048: do not blind-retry


def classify(result: SendResult) -> Decision:
    if result.failure == "connect":
        return Decision(Action.RETRY, f"could not connect, nothing was sent: {result.failure_detail}")
    if result.failure in ("read_timeout", "connection_lost"):
        return Decision(Action.UNKNOWN, f"{result.failure.replace('_', ' ')} after the request was sent: "
                                        f"{result.failure_detail}")
    status = result.http_status or 0
    body = result.body if isinstance(result.body, dict) else {}
    if 200 <= status < 300:
        messages = body.get("messages")
        wamid = messages[0].get("id") if isinstance(messages, list) and messages and isinstance(messages[0], dict) \
            else None
        if isinstance(wamid, str) and wamid:
            return Decision(Action.SENT, "accepted", wamid=wamid)
        return Decision(Action.UNKNOWN, f"HTTP {status} without a message id: Meta may have accepted it")

    error = body.get("error") if isinstance(body.get("error"), dict) else None
    code = error.get("code") if error else None
    code = code if isinstance(code, int) and not isinstance(code, bool) else None
    subcode = (error or {}).get("error_subcode")
    message = (error or {}).get("message") or f"HTTP {status}"
    details = ((error or {}).get("error_data") or {}).get("details") if isinstance(
        (error or {}).get("error_data"), dict) else None
    reason = f"{code}: {message}" + (f" ({details})" if details else "") if code is not None else message

    def decided(action: Action, wait: float | None = None, alert: bool = False) -> Decision:
        return Decision(action, reason, code=code, wait_seconds=wait, alert=alert or code in ALERTING, error=error)

    if code is not None:
        if code in SENDER_BROKEN or code in TOKEN_PERMISSION or (code == 100 and subcode == NO_ACCESS_SUBCODE):
            return decided(Action.PAUSE_SENDER, BROKEN_SENDER_PAUSE_SECONDS, alert=True)
        if code in SENDER_THROTTLED:
            return decided(Action.THROTTLE_SENDER, result.retry_after or THROTTLE_PAUSE_SECONDS[code])
        if code == 131056:
            return decided(Action.PAIR_LIMIT)
        if code == TEMPLATE_PAUSED:
            return decided(Action.HOLD_TEMPLATE)
        if code == 131057:
            # Maintenance / throughput upgrade: the whole number is unavailable for about a minute, so every
            # worker stops sending from it (a sender pause) and the message waits without spending an attempt.
            return decided(Action.THROTTLE_SENDER, max(result.retry_after or 0, MAINTENANCE_WAIT_SECONDS))
        if code == 131049:
            return decided(Action.RETRY_AT, MARKETING_CAP_WAIT_SECONDS)
        if code == 131048:
            return decided(Action.RETRY_AT, max(result.retry_after or 0, SPAM_LIMIT_WAIT_SECONDS), alert=True)
        if code in RETRYABLE:
            return decided(Action.RETRY_AT if result.retry_after else Action.RETRY, result.retry_after)
        if code in PERMISSION or code in PERMANENT:
            return decided(Action.DEAD)
    # An unlisted code, or no Graph error at all: the HTTP status decides.
    if status == 429:
        return decided(Action.THROTTLE_SENDER, result.retry_after or THROTTLE_PAUSE_SECONDS[130429])
    if status >= 500 or status == 0:
        return decided(Action.RETRY_AT if result.retry_after else Action.RETRY, result.retry_after)
    if result.failure == "bad_response":
        return Decision(Action.UNKNOWN, f"unreadable answer (HTTP {status}): {result.failure_detail}")
    return decided(Action.DEAD)


def may_be_the_token(result: SendResult, decision: Decision) -> bool:
    """Whether a refusal may be the token's (expired, revoked, rotated, without access to the number): the worker
    then reads the sender's token again and, if it changed since, sends again with the new one."""
    if decision.action is not Action.PAUSE_SENDER and result.http_status != 401:
        return False
    return decision.code not in ACCOUNT_BROKEN


# --- uploads of outbound media (POST /{phone-number-id}/media, worker/_uploads.py) ----------------------------------

def classify_upload(result: SendResult, media_id: int) -> tuple[str | None, Decision]:
    """Meta's media id from an upload's answer, or None and what to do with the message that needed it. Judged as a
    send is (classify()), with one difference: an upload whose answer was lost sent nothing to the recipient, so it
    is retried rather than left unknown (at worst Meta holds one more copy of the file)."""
    body = result.body if isinstance(result.body, dict) else {}
    status = result.http_status or 0
    if result.failure is None and 200 <= status < 300:
        meta_id = body.get("id")
        if isinstance(meta_id, str) and meta_id:
            return meta_id, Decision(Action.SENT, "uploaded")
        return None, Decision(Action.RETRY, f"upload of file {media_id}: HTTP {status} without a media id")
    decision = classify(result)
    if decision.action is Action.UNKNOWN:
        decision = Decision(Action.RETRY, decision.reason, code=decision.code, error=decision.error)
    return None, dataclasses.replace(decision, reason=f"upload of file {media_id} failed: {decision.reason}")
