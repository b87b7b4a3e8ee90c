"""/readyz through the query layer (queries.schema_version on the pool): ready with the migrated revision, a 503
naming the fix on a database that was never migrated, a 503 naming the error when the database is away. Never a 5xx
other than 503, never a traceback."""

from __future__ import annotations

import dataclasses

import pytest

from tests.conftest import _with_dbname, create_scratch_database, drop_database
from wa_outbox import migrate
from wa_outbox.web import create_app


def _client(settings, url: str):
    app = create_app(dataclasses.replace(settings, database_url=url), metrics=False)
    app.testing = True
    return app.test_client()


def test_ready_names_the_revision(settings):
    r = _client(settings, settings.database_url).get("/readyz")
    assert r.status_code == 200 and r.json == {"status": "ready", "schema_version": migrate.head()}


@pytest.fixture
def empty_database(server_url):
    name = create_scratch_database(server_url, prefix="wa_outbox_readyz")
    yield _with_dbname(server_url, name)
    drop_database(server_url, name)


def test_a_database_never_migrated_is_a_503_naming_the_fix(settings, empty_database):
    r = _client(settings, empty_database).get("/readyz")
    assert r.status_code == 503
    assert r.json == {"status": "unavailable", "reason": "schema not migrated: run `wa-outbox db upgrade`"}


def test_a_database_that_does_not_answer_is_a_503(settings, empty_database):
    away = empty_database.rsplit("/", 1)[0] + "/wa_outbox_no_such_database"
    r = _client(settings, away).get("/readyz")
    assert r.status_code == 503 and r.json["status"] == "unavailable"
    assert r.json["reason"].startswith("database: ")
