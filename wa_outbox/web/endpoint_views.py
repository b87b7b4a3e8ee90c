"""Endpoints over HTTP, behind the same bearer tokens as the rest of /v1 (the operations of `wa-outbox endpoints`,
wa_outbox/endpoints.py). A secret is in an answer only when it is made (201 of POST, rotate-secret), never in a GET.

POST   /v1/endpoints                          register {"url", "events"?, "ordered"?, "description"?} → 201 + secret
GET    /v1/endpoints                          every endpoint
GET    /v1/endpoints/<id>                     one
POST   /v1/endpoints/<id>/disable|enable      stop delivering / deliver again (enable clears the failing state)
POST   /v1/endpoints/<id>/rotate-secret       a new secret {"overlap_hours"?}; the old one signs beside it meanwhile
DELETE /v1/endpoints/<id>                     remove it with its deliveries
GET    /v1/endpoints/<id>/deliveries          recent deliveries with their attempts (?failed=true, ?limit)
POST   /v1/endpoints/<id>/replay              {"since"?, "failed_only"?}: queue events again
"""

from __future__ import annotations

import json
import logging
from typing import Any

from flask import Blueprint, current_app, jsonify, request

from .. import endpoints
from ..secret_box import SecretKeyMissing
from . import api_views
from .app_state import engine_of, settings_of
from .errors import json_error

log = logging.getLogger(__name__)

blueprint = Blueprint("endpoints", __name__, url_prefix="/v1/endpoints")
blueprint.before_request(api_views.require_token)
MAX_BODY = 16 * 1024
_ADD_FIELDS = {"url", "events", "ordered", "description"}


def _engine():
    return engine_of(current_app)


def _body(fields: set[str], *, required: bool) -> dict[str, Any]:
    """The request's JSON object (empty when optional and absent); unknown fields refused."""
    raw = request.get_data(cache=False)
    if len(raw) > MAX_BODY:
        raise endpoints.EndpointError(f"body is larger than {MAX_BODY} bytes")
    if not raw.strip() and not required:
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise endpoints.EndpointError("body is not valid JSON") from None
    if not isinstance(data, dict):
        raise endpoints.EndpointError("body must be a JSON object")
    unknown = sorted(set(data) - fields)
    if unknown:
        raise endpoints.EndpointError(f"unknown field(s): {', '.join(unknown)}; expected {', '.join(sorted(fields))}")
    return data


@blueprint.post("")
def add_endpoint():
    data = _body(_ADD_FIELDS, required=True)
    if "url" not in data:
        raise endpoints.EndpointError('give {"url": "https://…"}')
    events = data.get("events")
    if events is not None and not isinstance(events, list):
        raise endpoints.EndpointError("events must be a list of event types (or null: every type)")
    made = endpoints.add(_engine(), settings_of(current_app), url=data["url"], event_types=events,
                         ordered=data.get("ordered", False), description=data.get("description"))
    log.info("endpoint %s added", made.endpoint.id, extra={"endpoint_id": made.endpoint.id})
    response = jsonify({**endpoints.public(made.endpoint), "secret": made.secret})
    response.headers["Location"] = f"/v1/endpoints/{made.endpoint.id}"
    response.headers["Cache-Control"] = "no-store"  # it carries the secret
    return response, 201


@blueprint.get("")
def list_endpoints():
    return jsonify(endpoints=[endpoints.public(row) for row in endpoints.list_all(_engine())])


@blueprint.get("/<endpoint_id>")
def get_endpoint(endpoint_id: str):
    return jsonify(endpoints.public(endpoints.show(_engine(), endpoint_id)))


@blueprint.post("/<endpoint_id>/disable")
def disable_endpoint(endpoint_id: str):
    return jsonify(endpoints.disable(_engine(), endpoint_id))


@blueprint.post("/<endpoint_id>/enable")
def enable_endpoint(endpoint_id: str):
    return jsonify(endpoints.enable(_engine(), endpoint_id))


@blueprint.post("/<endpoint_id>/rotate-secret")
def rotate_secret(endpoint_id: str):
    data = _body({"overlap_hours"}, required=False)
    result, secret = endpoints.rotate_secret(_engine(), settings_of(current_app), endpoint_id,
                                             data.get("overlap_hours", endpoints.DEFAULT_OVERLAP_HOURS))
    response = jsonify(id=result.id, secret=secret, secret_fingerprint=result.secret_fingerprint,
                       previous_secret_until=result.previous_secret_until)
    response.headers["Cache-Control"] = "no-store"
    return response


@blueprint.delete("/<endpoint_id>")
def remove_endpoint(endpoint_id: str):
    endpoints.remove(_engine(), endpoint_id)
    log.info("endpoint %s removed", endpoint_id, extra={"endpoint_id": endpoint_id})
    return jsonify(id=endpoint_id, removed=True)


@blueprint.get("/<endpoint_id>/deliveries")
def list_deliveries(endpoint_id: str):
    failed = request.args.get("failed", "false").lower()
    if failed not in ("true", "false"):
        raise endpoints.EndpointError("?failed must be true or false")
    raw_limit = request.args.get("limit", "50")
    if not raw_limit.isascii() or not raw_limit.isdigit() or len(raw_limit) > 4:
        raise endpoints.EndpointError(f"?limit must be 1 to {endpoints.MAX_DELIVERIES_SHOWN}")
    rows = endpoints.deliveries(_engine(), endpoint_id, failed=failed == "true", limit=int(raw_limit))
    return jsonify(deliveries=rows)


@blueprint.post("/<endpoint_id>/replay")
def replay(endpoint_id: str):
    data = _body({"since", "failed_only"}, required=False)
    failed_only = data.get("failed_only", False)
    if not isinstance(failed_only, bool):
        raise endpoints.EndpointError("failed_only must be true or false")
    result = endpoints.replay(_engine(), endpoint_id, since=data.get("since"), failed_only=failed_only)
    return jsonify(id=endpoint_id, requeued=result.requeued, inserted=result.inserted)


@blueprint.errorhandler(endpoints.EndpointNotFound)
def _not_found(exc: endpoints.EndpointNotFound):
    return json_error(404, str(exc))


@blueprint.errorhandler(endpoints.EndpointError)
def _refused(exc: endpoints.EndpointError):
    return json_error(400, str(exc))


@blueprint.errorhandler(SecretKeyMissing)
def _no_key(exc: SecretKeyMissing):
    # The service, not the request, lacks something: until WA_OUTBOX_SECRET_KEY is set no secret can be stored.
    return json_error(503, str(exc))
