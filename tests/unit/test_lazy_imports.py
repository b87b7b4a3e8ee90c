"""The imports left inside functions on purpose (each with `# noqa: PLC0415 - <why>`), checked in a fresh
interpreter: what importing a module must not load yet."""

from __future__ import annotations

import os
import subprocess
import sys


def _loaded_after(code: str, env: dict[str, str] | None = None) -> set[str]:
    done = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint('\\n'.join(sorted(sys.modules)))"],
                          capture_output=True, text=True, timeout=120, check=True,
                          env={**os.environ, **(env or {})})
    return set(done.stdout.split())


def _packages(loaded: set[str]) -> set[str]:
    return {name.split(".")[0] for name in loaded}


def test_import_wa_outbox_loads_no_driver_nor_configuration():
    """An application's `from wa_outbox import enqueue` (wa_outbox/enqueue.py, messages.py)."""
    loaded = _loaded_after("import wa_outbox")
    assert not _packages(loaded) & {"sqlalchemy", "psycopg", "jsonschema", "flask", "alembic"}
    assert not loaded & {"wa_outbox.config", "wa_outbox.meta_schema", "wa_outbox.meta_validation"}


def test_import_config_loads_no_psycopg():
    """wa_outbox/config.py parses a URL with libpq's parser only when there is one to parse."""
    assert "psycopg" not in _packages(_loaded_after("import wa_outbox.config"))


def test_the_worker_loads_alembic_only_to_check_the_schema():
    """wa_outbox/worker/__init__.py: importing (or building) a worker needs no migrations."""
    assert "alembic" not in _packages(_loaded_after("import wa_outbox.worker"))


def test_meta_schema_loads_jsonschema_only_for_meta():
    """jsonschema is optional (the simulator extra): WA_OUTBOX_VALIDATE=off never imports it."""
    loaded = _loaded_after("from wa_outbox import meta_schema\nassert meta_schema.mode({}) == 'off'")
    assert "jsonschema" not in _packages(loaded)


def test_gunicorn_conf_loads_no_prometheus_client():
    """prometheus_client picks its value class once, when first imported: the gunicorn master (whose modules every
    worker inherits) must not import it before gunicorn_conf sets PROMETHEUS_MULTIPROC_DIR."""
    env = {"WHATSAPP_APP_SECRET": "s", "WHATSAPP_VERIFY_TOKEN": "v",
           "WA_OUTBOX_API_TOKENS": "test-api-token-0123456789",
           "DATABASE_URL": "postgresql://postgres@127.0.0.1:5432/postgres"}
    loaded = _loaded_after("import wa_outbox.gunicorn_conf", env)
    assert "prometheus_client" not in _packages(loaded)
