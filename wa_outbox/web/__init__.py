"""The web process: webhook receiver, enqueue API, ops page, health and metrics. Views stay thin."""

from __future__ import annotations

import datetime
import glob
import hmac
import logging
import os
import struct
import time

import psycopg
import sqlalchemy as sa
from flask import Flask, g, request
from flask.json.provider import DefaultJSONProvider
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_flask_exporter import PrometheusMetrics
from prometheus_flask_exporter.multiprocess import GunicornPrometheusMetrics

from .. import logs, metrics, queries
from ..config import DEFAULT_WEB_POOL_SIZE, ConfigError, Settings
from ..db import create_engine
from ..registry_watch import RegistryWatch
from ..webhook_store import WebhookStore
from . import (
    account_views,
    api_views,
    campaign_views,
    endpoint_views,
    errors,
    event_views,
    health_views,
    media_download_views,
    media_upload_views,
    openapi_views,
    ops_views,
    portfolio_views,  # the messaging limit (issue 20)
    webhook_views,
)
from .app_state import engine_of, settings_of


def create_app(settings: Settings, *, engine: sa.Engine | None = None, metrics: bool = True) -> Flask:
    """The web app. `engine`, if given, must be in autocommit mode. `metrics=False` for a second app in one process
    (Prometheus metrics are process-global). ConfigError when WHATSAPP_APP_SECRET is unset and no app is registered
    (the registry is read here, where the app has its engine)."""
    settings.require_web(apps_registered=True)
    app = Flask("wa_outbox")
    app.config["MAX_CONTENT_LENGTH"] = settings.webhook_max_bytes
    app.extensions["wa_outbox.settings"] = settings
    # Every statement the web app runs is a transaction on its own (or opens one explicitly), so its pool is in
    # autocommit: no BEGIN/COMMIT round trips, no isolation level switched per checkout.
    app.extensions["wa_outbox.engine"] = engine or create_engine(
        settings.required("database_url"),
        pool_size=settings.db_pool_size or min(settings.web_threads, DEFAULT_WEB_POOL_SIZE),
        application_name="wa-outbox-web",
        isolation_level="AUTOCOMMIT",
        prepared_statements=settings.db_prepared_statements,
    )
    # The registry in memory, kept up to date by a thread of this process: what webhooks are verified and routed by.
    try:
        app.extensions["wa_outbox.registry"] = RegistryWatch(app.extensions["wa_outbox.engine"], settings).start()
    except ConfigError:
        if engine is None:  # the pool made here goes with the app that will not be
            app.extensions["wa_outbox.engine"].dispose()
        raise
    app.extensions["wa_outbox.webhook_store"] = WebhookStore(app.extensions["wa_outbox.engine"])

    @app.before_request
    def _correlation_id() -> None:
        # the webhook fast path hands over a request with the id it already chose (and logged under)
        g.correlation_id = (request.environ.get(webhook_views.CORRELATION_ID_KEY)
                            or logs.correlation_id_of(request.headers.get("X-Correlation-Id", "")))
        logs.correlation_id.set(g.correlation_id)
        g.started = time.perf_counter()

    @app.after_request
    def _echo_correlation_id(response):
        if "correlation_id" in g:
            response.headers["X-Correlation-Id"] = g.correlation_id
        if logs.events.isEnabledFor(logging.DEBUG) and "started" in g:  # the console's line per request
            logs.events.debug("%s %s %s %.1f ms", request.method, request.path, response.status_code,
                              (time.perf_counter() - g.started) * 1000)
        return response

    errors.register(app)
    app.register_blueprint(webhook_views.blueprint)
    app.register_blueprint(health_views.blueprint)
    app.register_blueprint(api_views.blueprint)
    app.register_blueprint(openapi_views.blueprint)
    ops_views.install(app)
    app.register_blueprint(campaign_views.blueprint)
    app.register_blueprint(endpoint_views.blueprint)
    app.register_blueprint(account_views.blueprint)
    app.register_blueprint(event_views.blueprint)
    app.register_blueprint(media_upload_views.blueprint)  # POST /v1/media (mediaout)
    app.register_blueprint(media_download_views.blueprint)  # GET /v1/media/<id> (inbound media)
    from . import template_views  # noqa: PLC0415 - issue 20, in a block of its own so merges stay mechanical
    app.register_blueprint(template_views.blueprint)
    app.register_blueprint(portfolio_views.blueprint)
    app.json = _IsoJSONProvider(app)
    request_metrics = _install_metrics(app, request_metrics=metrics)
    # Flask's documented way to wrap the app in WSGI middleware; its types declare wsgi_app a plain method
    app.wsgi_app = webhook_views.WebhookFastPath(app, app.wsgi_app, request_metrics)  # type: ignore[method-assign]
    return app


class _IsoJSONProvider(DefaultJSONProvider):
    """Timestamps as ISO 8601 (Flask's default is the HTTP date format, which drops the microseconds)."""
    sort_keys = False

    @staticmethod
    def default(o):
        if isinstance(o, (datetime.datetime, datetime.date)):
            return o.isoformat()
        return DefaultJSONProvider.default(o)


def _install_metrics(app: Flask, *, request_metrics: bool) -> tuple | None:
    """`GET /metrics`: the request metrics and the web process's counters (aggregated over gunicorn's worker
    processes in multiprocess mode), plus what is read from Postgres for this scrape (queues, heartbeats, the
    workers' metrics, `wa_outbox_database_up`) — built once per scrape by the process answering it, so never
    repeated per gunicorn worker. With WA_OUTBOX_METRICS_TOKEN set, it needs `Authorization: Bearer <token>`.

    Returns the exporter's (request duration histogram, request counter), for the webhook fast path to count what
    the exporter's hooks count; None without request metrics."""
    multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
    exporter = None
    if request_metrics:
        if multiprocess:  # under gunicorn: every worker process's request metrics, summed at scrape time
            exporter = GunicornPrometheusMetrics(app, group_by="url_rule")
        else:
            exporter = PrometheusMetrics(app, path=None, group_by="url_rule")

    @app.get("/metrics")
    def prometheus_metrics():
        denied = _metrics_token_refusal(settings_of(app).metrics_token)
        if denied is not None:
            return denied
        registry = CollectorRegistry(auto_describe=False)
        if multiprocess:
            registry.register(MultiProcessFiles(os.environ["PROMETHEUS_MULTIPROC_DIR"]))
        else:
            registry.register(_Families(list(REGISTRY.collect())))
        registry.register(_Families(list(metrics.database_families(*_read_database(engine_of(app))))))
        registry.register(_Families(list(metrics.number_health_families(_read_number_health(engine_of(app))))))
        encode, content_type = choose_encoder(request.headers.get("Accept", ""))
        return encode(registry), 200, {"Content-Type": content_type}

    metrics.initialise_web_counters()
    if exporter is None:
        return None
    # The exporter keeps no reference to its metrics: they are found by name in the registry it registered them in.
    found = exporter.registry._names_to_collectors  # noqa: SLF001 - prometheus_client has no public lookup
    duration, total = found.get("flask_http_request_duration_seconds"), found.get("flask_http_request_total")
    bound = metrics.RequestLabels({m for rule in app.url_map.iter_rules() for m in rule.methods or ()},
                                  {rule.rule for rule in app.url_map.iter_rules()})
    for metric in (duration, total, found.get("flask_http_request_exceptions_total")):
        if metric is not None:
            _bound_labels(metric, bound)
    return (duration, total) if duration is not None and total is not None else None


def _bound_labels(metric, bound: metrics.RequestLabels) -> None:
    """The exporter labels each request by its method and rule as sent (an invented method or an unknown path would
    each add a series): every child it (or the webhook fast path) asks for goes through `bound` first."""
    labels = metric.__dict__.get("_unbounded_labels", metric.labels)  # once per metric, also for a second app

    def bounded_labels(**named):
        return labels(**bound(named))

    metric._unbounded_labels = labels  # noqa: SLF001 - our own attribute on the exporter's metric
    metric.labels = bounded_labels


class MultiProcessFiles:
    """prometheus_client's MultiProcessCollector (every gunicorn worker process's metric files, merged), less the
    files that cannot be read at this moment: one another process has just created and not yet sized (empty) or
    is still writing. The stock collector raised on such a file (struct.error) and /metrics answered 500, once in
    a CI run; that file's series are simply read by the next scrape."""

    def __init__(self, path: str) -> None:
        self.path = path

    def collect(self):
        paths = glob.glob(os.path.join(self.path, "*.db"))
        try:  # every file read once: the common case
            return MultiProcessCollector.merge(paths, accumulate=True)
        except _UNREADABLE:
            pass
        readable = []  # one file is not readable this moment: find which, read the others
        for path in paths:
            try:
                for _ in MmapedDict.read_all_values_from_file(path):
                    pass
            except FileNotFoundError:  # a dead process's file, removed since the glob
                continue
            except _UNREADABLE as exc:
                logging.getLogger(__name__).info("metrics: %s skipped this scrape (being written): %s",
                                                 os.path.basename(path), exc)
                continue
            readable.append(path)
        return MultiProcessCollector.merge(readable, accumulate=True)


_UNREADABLE = (OSError, struct.error, RuntimeError, UnicodeDecodeError, ValueError)


class _Families:
    """A prometheus_client collector of metric families already built (for one scrape)."""

    def __init__(self, families: list) -> None:
        self.families = families

    def collect(self):
        return iter(self.families)


def _read_database(engine: sa.Engine) -> tuple[list[queries.QueueCount] | None, list[queries.MetricTotal] | None]:
    """Queue state and the workers' summed metrics; (None, None) when the database does not answer."""
    try:
        return queries.queue_metrics(engine), queries.worker_metrics_totals(engine)
    except (psycopg.Error, sa.exc.SQLAlchemyError) as exc:  # /metrics still answers: wa_outbox_database_up 0
        logging.getLogger(__name__).warning("metrics: the database did not answer: %s",
                                            str(exc).strip().splitlines()[0] if str(exc).strip() else
                                            type(exc).__name__)
        return None, None


def _read_number_health(engine: sa.Engine) -> list[queries.NumberHealthMetric] | None:
    """Each sender's health as Meta last reported it; None when the database does not answer (logged once, by
    _read_database, in the same scrape)."""
    try:
        return queries.number_health_metrics(engine)
    except (psycopg.Error, sa.exc.SQLAlchemyError):
        return None


def _metrics_token_refusal(token: str | None):
    """None when /metrics may be served; a 401 JSON answer when WA_OUTBOX_METRICS_TOKEN is set and not sent."""
    if token is None:
        return None
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
        return None
    response, status = errors.json_error(401, "/metrics needs Authorization: Bearer <WA_OUTBOX_METRICS_TOKEN>")
    response.headers["WWW-Authenticate"] = 'Bearer realm="wa-outbox metrics"'
    return response, status
