"""The inbound pipeline: drain stored webhook events in batches.

- statuses update their messages (apply_statuses.sql: by wamid or by the echoed outbox id, forward only);
- inbound messages open the 24-hour window (contacts) and go to the application's handlers;
- other changes (template, account, calls …) go to the handlers.
A handler that raises is retried with backoff and ends `dead` like an outbound message. Handlers are called at
least once per event (a worker killed mid-batch means the batch runs again): make them idempotent on event["id"].
"""

from __future__ import annotations

import importlib
import json
import logging
from typing import Any, Callable

import sqlalchemy as sa

from .. import db
from ..config import ConfigError
from ..retry import RetryPolicy

log = logging.getLogger("wa_outbox.inbound")

Handler = Callable[[dict[str, Any]], Any]
STATUS_RETRY_SECONDS = 2.0  # a status for a message whose send is still being recorded: look again shortly


def load_handlers(paths: tuple[str, ...]) -> list[Handler]:
    handlers = []
    for path in paths:
        module_name, _, attr = path.partition(":")
        try:
            handler = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"WA_OUTBOX_INBOUND_HANDLERS: cannot load {path!r}: {exc}") from None
        if not callable(handler):
            raise ConfigError(f"WA_OUTBOX_INBOUND_HANDLERS: {path!r} is not callable")
        handlers.append(handler)
    return handlers


class InboundProcessor:
    def __init__(self, engine: sa.Engine, worker_id: str, handlers: list[Handler],
                 policy: RetryPolicy, lease_seconds: float, batch_size: int = 200):
        self.engine = engine
        self.worker_id = worker_id
        self.handlers = handlers
        self.policy = policy
        self.lease_seconds = lease_seconds
        self.batch_size = batch_size
        self.stats = {"processed": 0, "statuses": 0, "messages": 0, "failed": 0}

    def process_batch(self) -> int:
        """Claim and process one batch; return how many events it held."""
        events = db.fetch(self.engine, "claim_webhook_events", {
            "limit": self.batch_size, "worker_id": self.worker_id, "lease_seconds": self.lease_seconds})
        if not events:
            return 0
        outcomes: dict[int, dict] = {}
        statuses = [e for e in events if e["kind"] == "status"]
        if statuses:
            outcomes.update(self._apply_statuses(statuses))
        messages = [e for e in events if e["kind"] == "message" and e["field"] == "messages"]
        if messages:
            db.execute(self.engine, "record_inbound_messages", {"messages": json.dumps(
                [_contact_of(e) for e in messages])})
        for event in events:
            if event["kind"] != "status":
                outcomes[event["id"]] = self._handle(event)
        db.execute(self.engine, "finish_webhook_events", {"worker_id": self.worker_id,
                                                      "outcomes": json.dumps(list(outcomes.values()))})
        self.stats["processed"] += len(events)
        self.stats["statuses"] += len(statuses)
        self.stats["messages"] += len(messages)
        return len(events)

    def _apply_statuses(self, statuses: list[dict]) -> dict[int, dict]:
        entries = []
        for e in statuses:
            item = e["payload"]["value"]["statuses"][0]
            callback = item.get("biz_opaque_callback_data")
            entries.append({
                "event_id": e["id"], "wamid": e["wamid"], "status": e["update_status"],
                "notification_id": int(callback) if isinstance(callback, str) and callback.isdigit()
                and len(callback) < 19 else None,
                "errors": item.get("errors"), "ts": _int_or_none(item.get("timestamp")),
            })
        rows = db.fetch(self.engine, "apply_statuses", {"statuses": json.dumps(entries)})
        outcomes = {}
        for row in rows:
            event_id, disposition = row["event_id"], row["disposition"]
            if disposition == "retry":
                outcomes[event_id] = {"id": event_id, "status": "queued", "delay": STATUS_RETRY_SECONDS,
                                      "error": "its message is still being sent"}
            else:
                outcomes[event_id] = {"id": event_id, "status": "done",
                                      "error": None if disposition == "applied" else
                                      "no message of this outbox has this wamid or id"}
        return outcomes

    def _handle(self, event: dict) -> dict:
        if not self.handlers:
            return {"id": event["id"], "status": "done"}
        public = {k: event[k] for k in ("id", "kind", "field", "phone_number_id", "wamid", "payload",
                                        "correlation_id")}
        try:
            for handler in self.handlers:
                handler(public)
            return {"id": event["id"], "status": "done"}
        except Exception as exc:  # noqa: BLE001 - the application's code: retry, then dead-letter
            self.stats["failed"] += 1
            error = f"{type(exc).__name__}: {exc}"[:1000]
            delay = self.policy.after_failure(event["attempts"], event["max_attempts"])
            if delay is None:
                log.error("inbound event %s dead after %d attempts: %s", event["id"], event["attempts"], error,
                          extra={"correlation_id": event["correlation_id"]})
                return {"id": event["id"], "status": "dead", "error": error}
            log.warning("inbound handler failed for event %s (attempt %d), retry in %.1f s: %s", event["id"],
                        event["attempts"], delay, error, extra={"correlation_id": event["correlation_id"]})
            return {"id": event["id"], "status": "queued", "delay": delay, "error": error}


def _contact_of(event: dict) -> dict:
    value = event["payload"]["value"]
    message = value["messages"][0]
    wa_id = message.get("from")
    names = {c.get("wa_id"): (c.get("profile") or {}).get("name") for c in value.get("contacts") or []
             if isinstance(c, dict)}
    return {"phone_number_id": event["phone_number_id"], "wa_id": wa_id, "profile_name": names.get(wa_id),
            "ts": _int_or_none(message.get("timestamp"))}


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
