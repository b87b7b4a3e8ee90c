"""GET /v1/openapi.json: the OpenAPI 3.1 description of /v1 (wa_outbox/web/openapi.json, shipped in the package).

Served without a token, unlike the rest of /v1: it describes the API (as the documentation does), holds no data, and API
tools (Swagger UI, client generators) fetch it without credentials. tests/db/test_openapi.py keeps it true to the
routes Flask serves.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from flask import Blueprint, Response, jsonify

from .. import __version__

blueprint = Blueprint("openapi", __name__, url_prefix="/v1")


@functools.cache
def document() -> dict[str, Any]:
    text = resources.files(__package__).joinpath("openapi.json").read_text(encoding="utf-8")
    described: dict[str, Any] = json.loads(text)
    described["info"]["version"] = __version__
    return described


@blueprint.get("/openapi.json")
def openapi() -> Response:
    return jsonify(document())
