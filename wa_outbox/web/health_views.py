"""Liveness (`/healthz`: the process answers) and readiness (`/readyz`: the database answers and is migrated)."""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify
import psycopg
import sqlalchemy as sa

from ..db import query

blueprint = Blueprint("health", __name__)


@blueprint.get("/healthz")
def healthz():
    return jsonify(status="ok")


@blueprint.get("/readyz")
def readyz():
    from . import engine_of
    try:
        with engine_of(current_app).connect() as conn:
            version = conn.exec_driver_sql(query("schema_version")).scalar()
    except sa.exc.ProgrammingError as exc:
        if isinstance(exc.orig, psycopg.errors.UndefinedTable):
            return jsonify(status="unavailable", reason="schema not migrated: run `wa-outbox db upgrade`"), 503
        raise
    except sa.exc.SQLAlchemyError as exc:
        return jsonify(status="unavailable", reason=f"database: {type(exc.orig or exc).__name__}"), 503
    return jsonify(status="ready", schema_version=version)
