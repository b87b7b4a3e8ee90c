"""The enqueue and support API under /v1, behind bearer tokens (WA_OUTBOX_API_TOKENS).

POST /v1/messages                  enqueue → 202 {"id", "status"}; Idempotency-Key honoured (same key → same id;
                                   a different body → 409)
GET  /v1/messages/<id>             status, attempts, last error, wamid and the timeline
GET  /v1/messages?q=<phone|corr>   recent messages to a phone number or with a correlation id
GET  /v1/dead                      the dead-letter queue (?limit, ?before_id, ?code)
POST /v1/messages/<id>/retry       requeue a dead (or Meta-failed) message
POST /v1/messages/<id>/cancel      cancel a queued message (409 naming any other status)
"""

from __future__ import annotations

import hmac
import json

from flask import Blueprint, current_app, g, jsonify, request

from .. import logs, outbox, queries
from . import auth_throttle
from .app_state import engine_of, settings_of
from .errors import json_error

blueprint = Blueprint("api", __name__, url_prefix="/v1")
MAX_API_BODY = 128 * 1024
_FIELDS = {"to", "message", "correlation_id", "phone_number_id", "ordered"}
MAX_ID = 2 ** 63 - 1  # ids are bigint
MAX_CODE = 2 ** 31 - 1  # Graph error codes are compared as integer


def _engine():
    return engine_of(current_app)


@blueprint.before_request
def require_token():
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        response, status = json_error(401, "missing bearer token: send Authorization: Bearer <token>")
        response.headers["WWW-Authenticate"] = 'Bearer realm="wa-outbox"'
        return response, status
    throttle = auth_throttle.of(current_app)
    client = throttle.client()
    wait = throttle.retry_after(client)
    if wait is not None:  # the token is not even compared: a guess now costs the wait (auth_throttle.py)
        response, status = json_error(429, f"too many invalid bearer tokens from this client; retry in {wait} s",
                                      retry_after=wait)
        response.headers["Retry-After"] = str(wait)
        return response, status
    # Compare against every token, always, so timing says nothing about which one nearly matched.
    matches = [hmac.compare_digest(token.encode(), t.encode()) for t in settings_of(current_app).api_tokens]
    if not any(matches):
        throttle.failed(client)  # counted for the summary line, never logged one by one
        response, status = json_error(401, "invalid bearer token")
        response.headers["WWW-Authenticate"] = 'Bearer realm="wa-outbox", error="invalid_token"'
        return response, status
    return None


@blueprint.post("/messages")
def create_message():
    if request.content_length is not None and request.content_length > MAX_API_BODY:
        return json_error(413, f"body is larger than {MAX_API_BODY} bytes")
    raw = request.get_data(cache=False)
    if len(raw) > MAX_API_BODY:
        return json_error(413, f"body is larger than {MAX_API_BODY} bytes")
    try:
        data = json.loads(raw, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than the parser goes
        return json_error(400, f"body is not valid JSON: {exc if isinstance(exc, ValueError) else 'nested too deep'}")
    if not isinstance(data, dict):
        return json_error(400, 'body must be a JSON object: {"to": "+5511…", "message": {…}}')
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        return json_error(400, f"unknown field(s): {', '.join(unknown)}; expected {', '.join(sorted(_FIELDS))}")
    given_key = request.headers.get("Idempotency-Key")
    # Invalid input raises InvalidMessage (400) and a reused key UniqueViolation (409): errors.py maps them.
    accepted = outbox.accept_message(
        _engine(), to=data.get("to"), message=data.get("message"), idempotency_key=given_key,
        correlation_id=data["correlation_id"] if "correlation_id" in data else g.correlation_id,
        phone_number_id=data.get("phone_number_id"), key_name="Idempotency-Key", ordered=data.get("ordered"))
    notification_id, status, created = accepted.id, accepted.status, accepted.created
    if created:
        logs.events.debug("message %s queued for +%s", notification_id, str(data.get("to")).lstrip("+").strip(),
                          extra={"notification_id": notification_id})
    response = jsonify(id=notification_id, status=status)
    response.headers["Location"] = f"/v1/messages/{notification_id}"
    if not created:
        response.headers["Idempotent-Replayed"] = "true"
    return response, 202


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


@blueprint.get("/messages/<int:notification_id>")
def get_message(notification_id: int):
    found = queries.get_notification(_engine(), id=notification_id) if notification_id <= MAX_ID else None
    if found is None:
        return json_error(404, f"no message {notification_id}")
    return jsonify(found)


@blueprint.get("/messages")
def find_messages():
    term = request.args.get("q", "").strip()
    if not term or "\x00" in term:
        return json_error(400, "give ?q=<phone number or correlation id> (text without NUL)")
    return jsonify(messages=outbox.find_messages(_engine(), term, limit=_int_arg("limit", 20, 1, 200)))


@blueprint.get("/dead")
def list_dead():
    return jsonify(dead=queries.list_dead(_engine(), limit=_int_arg("limit", 50, 1, 500),
                                          before_id=_int_arg("before_id", None, 1, MAX_ID),
                                          code=_int_arg("code", None, -MAX_CODE, MAX_CODE)))


@blueprint.post("/messages/<int:notification_id>/retry")
def retry_message(notification_id: int):
    if notification_id > MAX_ID:
        return json_error(404, f"no message {notification_id}")
    requeued = outbox.requeue(_engine(), ids=[notification_id], actor="api")
    if requeued:
        return jsonify(id=notification_id, status="queued")
    found = queries.get_notification(_engine(), id=notification_id)
    if found is None:
        return json_error(404, f"no message {notification_id}")
    return json_error(409, f"message {notification_id} is {found.status}: only dead or failed messages are "
                           "retried")


@blueprint.post("/messages/<int:notification_id>/cancel")
def cancel_message(notification_id: int):
    results = outbox.cancel(_engine(), [notification_id], actor="api") if notification_id <= MAX_ID else {}
    if notification_id not in results:
        return json_error(404, f"no message {notification_id}")
    status, cancelled = results[notification_id]
    if not cancelled:
        return json_error(409, f"message {notification_id} is {status}: only queued messages can be cancelled",
                          message_status=status)
    return jsonify(id=notification_id, status=status)


class _BadArg(Exception):
    pass


def _int_arg(name: str, default, low, high):
    raw = request.args.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _BadArg(f"?{name} must be an integer") from None
    if (low is not None and value < low) or (high is not None and value > high):
        raise _BadArg(f"?{name} must be between {low} and {high}")
    return value


@blueprint.errorhandler(_BadArg)
def _bad_arg(exc: _BadArg):
    return json_error(400, str(exc))
