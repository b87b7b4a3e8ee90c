"""Test harness: a real Postgres, a fresh database per run, the real Flask app.

The server is DATABASE_URL's when set, else the embedded Postgres (pgserver) in ./.wa-outbox/ — the same rule as
the service. Either way the suite creates its own database (wa_outbox_test_<random>), migrates it, and drops it at
the end, so it never touches the data in DATABASE_URL's database.

Three tiers share it: tests/unit needs no database (no fixture here starts a server until a test asks for
`database_url`, so `make test-unit` never starts the embedded Postgres), tests/db runs against Postgres with the
in-process app, worker and simulator, tests/system starts real processes (gunicorn, workers, `wa-outbox dev`),
browsers, PgBouncer, the chaos run and wheel builds. `make test` runs all three.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
import werkzeug.test
from hypothesis import settings as hypothesis_settings

from wa_outbox import migrate
from wa_outbox.config import Settings, normalize_database_url
from wa_outbox.db import embedded_database_url
from wa_outbox.webhooks import sign

# No Hypothesis deadline: a per-example time limit is a timed assertion, and it fails on a busy CI machine, not on a
# broken feature (speed is measured by bench/, never asserted here).
hypothesis_settings.register_profile("wa-outbox", deadline=None)
hypothesis_settings.load_profile("wa-outbox")

DATA = Path(__file__).parent / "data"
APP_SECRET = "test-app-secret-é"  # non-ASCII on purpose: the key is UTF-8 bytes
API_TOKEN = "test-api-token-0123456789"


def _server_url() -> str:
    if os.environ.get("DATABASE_URL"):
        return normalize_database_url(os.environ["DATABASE_URL"])
    return embedded_database_url(os.environ.get("WA_OUTBOX_DATA_DIR", ".wa-outbox"))


def _with_dbname(url: str, dbname: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{dbname}"))


def create_scratch_database(server_url: str, prefix: str = "wa_outbox_test") -> str:
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


def drop_database(server_url: str, name: str) -> None:
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def server_url() -> str:
    return _server_url()


@pytest.fixture(scope="session")
def database_url(server_url: str):
    name = create_scratch_database(server_url)
    url = _with_dbname(server_url, name)
    migrate.upgrade(url)
    yield url
    drop_database(server_url, name)


@pytest.fixture(autouse=True)
def clean_tables(request):
    """Empty every wa-outbox table before a test that uses the database."""
    if "database_url" not in request.fixturenames:
        yield
        return
    url = request.getfixturevalue("database_url")
    with psycopg.connect(url, autocommit=False) as conn:
        conn.execute("SET LOCAL wa_outbox.allow_prune = 'on'")
        conn.execute("TRUNCATE wa_outbox.notification_events, wa_outbox.notifications, wa_outbox.webhook_events, "
                     "wa_outbox.contacts, wa_outbox.rate_limits, wa_outbox.workers, wa_outbox.settings, "
                     "wa_outbox.webhook_bodies, wa_outbox.campaigns, wa_outbox.worker_metrics, wa_outbox.ops_sessions, "
                     "wa_outbox.events, wa_outbox.delivery_attempts, wa_outbox.deliveries, wa_outbox.endpoints, "
                     "wa_outbox.senders, wa_outbox.business_accounts, wa_outbox.app_secrets, wa_outbox.meta_apps, "
                     "wa_outbox.number_health, wa_outbox.media_uploads, wa_outbox.media_chunks, wa_outbox.media, "
                     "wa_outbox.templates, "
                     "wa_outbox.portfolio_units, wa_outbox.portfolios "
                     "RESTART IDENTITY")
    if "app" in request.fixturenames:
        # The shared app's registry reloads on the TRUNCATE's NOTIFY, in its own thread: reload it here, so this
        # test never meets the apps and senders an earlier test registered.
        watch = getattr(request.getfixturevalue("app"), "extensions", {}).get("wa_outbox.registry")
        if watch is not None:
            watch.reload()
    # opspage: the ops page keeps the outcome minutes that are over (ops.sender_outcomes); none outlives the TRUNCATE
    from wa_outbox import ops
    ops.forget_settled_outcomes()
    yield


@pytest.fixture(autouse=True)
def fresh_auth_budgets(request):
    """Every test starts with full wrong-token budgets (web/auth_throttle.py) in the shared app: what one test spent
    from 127.0.0.1 must not turn another test's 401 into a 429."""
    if "app" in request.fixturenames:
        getattr(request.getfixturevalue("app"), "extensions", {}).pop("wa_outbox.auth_throttle", None)
    yield


@pytest.fixture(scope="session")
def settings(database_url: str) -> Settings:
    return Settings(
        database_url=database_url,
        app_secret=APP_SECRET,
        verify_token="test-verify-token",
        api_tokens=(API_TOKEN,),
        access_token="test-access-token",
        phone_number_id="100000000000001",
        webhook_max_bytes=6 * 1024 * 1024,
    )


# Werkzeug's test client makes each multipart boundary from time() and random(): 62 to 72 characters, where RFC 2046
# allows 70 and /v1/media refuses more (about 1 upload in 400 of the suite's was answered 400). Fewer random digits.
_random = werkzeug.test.random
werkzeug.test.random = lambda: round(_random(), 8)  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def app(settings: Settings):
    from wa_outbox.web import create_app
    app = create_app(settings)
    app.testing = True
    yield app
    watch = app.extensions.get("wa_outbox.registry")
    if watch is not None:  # before the scratch database is dropped: its listener would complain about it
        watch.stop()


@pytest.fixture(autouse=True)
def stop_registry_watches(monkeypatch):
    """Every web app a test makes starts a registry listener (a thread with a connection of its own), and the feed's
    long-poll listener on its first long poll (event_notices.py); stop each at the end of its test (the session's and
    the module-scoped apps, made before this runs, stop theirs in their own teardown). Left running, they held a
    connection each for the whole session and, once their database was dropped, retried it in the log until the
    interpreter ended."""
    from wa_outbox.event_notices import EventNotices
    from wa_outbox.registry_watch import RegistryWatch
    started: list[Any] = []

    def tracking(start: Any) -> Any:
        def tracked(self: Any) -> Any:
            started.append(self)
            return start(self)
        return tracked

    monkeypatch.setattr(RegistryWatch, "start", tracking(RegistryWatch.start))
    monkeypatch.setattr(EventNotices, "_start", tracking(EventNotices._start))
    yield
    for listener in started:
        listener.stop()


@pytest.fixture
def client(app, database_url):
    return app.test_client()


@pytest.fixture
def db(database_url: str):
    """An autocommit psycopg connection for assertions."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        yield conn


def meta_body(payload: dict) -> bytes:
    """Serialise as Meta does: compact, non-ASCII escaped as \\uXXXX."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=True).encode()


def post_webhook(client, payload: dict | bytes, *, secret: str = APP_SECRET, headers: dict | None = None):
    body = payload if isinstance(payload, bytes) else meta_body(payload)
    all_headers = {"Content-Type": "application/json", "X-Hub-Signature-256": sign(secret, body)}
    all_headers.update(headers or {})
    return client.post("/webhooks/whatsapp", data=body, headers=all_headers)


def load_corpus() -> dict[str, dict]:
    """Every webhook payload in tests/data: Meta's spec examples and pywa's test data, by a readable name."""
    corpus = {}
    for name, payload in json.loads((DATA / "openapi" / "webhook-examples.json").read_text()).items():
        corpus[f"openapi:{name}"] = payload
    for path in sorted((DATA / "pywa").glob("*.json")):
        for name, payload in json.loads(path.read_text()).items():
            corpus[f"pywa:{path.stem}:{name}"] = payload
    return corpus


@pytest.fixture(scope="session")
def receiver_url(app):
    """The real web app on a real socket, for the simulator's status webhooks."""
    from tests.live import serve
    with serve(app) as url:
        yield url


@pytest.fixture
def sim(receiver_url):
    from wa_outbox.simulator import SimulatorServer
    with SimulatorServer(access_token="test-access-token", app_secret=APP_SECRET,
                         webhook_url=f"{receiver_url}/webhooks/whatsapp", status_delays_ms=(20, 40, 60),
                         seed=7) as server:
        yield server


@pytest.fixture
def sender(db):
    db.execute("INSERT INTO wa_outbox.settings VALUES ('default_phone_number_id', '100000000000001')")


@pytest.fixture
def run(database_url, monkeypatch):
    """The `wa-outbox` CLI in-process (click's runner) against the test database, as the default sender's operator:
    `run("dlq", "list")` returns click's Result. Logging is left to pytest's capture."""
    from click.testing import CliRunner

    from wa_outbox import cli
    monkeypatch.setattr(cli.logs, "configure", lambda *args, **kwargs: None)
    env = {"DATABASE_URL": database_url, "WHATSAPP_PHONE_NUMBER_ID": "100000000000001"}

    def invoke(*args: str, input: str | None = None):
        return CliRunner().invoke(cli.main, list(args), env=env, input=input, catch_exceptions=False)
    return invoke
