"""Every error answers JSON: {"error": {"status", "message"}}. Input errors and database errors are mapped to HTTP
here, in one place: bad input is a 4xx, a database that cannot be reached a 503, never a 500 for either."""

from __future__ import annotations

import logging

import psycopg
import sqlalchemy as sa
from flask import Flask, jsonify
from werkzeug.exceptions import HTTPException

from ..messages import InvalidMessage

log = logging.getLogger(__name__)


def json_error(status: int, message: str, **extra):
    body = {"error": {"status": status, "message": message, **extra}}
    return jsonify(body), status


def database_error(exc: psycopg.Error):
    """A refusal by the database: its own words for what the caller sent (the rules in wa_outbox.enqueue() and the
    other SQL functions), or 503 when it cannot be reached."""
    if isinstance(exc, psycopg.errors.UniqueViolation):  # an idempotency key reused for a different message
        return json_error(409, exc.diag.message_primary or "conflict")
    if isinstance(exc, psycopg.errors.DataError):  # class 22: invalid_parameter_value, out of range, encoding …
        return json_error(400, exc.diag.message_primary or "invalid value")
    if isinstance(exc, psycopg.OperationalError):
        log.warning("database unavailable: %s", exc)
        return json_error(503, "database unavailable; try again")
    log.exception("database error", exc_info=exc)
    return json_error(500, "internal error")


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

    @app.errorhandler(InvalidMessage)
    def _invalid_message(exc: InvalidMessage):
        return json_error(400, str(exc))

    @app.errorhandler(psycopg.Error)
    def _database_error(exc: psycopg.Error):
        return database_error(exc)

    @app.errorhandler(sa.exc.DBAPIError)
    def _wrapped_database_error(exc: sa.exc.DBAPIError):  # SQLAlchemy's wrapper, e.g. a failed pool connect
        if isinstance(exc.orig, psycopg.Error):
            return database_error(exc.orig)
        log.exception("database error")
        return json_error(500, "internal error")

    @app.errorhandler(sa.exc.TimeoutError)
    def _pool_exhausted(exc: sa.exc.TimeoutError):
        log.warning("no database connection free: %s", exc)
        return json_error(503, "database busy; try again")

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception):
        log.exception("unhandled error")
        return json_error(500, "internal error")
