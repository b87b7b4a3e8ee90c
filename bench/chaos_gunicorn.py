"""gunicorn settings for the chaos run (bench/chaos.py): the service's own (wa_outbox.gunicorn_conf) plus an access
log of every answer, `<unix time> <status> <microseconds taken> <method> <path>` per line, which the audit reads to
find web 5xx from requests that did not overlap the seconds Postgres was down. The path comes from CHAOS_ACCESS_LOG."""

import os

from wa_outbox import gunicorn_conf as _service
from wa_outbox.gunicorn_conf import *  # noqa: F403 - the service's settings, unchanged but for the access log

accesslog = os.environ["CHAOS_ACCESS_LOG"]
access_log_format = "%(s)s %(D)s %(m)s %(U)s"  # the time logged is the answer's: D gives the start
logconfig_dict = {
    **_service.logconfig_dict,
    "formatters": {**_service.logconfig_dict["formatters"], "access": {"format": "%(created).3f %(message)s"}},
    "handlers": {**_service.logconfig_dict["handlers"],
                 "access": {"class": "logging.FileHandler", "filename": accesslog, "formatter": "access"}},
    "loggers": {**_service.logconfig_dict["loggers"],
                "gunicorn.access": {"handlers": ["access"], "level": "INFO", "propagate": False}},
}
