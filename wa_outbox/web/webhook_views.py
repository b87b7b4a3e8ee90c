"""`GET|POST /webhooks/whatsapp`: Meta's verification handshake and the webhook receiver.

The POST does, in order: signature over the raw bytes, parse, split into events (sanitized where jsonb could not hold
them, or one dead event for JSON that cannot be split), one INSERT … ON CONFLICT DO NOTHING, answer 200. Nothing else
runs before the answer; the workers process the stored events later.
"""

from __future__ import annotations

import hmac
import logging

from flask import Blueprint, current_app, g, jsonify, request

from .. import metrics
from ..webhooks import SIGNATURE_HEADER, PayloadError, SignatureError, events_of_body, verify_signature
from .errors import json_error

log = logging.getLogger(__name__)
blueprint = Blueprint("webhooks", __name__)


@blueprint.get("/webhooks/whatsapp")
def verify_subscription():
    from . import settings_of
    mode = request.args.get("hub.mode", "")
    token = request.args.get("hub.verify_token", "")
    challenge = request.args.get("hub.challenge", "")
    expected = settings_of(current_app).verify_token or ""
    if mode == "subscribe" and hmac.compare_digest(token.encode(), expected.encode()):
        return challenge, 200, {"Content-Type": "text/plain; charset=utf-8"}
    return json_error(403, "verification failed: wrong hub.mode or hub.verify_token")


@blueprint.post("/webhooks/whatsapp")
def receive():
    from . import settings_of
    body = request.get_data(cache=False)  # raw bytes; 413 past MAX_CONTENT_LENGTH
    try:
        verify_signature(settings_of(current_app).app_secret, body, request.headers.get(SIGNATURE_HEADER))
        events = events_of_body(body)
    except SignatureError as exc:
        metrics.webhook_rejected.labels(reason="signature").inc()
        log.warning("webhook rejected: %s", exc)
        return json_error(exc.status, str(exc))
    except PayloadError as exc:
        metrics.webhook_rejected.labels(reason="payload").inc()
        log.warning("webhook rejected: %s", exc)
        return json_error(400, str(exc))
    new = current_app.extensions["wa_outbox.webhook_store"].store(events, g.correlation_id, body)
    if new:
        metrics.webhook_events.labels(result="new").inc(new)
    if len(events) - new:
        metrics.webhook_events.labels(result="duplicate").inc(len(events) - new)
    return jsonify(received=len(events), new=new, duplicate=len(events) - new)
