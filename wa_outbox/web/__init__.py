"""The web process: webhook receiver, enqueue API, ops page, health and metrics. Views stay thin."""

from __future__ import annotations

import os
import re
import uuid

import sqlalchemy as sa
from flask import Flask, g, request

from .. import logs
from ..config import Settings
from ..db import create_engine
from . import errors, health_views, webhook_views

_CORRELATION_ID = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")


def create_app(settings: Settings, *, engine: sa.Engine | None = None, metrics: bool = True) -> Flask:
    """The web app. `metrics=False` for a second app in one process (Prometheus metrics are process-global)."""
    settings.require_web()
    app = Flask("wa_outbox")
    app.config["MAX_CONTENT_LENGTH"] = settings.webhook_max_bytes
    app.config["JSON_SORT_KEYS"] = False
    app.extensions["wa_outbox.settings"] = settings
    app.extensions["wa_outbox.engine"] = engine or create_engine(
        settings.database_url,
        pool_size=settings.db_pool_size or settings.web_threads,  # one connection per request thread
        application_name="wa-outbox-web",
    )
    # The webhook path runs single-statement transactions: a pool of autocommit connections of its own, so no
    # isolation level is switched per checkout.
    app.extensions["wa_outbox.autocommit_engine"] = create_engine(
        settings.database_url,
        pool_size=settings.db_pool_size or settings.web_threads,
        application_name="wa-outbox-webhooks",
        isolation_level="AUTOCOMMIT",
    )

    @app.before_request
    def _correlation_id() -> None:
        given = request.headers.get("X-Correlation-Id", "")
        g.correlation_id = given if _CORRELATION_ID.fullmatch(given) else uuid.uuid4().hex
        logs.correlation_id.set(g.correlation_id)

    @app.after_request
    def _echo_correlation_id(response):
        if "correlation_id" in g:
            response.headers["X-Correlation-Id"] = g.correlation_id
        return response

    errors.register(app)
    app.register_blueprint(webhook_views.blueprint)
    app.register_blueprint(health_views.blueprint)
    if metrics:
        _install_metrics(app)
    return app


def _install_metrics(app: Flask) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # under gunicorn: aggregate every worker process
        from prometheus_flask_exporter.multiprocess import GunicornInternalPrometheusMetrics
        GunicornInternalPrometheusMetrics(app, group_by="url_rule")
    else:
        from prometheus_flask_exporter import PrometheusMetrics
        PrometheusMetrics(app, group_by="url_rule")


def settings_of(app: Flask) -> Settings:
    return app.extensions["wa_outbox.settings"]


def engine_of(app: Flask) -> sa.Engine:
    return app.extensions["wa_outbox.engine"]


def autocommit_engine_of(app: Flask) -> sa.Engine:
    return app.extensions["wa_outbox.autocommit_engine"]
