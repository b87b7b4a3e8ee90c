"""The web process: webhook receiver, enqueue API, ops page, health and metrics. Views stay thin."""

from __future__ import annotations

import datetime
import logging
import os
import re
import uuid

import sqlalchemy as sa
from flask import Flask, g, request
from flask.json.provider import DefaultJSONProvider

from .. import db, logs, metrics
from ..config import Settings
from ..db import create_engine
from ..webhook_store import WebhookStore
from . import api_views, campaign_views, errors, health_views, openapi_views, ops_views, webhook_views

_CORRELATION_ID = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")


def create_app(settings: Settings, *, engine: sa.Engine | None = None, metrics: bool = True) -> Flask:
    """The web app. `engine`, if given, must be in autocommit mode. `metrics=False` for a second app in one process
    (Prometheus metrics are process-global)."""
    settings.require_web()
    app = Flask("wa_outbox")
    app.config["MAX_CONTENT_LENGTH"] = settings.webhook_max_bytes
    app.extensions["wa_outbox.settings"] = settings
    # Every statement the web app runs is a transaction on its own (or opens one explicitly), so its pool is in
    # autocommit: no BEGIN/COMMIT round trips, no isolation level switched per checkout.
    app.extensions["wa_outbox.engine"] = engine or create_engine(
        settings.database_url,
        pool_size=settings.db_pool_size or settings.web_threads,  # one connection per request thread
        application_name="wa-outbox-web",
        isolation_level="AUTOCOMMIT",
    )
    app.extensions["wa_outbox.webhook_store"] = WebhookStore(app.extensions["wa_outbox.engine"])

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
    app.register_blueprint(api_views.blueprint)
    app.register_blueprint(openapi_views.blueprint)
    ops_views.install(app)
    app.register_blueprint(campaign_views.blueprint)
    app.json = _IsoJSONProvider(app)
    if metrics:
        _install_metrics(app)
    return app


class _IsoJSONProvider(DefaultJSONProvider):
    """Timestamps as ISO 8601 (Flask's default is the HTTP date format, which drops the microseconds)."""
    sort_keys = False

    @staticmethod
    def default(o):
        if isinstance(o, (datetime.datetime, datetime.date)):
            return o.isoformat()
        return DefaultJSONProvider.default(o)


def _install_metrics(app: Flask) -> None:
    @app.before_request
    def _refresh_queue_gauges():
        if request.path == "/metrics":  # read the queues from Postgres at scrape time
            try:
                rows = db.fetch(engine_of(app), "queue_metrics")
                metrics.refresh_queue_gauges(rows)
            except Exception:  # noqa: BLE001 - request metrics are still worth serving
                logging.getLogger(__name__).exception("queue metrics unavailable")

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

