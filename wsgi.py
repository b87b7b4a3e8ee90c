"""WSGI entry point: `gunicorn --config python:wa_outbox.gunicorn_conf wsgi:app`."""

from wa_outbox.web.wsgi import build_app

app = build_app()
