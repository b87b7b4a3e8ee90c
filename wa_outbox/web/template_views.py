"""The templates wa-outbox knows over HTTP, behind the same bearer tokens as the rest of /v1 (`wa-outbox templates
list|show`; what a status means for their messages: wa_outbox/templates.py).

GET /v1/templates[?waba_id=&status=&name=&language=]   the templates, with the messages each holds
GET /v1/templates/<waba_id>/<name>/<language>          one template, with its components
"""

from __future__ import annotations

import dataclasses
import re

from flask import Blueprint, current_app, jsonify, request

from .. import queries
from . import api_views
from .app_state import engine_of
from .errors import json_error

blueprint = Blueprint("templates", __name__, url_prefix="/v1")
blueprint.before_request(api_views.require_token)
_FILTERS = {"waba_id", "status", "name", "language"}
_WABA = re.compile(r"^[0-9]{1,32}$")
MAX_FILTER_CHARS = 512


def _listed(row: queries.TemplateRow) -> dict:
    return {k: v for k, v in dataclasses.asdict(row).items() if k != "components"}


@blueprint.get("/templates")
def list_templates():
    unknown = sorted(set(request.args) - _FILTERS)
    if unknown:
        return json_error(400, f"unknown parameter(s): {', '.join(unknown)}; expected {', '.join(sorted(_FILTERS))}")
    given = {k: request.args.get(k) or None for k in _FILTERS}
    if any(v is not None and (len(v) > MAX_FILTER_CHARS or "\x00" in v) for v in given.values()):
        return json_error(400, f"a filter is at most {MAX_FILTER_CHARS} characters, without NUL")
    if given["waba_id"] is not None and not _WABA.match(given["waba_id"]):
        return json_error(400, "waba_id must be digits (a WhatsApp Business Account id)")
    rows = queries.templates_list(engine_of(current_app), waba_id=given["waba_id"], status=given["status"],
                                  name=given["name"], language=given["language"])
    return jsonify(templates=[_listed(r) for r in rows])


@blueprint.get("/templates/<waba_id>/<name>/<language>")
def get_template(waba_id: str, name: str, language: str):
    if not _WABA.match(waba_id) or len(name) > MAX_FILTER_CHARS or len(language) > 32 or "\x00" in name + language:
        return json_error(400, "waba_id must be digits, name at most 512 characters, language at most 32")
    rows = queries.templates_list(engine_of(current_app), waba_id=waba_id, name=name, language=language)
    if not rows:
        return json_error(404, f"no template {name} ({language}) of WABA {waba_id} is known")
    return jsonify(dataclasses.asdict(rows[0]))
