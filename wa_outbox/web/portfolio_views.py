"""Business portfolios and Meta's messaging limit over HTTP (the operations of `wa-outbox portfolios`:
portfolios.py), behind the same bearer tokens as the rest of /v1.

GET          /v1/portfolios                  every portfolio: limit, used and remaining in the last 24 h, waiting
GET          /v1/portfolios/<portfolio_id>   one
PUT / PATCH  /v1/portfolios/<portfolio_id>   {"messaging_limit": N | "unlimited" | null}: set it (a raised limit
                                             releases the messages it held at once)
"""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify

from .. import accounts, portfolios
from . import api_views
from .account_views import _BadBody, _body
from .app_state import engine_of
from .errors import json_error

blueprint = Blueprint("portfolios", __name__, url_prefix="/v1")
blueprint.before_request(api_views.require_token)


@blueprint.get("/portfolios")
def list_portfolios():
    return jsonify(portfolios=portfolios.portfolios(engine_of(current_app)))


@blueprint.get("/portfolios/<portfolio_id>")
def get_portfolio(portfolio_id: str):
    return jsonify(portfolios.portfolio(engine_of(current_app), portfolio_id))


@blueprint.route("/portfolios/<portfolio_id>", methods=["PUT", "PATCH"])
def set_portfolio(portfolio_id: str):
    data = _body({"messaging_limit"}, {"messaging_limit"})
    row, released = portfolios.set_limit(engine_of(current_app), portfolio_id=portfolio_id,
                                         messaging_limit=data["messaging_limit"])
    return jsonify({**{k: getattr(row, k) for k in row.__dataclass_fields__}, "released": released})


@blueprint.errorhandler(_BadBody)
def _bad_body(exc: _BadBody):
    return json_error(400, str(exc))


@blueprint.errorhandler(accounts.AccountError)
def _refused(exc: accounts.AccountError):
    return json_error(exc.status, str(exc))
