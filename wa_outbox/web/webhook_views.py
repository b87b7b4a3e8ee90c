"""`GET|POST /webhooks/whatsapp`: Meta's verification handshake and the webhook receiver.

The POST does, in order: signature over the raw bytes (under every active secret of every registered app and
WHATSAPP_APP_SECRET, held in memory: registry_watch.py), parse, split into events (sanitized where jsonb could not
hold them, or one dead event for JSON that cannot be split), route them (webhook_routing.py: a WABA or number of
another app refuses the POST), one INSERT … ON CONFLICT DO NOTHING, answer 200. Nothing else runs before the answer;
the workers process the stored events later.

A POST that will be stored takes `WebhookFastPath`, a WSGI layer in front of Flask that does exactly the steps above
without Flask's request cycle (request context, hooks, response object), which cost as much CPU as the rest of the
receiver. Every other answer — 401, 403 (a wrong signature, or another app's WABA), 400, 413, a database error — is
the Flask view's: the fast path hands it the
request, body included, so those answers stay written once, here.
"""

from __future__ import annotations

import hmac
import io
import json
import logging
import time

from flask import Blueprint, Flask, current_app, g, jsonify, request
from werkzeug.exceptions import RequestEntityTooLarge

from .. import logs, metrics
from ..registry_watch import RegistryWatch
from ..webhook_routing import Routed, WrongApp, route
from ..webhooks import SIGNATURE_HEADER, WEBHOOK_PATH, PayloadError, SignatureError, WebhookEvent, events_of_body
from .app_state import settings_of
from .errors import json_error

log = logging.getLogger(__name__)
blueprint = Blueprint("webhooks", __name__)

PATH = WEBHOOK_PATH
# WSGI environ keys by which the fast path hands a request over to the Flask view.
CORRELATION_ID_KEY = "wa_outbox.correlation_id"  # the id the fast path chose (and logged under)
_STORE_ERROR_KEY = "wa_outbox.webhook_store_error"  # storing failed: the view raises it, so errors.py answers


@blueprint.get(PATH)
def verify_subscription():
    mode = request.args.get("hub.mode", "")
    token = request.args.get("hub.verify_token", "")
    challenge = request.args.get("hub.challenge", "")
    expected = settings_of(current_app).verify_token or ""
    if mode == "subscribe" and hmac.compare_digest(token.encode(), expected.encode()):
        return challenge, 200, {"Content-Type": "text/plain; charset=utf-8"}
    return json_error(403, "verification failed: wrong hub.mode or hub.verify_token")


def refused_too_large(limit: int) -> None:
    """A webhook POST refused for its size, by this view or by the web's worker before the app saw it
    (gunicorn_worker.py): counted as too_large, never as a bad signature (WaOutboxBadWebhookSignatures)."""
    metrics.webhook_rejected.labels(reason=metrics.Rejection.TOO_LARGE).inc()
    log.warning("webhook rejected: body larger than %s bytes", limit)


@blueprint.post(PATH)
def receive():
    try:
        body = _whole_body()
    except RequestEntityTooLarge:  # answered 413 by errors.py
        refused_too_large(current_app.config["MAX_CONTENT_LENGTH"])
        raise
    try:
        watch = current_app.extensions["wa_outbox.registry"]
        events, routed = accept(watch, body, request.headers.get(SIGNATURE_HEADER))
    except SignatureError as exc:
        metrics.webhook_rejected.labels(reason=metrics.Rejection.SIGNATURE).inc()
        log.warning("webhook rejected: %s", exc)
        return json_error(exc.status, str(exc))
    except PayloadError as exc:
        metrics.webhook_rejected.labels(reason=metrics.Rejection.PAYLOAD).inc()
        log.warning("webhook rejected: %s", exc)
        return json_error(400, str(exc))
    except WrongApp as exc:
        metrics.webhook_rejected.labels(reason=metrics.Rejection.WRONG_APP).inc()
        log.warning("webhook rejected: %s", exc)
        return json_error(exc.status, str(exc))
    failed = request.environ.pop(_STORE_ERROR_KEY, None)
    if failed is not None:  # the fast path's INSERT failed: answer as for any database error
        raise failed
    new = current_app.extensions["wa_outbox.webhook_store"].store(events, g.correlation_id, body, routed.app_id,
                                                                  routed.unregistered)
    _count(len(events), new, routed)
    return jsonify(_answer(len(events), new))


def accept(watch: RegistryWatch, body: bytes, signature: str | None) -> tuple[list[WebhookEvent], Routed]:
    """The events of a POST and how they are routed: SignatureError, PayloadError or WrongApp when it is refused."""
    routes = watch.routes  # one registry for the whole POST, whatever a reload does meanwhile
    verified_by = routes.verify(body, signature, time.time())
    events = events_of_body(body)
    return events, route(routes, verified_by, events)


def _whole_body() -> bytes:
    """The raw body; RequestEntityTooLarge past MAX_CONTENT_LENGTH. With a Content-Length Werkzeug refuses a
    larger one before reading; a chunked body it reads up to the limit and returns cut there (which would then
    fail the signature), so it reads one byte more and refuses a body that has it."""
    limit = current_app.config["MAX_CONTENT_LENGTH"]
    if limit is None or request.content_length is not None:
        return request.get_data(cache=False)
    request.max_content_length = limit + 1
    body = request.get_data(cache=False)
    if len(body) > limit:
        raise RequestEntityTooLarge()
    return body


def _answer(received: int, new: int) -> dict[str, int]:
    return {"received": received, "new": new, "duplicate": received - new}


def _count(received: int, new: int, routed: Routed) -> None:
    if new:
        metrics.webhook_events.labels(result=metrics.WebhookResult.NEW).inc(new)
    if received - new:
        metrics.webhook_events.labels(result=metrics.WebhookResult.DUPLICATE).inc(received - new)
    if routed.unregistered is not None:
        _count_unregistered(routed)


def _count_unregistered(routed: Routed) -> None:
    if routed.numbers:
        metrics.webhook_unregistered.labels(kind=metrics.Unregistered.NUMBER).inc(routed.numbers)
    if routed.wabas:
        metrics.webhook_unregistered.labels(kind=metrics.Unregistered.WABA).inc(routed.wabas)


class WebhookFastPath:
    """WSGI middleware (`app.wsgi_app`): POST /webhooks/whatsapp stored and answered 200 without Flask's request
    cycle, byte for byte as the view answers it — the same JSON, `X-Correlation-Id`, the request metrics of
    prometheus-flask-exporter, the console's line per request. Anything else goes to `flask_wsgi_app`."""

    def __init__(self, app: Flask, flask_wsgi_app, request_metrics: tuple | None) -> None:
        self.flask_wsgi_app = flask_wsgi_app
        self.app = app
        self.watch = app.extensions["wa_outbox.registry"]
        self.store = app.extensions["wa_outbox.webhook_store"]
        # (duration histogram, total counter) of prometheus-flask-exporter, children resolved once for the only
        # answer this path gives; None when the app has no request metrics.
        self.request_metrics = None
        if request_metrics is not None:
            duration, total = request_metrics
            self.request_metrics = (duration.labels(method="POST", url_rule=PATH, status="200"),
                                    total.labels(method="POST", status="200"))

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO") != PATH or environ.get("REQUEST_METHOD") != "POST" or self.app.debug:
            return self.flask_wsgi_app(environ, start_response)
        started = time.perf_counter()
        length = environ.get("CONTENT_LENGTH", "")
        max_length = self.app.config["MAX_CONTENT_LENGTH"]
        if not length.isdigit() or (max_length is not None and int(length) > max_length):
            return self.flask_wsgi_app(environ, start_response)  # chunked, or the view's 413
        body = environ["wsgi.input"].read(int(length))
        correlation_id = logs.correlation_id_of(environ.get("HTTP_X_CORRELATION_ID", ""))
        environ[CORRELATION_ID_KEY] = correlation_id
        if len(body) != int(length):  # the client went away: the view says how
            return self._to_flask(environ, start_response, body)
        try:
            events, routed = accept(self.watch, body, environ.get("HTTP_X_HUB_SIGNATURE_256"))
        except Exception:  # noqa: BLE001 - 401, 403, 400 (or anything unforeseen): the view answers it
            return self._to_flask(environ, start_response, body)
        logs.correlation_id.set(correlation_id)
        try:
            new = self.store.store(events, correlation_id, body, routed.app_id, routed.unregistered)
        except Exception as exc:  # noqa: BLE001 - answered by the view's error handlers
            environ[_STORE_ERROR_KEY] = exc
            return self._to_flask(environ, start_response, body)
        _count(len(events), new, routed)
        answer = (json.dumps(_answer(len(events), new), separators=(",", ":")) + "\n").encode()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(answer))),
                                  ("X-Correlation-Id", correlation_id)])
        if self.request_metrics is not None:
            duration, total = self.request_metrics
            duration.observe(max(time.perf_counter() - started, 0))
            total.inc()
        if logs.events.isEnabledFor(logging.DEBUG):
            logs.events.debug("POST %s 200 %.1f ms", PATH, (time.perf_counter() - started) * 1000)
        return [answer]

    def _to_flask(self, environ, start_response, body: bytes):
        environ["wsgi.input"] = io.BytesIO(body)
        return self.flask_wsgi_app(environ, start_response)

