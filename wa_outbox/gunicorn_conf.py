"""gunicorn settings for `web` (Procfile: gunicorn --config python:wa_outbox.gunicorn_conf wsgi:app).

Runs in the gunicorn master before any worker starts, so a configuration error is one line and exit status 2. Reads
the database only when WHATSAPP_APP_SECRET is unset (is an app registered?).
"""

import os
import shutil
import sys
import tempfile

from gunicorn.glogging import Logger

from wa_outbox.config import ConfigError, Settings
from wa_outbox.logs import choose_format
from wa_outbox.registry_watch import require_registered_apps

try:
    # without WHATSAPP_APP_SECRET, a registered app must be there to verify webhooks: asked once, here, so a web
    # that cannot verify anything says so in one line instead of every worker failing to boot
    _settings = Settings.from_env().require_web(apps_registered=True)
    require_registered_apps(_settings)
except ConfigError as _exc:
    sys.stderr.write(f"wa-outbox: configuration error: {_exc}\n")
    sys.exit(2)

bind = os.environ.get("WA_OUTBOX_BIND") or f"0.0.0.0:{_settings.port}"
workers = _settings.web_concurrency          # Heroku sets WEB_CONCURRENCY from the dyno size
threads = _settings.web_threads              # gthread: keep-alive; webhook POSTs waiting on a commit share the next one
# gthread, with each request read whole by the main thread before a thread gets it: a slow client holds no thread
worker_class = "wa_outbox.web.gunicorn_worker.BufferedThreadWorker"
worker_connections = 1000  # per worker: reading, in the pool or kept alive; past it the oldest reader is shed
timeout = 30
graceful_timeout = 25                        # Heroku sends SIGKILL 30 s after SIGTERM
keepalive = 5
max_requests = 0
accesslog = None                             # request metrics go to /metrics; app logs are JSON on stdout
loglevel = _settings.log_level.lower()
# gunicorn's own lines (start, worker boot/exit, signals) on stdout too, in the app's format (LOG_FORMAT).
_FORMATTERS = {"json": {"()": "pythonjsonlogger.json.JsonFormatter",
                        "fmt": "{asctime}{levelname}{name}{message}", "style": "{",
                        "rename_fields": {"asctime": "ts", "levelname": "level", "name": "logger"}},
               "console": {"()": "wa_outbox.logs.ConsoleFormatter"}}
logconfig_dict = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"app": _FORMATTERS[choose_format(_settings.log_format, sys.stdout)]},
    "handlers": {"stdout": {"class": "logging.StreamHandler", "formatter": "app", "stream": "ext://sys.stdout"}},
    "root": {"level": _settings.log_level, "handlers": []},  # the app configures its own (wa_outbox.logs)
    "loggers": {"gunicorn.error": {"handlers": ["stdout"], "level": _settings.log_level, "propagate": False},
                "gunicorn.access": {"handlers": [], "propagate": False}},
}


class AccessLogOnlyWhenAsked(Logger):
    """gunicorn's logger, minus the access line it builds for every request (and drops: no handler) whenever
    logconfig_dict is set, as above, even with accesslog = None — a few percent of a webhook POST's CPU."""

    def access(self, resp, req, environ, request_time):
        if self.cfg.accesslog:
            super().access(resp, req, environ, request_time)


logger_class = AccessLogOnlyWhenAsked

# Metrics from every worker process, aggregated at /metrics (prometheus_client multiprocess mode). A directory made
# here is this master's own and goes when it exits; one given in PROMETHEUS_MULTIPROC_DIR is left alone.
_made_metrics_dir = None
if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
    _made_metrics_dir = tempfile.mkdtemp(prefix="wa-outbox-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = _made_metrics_dir


def on_exit(server):
    # After a USR2 re-exec the new master inherited the directory in its environment: the old one leaves it.
    if _made_metrics_dir and not server.reexec_pid:
        shutil.rmtree(_made_metrics_dir, ignore_errors=True)


def child_exit(server, worker):
    # Not at the top: prometheus_client picks its (multiprocess) value class when first imported, which in the
    # master, whose state every worker inherits, must come after PROMETHEUS_MULTIPROC_DIR is set above.
    from prometheus_flask_exporter.multiprocess import GunicornInternalPrometheusMetrics  # noqa: PLC0415
    GunicornInternalPrometheusMetrics.mark_process_dead_on_child_exit(worker.pid)
