"""The registry over HTTP, behind the same bearer tokens as the rest of /v1 (the operations of `wa-outbox apps` and
`wa-outbox senders`: accounts.py). A secret or token comes in the JSON body (over TLS) and is never echoed: answers
carry fingerprints, and for a reference the variable's name (resolved in the web's own environment).

GET    /v1/apps                       every app               POST   /v1/apps              register one
GET    /v1/apps/<app_id>              one app                 PATCH  /v1/apps/<app_id>     rotate its secret
DELETE /v1/apps/<app_id>              remove it (409 while business accounts belong to it)
GET    /v1/senders                    every sender (and the environment's)
POST   /v1/senders                    register one, or update it
GET    /v1/senders/<phone_number_id>  one sender              PATCH  …/<phone_number_id>   replace its token
                                                              (and/or follow_meta_throughput)
DELETE /v1/senders/<phone_number_id>  remove it
"""

from __future__ import annotations

import json
from typing import Any

from flask import Blueprint, current_app, jsonify, request

from .. import accounts
from ..config import ConfigError
from . import api_views
from .app_state import engine_of, settings_of
from .errors import json_error

blueprint = Blueprint("accounts", __name__, url_prefix="/v1")
blueprint.before_request(api_views.require_token)
MAX_BODY = 16 * 1024


class _BadBody(ValueError):
    pass


def _body(allowed: set[str], required: set[str]) -> dict[str, Any]:
    """The request's JSON object, with only `allowed` fields and every `required` one."""
    raw = request.get_data(cache=False)
    if len(raw) > MAX_BODY:
        raise _BadBody(f"body is larger than {MAX_BODY} bytes")
    try:
        data = json.loads(raw or b"null")
    except (ValueError, RecursionError):
        raise _BadBody("body is not valid JSON") from None
    if not isinstance(data, dict):
        raise _BadBody("body must be a JSON object")
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise _BadBody(f"unknown field(s): {', '.join(unknown)}; expected {', '.join(sorted(allowed))}")
    missing = sorted(required - set(data))
    if missing:
        raise _BadBody(f"missing field(s): {', '.join(missing)}")
    return data


def _secret(data: dict[str, Any], kind: str) -> accounts.Secret:
    """Exactly one of `<kind>` (the value: stored encrypted) and `<kind>_ref` (a variable's name)."""
    given = [k for k in (kind, f"{kind}_ref") if data.get(k) is not None]
    if len(given) != 1:
        raise _BadBody(f"give exactly one of {kind!r} (stored encrypted) and {kind + '_ref'!r} (a variable's name)")
    if given[0] == kind:
        return accounts.Secret.given(data[kind], f"the {kind}")
    return accounts.Secret.reference(data[f"{kind}_ref"], f"the {kind}")


def _engine():
    return engine_of(current_app)


def _settings():
    return settings_of(current_app)


# --- apps ------------------------------------------------------------------------------------------------------------

@blueprint.get("/apps")
def list_apps():
    return jsonify(apps=accounts.apps(_engine()))


@blueprint.post("/apps")
def register_app():
    data = _body({"app_id", "secret", "secret_ref", "name"}, {"app_id"})
    row, created = accounts.add_app(_engine(), _settings(), app_id=data["app_id"], secret=_secret(data, "secret"),
                                    name=data.get("name"))
    response = jsonify(row)
    response.headers["Location"] = f"/v1/apps/{row.app_id}"
    return response, 201 if created else 200


@blueprint.get("/apps/<app_id>")
def get_app(app_id: str):
    return jsonify(accounts.app(_engine(), app_id))


@blueprint.patch("/apps/<app_id>")
def rotate_app_secret(app_id: str):
    data = _body({"secret", "secret_ref", "overlap_hours"}, set())
    return jsonify(accounts.rotate_app_secret(
        _engine(), _settings(), app_id=app_id, secret=_secret(data, "secret"),
        overlap_hours=data.get("overlap_hours", accounts.DEFAULT_OVERLAP_HOURS)))


@blueprint.delete("/apps/<app_id>")
def delete_app(app_id: str):
    accounts.remove_app(_engine(), app_id=app_id)
    return jsonify(app_id=app_id, removed=True)


# --- senders ---------------------------------------------------------------------------------------------------------

_SENDER_FIELDS = {"phone_number_id", "waba_id", "app_id", "token", "token_ref", "portfolio_id", "mps", "alias",
                  "display_phone_number", "follow_meta_throughput"}


@blueprint.get("/senders")
def list_senders():
    return jsonify(senders=accounts.senders(_engine(), _settings()))


@blueprint.post("/senders")
def create_sender():
    data = _body(_SENDER_FIELDS, {"phone_number_id", "waba_id", "app_id"})
    row, created = accounts.add_sender(
        _engine(), _settings(), phone_number_id=data["phone_number_id"], waba_id=data["waba_id"],
        app_id=data["app_id"], token=_secret(data, "token"), portfolio_id=data.get("portfolio_id"),
        mps=data.get("mps"), alias=data.get("alias"), display_phone_number=data.get("display_phone_number"),
        follow_meta_throughput=data.get("follow_meta_throughput"))
    response = jsonify(row)
    response.headers["Location"] = f"/v1/senders/{row.phone_number_id}"
    return response, 201 if created else 200


@blueprint.get("/senders/<phone_number_id>")
def get_sender(phone_number_id: str):
    return jsonify(accounts.sender(_engine(), _settings(), phone_number_id))


@blueprint.patch("/senders/<phone_number_id>")
def set_sender_token(phone_number_id: str):
    data = _body({"token", "token_ref", "follow_meta_throughput"}, set())
    if "follow_meta_throughput" in data and not {"token", "token_ref"} & set(data):  # only the setting: no token
        return jsonify(accounts.set_follow_meta(_engine(), _settings(), phone_number_id=phone_number_id,
                                                follow=data["follow_meta_throughput"]))
    row = accounts.set_token(_engine(), _settings(), phone_number_id=phone_number_id, token=_secret(data, "token"))
    if "follow_meta_throughput" in data:
        row = accounts.set_follow_meta(_engine(), _settings(), phone_number_id=phone_number_id,
                                       follow=data["follow_meta_throughput"])
    return jsonify(row)


@blueprint.delete("/senders/<phone_number_id>")
def delete_sender(phone_number_id: str):
    waba_id = accounts.remove_sender(_engine(), phone_number_id=phone_number_id)
    return jsonify(phone_number_id=phone_number_id, removed=True, business_account_removed=waba_id)


# --- refusals: 4xx JSON, nothing changed -----------------------------------------------------------------------------

@blueprint.errorhandler(_BadBody)
def _bad_body(exc: _BadBody):
    return json_error(400, str(exc))


@blueprint.errorhandler(accounts.AccountError)
def _refused(exc: accounts.AccountError):
    return json_error(exc.status, str(exc))


@blueprint.errorhandler(ConfigError)
def _not_configured(exc: ConfigError):
    """WA_OUTBOX_SECRET_KEY unset (a secret cannot be stored; a `…_ref` can), or a stored secret it cannot read."""
    return json_error(409, str(exc))
