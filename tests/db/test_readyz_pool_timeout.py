"""/readyz when the pool has no connection to give in time: SQLAlchemy's pool TimeoutError carries no driver error
(`.orig`), and the view must still answer 503 naming it, not fail with a 500."""

from __future__ import annotations

import sqlalchemy as sa

from wa_outbox.db import sqlalchemy_url
from wa_outbox.web import create_app


def test_a_pool_with_no_connection_to_give_is_a_503(settings):
    # one connection in all, held below: the view's checkout waits out the timeout
    engine = sa.create_engine(sqlalchemy_url(settings.database_url), pool_size=1, max_overflow=0, pool_timeout=0.1,
                              isolation_level="AUTOCOMMIT")
    app = create_app(settings, engine=engine, metrics=False)
    app.testing = True
    held = engine.raw_connection()
    try:
        r = app.test_client().get("/readyz")
    finally:
        held.close()
        engine.dispose()
    assert r.status_code == 503
    assert r.json == {"status": "unavailable", "reason": "database: TimeoutError"}
