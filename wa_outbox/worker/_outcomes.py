"""From a send's Decision to the row's next state: status, timeline event, delay. Pure."""

from __future__ import annotations

from typing import Any

from ..queries import Claimed  # claim_notifications.sql's row
from ..retry import RetryPolicy
from ..states import MessageStatus as S, TimelineEvent as E
from ..templates import UNREGISTERED_PAUSE_SECONDS
from ._classify import Action, Decision


def request_body(row: Claimed) -> dict[str, Any]:
    """The Cloud API body: the stored message plus the fields wa-outbox owns. The outbox id rides in
    biz_opaque_callback_data, which Meta echoes on every status webhook of this message; a tracker the caller put
    there follows it as "<outbox id>:<tracker>" (its length was checked at enqueue against Meta's 512)."""
    theirs = row.message.get("biz_opaque_callback_data")
    return {"messaging_product": "whatsapp", "recipient_type": "individual", "to": f"+{row.recipient}",
            **row.message, "biz_opaque_callback_data": f"{row.id}:{theirs}" if theirs else str(row.id)}


def outcome(row: Claimed, decision: Decision, policy: RetryPolicy, elapsed_ms: float) -> dict[str, Any]:
    """The record_outcomes entry for one send."""
    error = None if decision.action is Action.SENT else {
        "message": decision.reason, "code": decision.code, "graph_error": decision.error}
    detail: dict[str, Any] = {"ms": round(elapsed_ms, 1)}
    if decision.action is Action.SENT:
        return _entry(row, S.SENT, E.SENT, {**detail, "wamid": decision.wamid}, wamid=decision.wamid)
    if decision.action is Action.UNKNOWN:
        return _entry(row, S.UNKNOWN, E.UNKNOWN, {**detail, "reason": decision.reason}, error=error)
    if decision.action is Action.DEAD:
        return _entry(row, S.DEAD, E.DEAD, {**detail, "reason": decision.reason, "code": decision.code}, error=error)
    if decision.action is Action.HOLD_TEMPLATE:
        # Its template is paused: the worker has held it with the rest of its template (template_store.refused), so
        # this entry matches nothing; for a sender outside the registry (no template row to hold by) it waits out
        # Meta's first pause without spending the attempt.
        return _entry(row, S.QUEUED, E.TEMPLATE_HELD, {**detail, "reason": decision.reason, "code": decision.code},
                      error=error, delay=UNREGISTERED_PAUSE_SECONDS, refund=True)
    if decision.action in (Action.THROTTLE_SENDER, Action.PAUSE_SENDER, Action.PAIR_LIMIT):
        event = {Action.THROTTLE_SENDER: E.THROTTLED, Action.PAUSE_SENDER: E.SENDER_PAUSED,
                 Action.PAIR_LIMIT: E.PAIR_LIMITED}[decision.action]
        # Not the message's fault: the attempt is given back. It waits out the sender's pause; a recipient's pause
        # (4^n s, counted in the database) is applied by the next claim.
        return _entry(row, S.QUEUED, event, {**detail, "reason": decision.reason, "code": decision.code},
                      error=error, delay=decision.wait_seconds or 0.0, refund=True)
    # RETRY / RETRY_AT: an attempt spent
    backoff = policy.after_failure(row.attempts, row.max_attempts)
    if backoff is None:
        return _entry(row, S.DEAD, E.DEAD, {**detail, "reason": f"attempts exhausted ({row.attempts}): "
                                                         f"{decision.reason}", "code": decision.code}, error=error)
    delay = decision.wait_seconds if decision.action is Action.RETRY_AT and decision.wait_seconds is not None \
        else backoff
    return _entry(row, S.QUEUED, E.RETRY_SCHEDULED,
                  {**detail, "reason": decision.reason, "code": decision.code, "retry_in_s": round(delay, 3)},
                  error=error, delay=delay)


def released(row: Claimed, reason: str, delay: float) -> dict[str, Any]:
    """The record_outcomes entry for a claimed row given back before its send slot: queued again, due in `delay`
    seconds, its attempt given back (it never went on the wire)."""
    return _entry(row, S.QUEUED, E.RELEASED, {"reason": reason}, delay=delay, refund=True)


def _entry(row: Claimed, status: str, event: str, detail: dict, *, wamid: str | None = None,
           error: dict | None = None, delay: float | None = None, refund: bool = False) -> dict[str, Any]:
    return {"id": row.id, "status": status, "event": event, "wamid": wamid, "error": error, "delay": delay,
            "refund": refund, "detail": detail}
