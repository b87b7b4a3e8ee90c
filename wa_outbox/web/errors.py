"""Every error answers JSON: {"error": {"status", "message"}}."""

from __future__ import annotations

import logging

from flask import Flask, jsonify
from werkzeug.exceptions import HTTPException

log = logging.getLogger(__name__)


def json_error(status: int, message: str, **extra):
    body = {"error": {"status": status, "message": message, **extra}}
    return jsonify(body), status


def register(app: Flask) -> None:
    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException):
        message = exc.description or exc.name
        if exc.code == 413:
            message = f"body is larger than the limit of {app.config['MAX_CONTENT_LENGTH']} bytes"
        response, status = json_error(exc.code or 500, message)
        for header in ("Allow", "WWW-Authenticate"):
            if exc.get_response().headers.get(header):
                response.headers[header] = exc.get_response().headers[header]
        return response, status

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception):
        log.exception("unhandled error")
        return json_error(500, "internal error")
