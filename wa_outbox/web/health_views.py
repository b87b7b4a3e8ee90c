"""Liveness (`/healthz`: the process answers) and readiness (`/readyz`: the database answers and is migrated)."""

from __future__ import annotations

import psycopg
import sqlalchemy as sa
from flask import Blueprint, current_app, jsonify

from .. import queries
from .app_state import engine_of

blueprint = Blueprint("health", __name__)


@blueprint.get("/healthz")
def healthz():
    return jsonify(status="ok")


@blueprint.get("/readyz")
def readyz():
    try:
        version = queries.schema_version(engine_of(current_app))
    except psycopg.errors.UndefinedTable:
        return jsonify(status="unavailable", reason="schema not migrated: run `wa-outbox db upgrade`"), 503
    except sa.exc.SQLAlchemyError as exc:  # connecting failed, or the pool had no connection to give in time
        cause = exc.orig if isinstance(exc, sa.exc.StatementError) and exc.orig is not None else exc
        return jsonify(status="unavailable", reason=f"database: {type(cause).__name__}"), 503
    except psycopg.Error as exc:
        return jsonify(status="unavailable", reason=f"database: {type(exc).__name__}"), 503
    return jsonify(status="ready", schema_version=version)
