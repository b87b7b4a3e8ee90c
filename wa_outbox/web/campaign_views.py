"""Campaigns over HTTP, behind the same bearer tokens as the rest of /v1 (the same operations as `wa-outbox campaign`).

GET  /v1/campaigns                  every campaign with its messages counted by status
GET  /v1/campaigns/<name>           one: counts, rate, started, expected end
POST /v1/campaigns/<name>/pause     park its messages (in-flight sends finish; nothing is lost)
POST /v1/campaigns/<name>/resume    let them go again, attempts as they were
POST /v1/campaigns/<name>/cancel    cancel every still-queued message, each with a timeline event
"""

from __future__ import annotations

from flask import Blueprint, current_app, g, jsonify

from .. import campaigns
from . import api_views
from .app_state import engine_of, settings_of
from .errors import json_error

blueprint = Blueprint("campaigns", __name__, url_prefix="/v1/campaigns")
blueprint.before_request(api_views.require_token)


def _engine():
    return engine_of(current_app)


def _default_mps() -> float:
    return settings_of(current_app).rate_limit_mps


@blueprint.get("")
def list_campaigns():
    return jsonify(campaigns=campaigns.summaries(_engine(), default_mps=_default_mps()))


@blueprint.get("/<name>")
def get_campaign(name: str):
    return jsonify(campaigns.get(_engine(), name, default_mps=_default_mps()))


@blueprint.post("/<name>/<any(pause, resume, cancel):action>")
def steer_campaign(name: str, action: str):
    result = campaigns.steer(_engine(), name, action, actor=f"api ({g.correlation_id})")
    return jsonify(name=result.name, status=result.status, previous_status=result.previous_status,
                   moved=result.moved)


@blueprint.errorhandler(campaigns.CampaignNotFound)
def _not_found(exc: campaigns.CampaignNotFound):
    return json_error(404, str(exc))


@blueprint.errorhandler(campaigns.CampaignConflict)
def _conflict(exc: campaigns.CampaignConflict):
    return json_error(409, str(exc))
