"""Wrong tokens are slowed per client and logged as a rate, in the real app (web/auth_throttle.py): 429 to a guesser
while another client logs in, the proxy's X-Forwarded-For entry as the client, one summary line for many guesses."""

from __future__ import annotations

import dataclasses
import logging
import re

import pytest

from tests.conftest import API_TOKEN
from tests.db.test_ops import _csrf
from wa_outbox.web import auth_throttle, create_app, engine_of


@pytest.fixture
def strict_app(settings, database_url):
    """The app with a budget of 3 wrong tokens per client, behind one proxy (as on Heroku); its summary line only when
    a test asks for it. Its clock stands still, so nothing refills however slowly a busy machine runs the test: the
    counts below are the budget's, not the scheduler's."""
    app = create_app(dataclasses.replace(settings, auth_failure_burst=3, auth_failures_per_minute=0.01,
                                         trusted_proxies=1), metrics=False)
    app.testing = True
    throttle = auth_throttle.of(app)
    throttle.summary_seconds = 24 * 3600
    throttle.clock = lambda: 1000.0
    yield app
    engine_of(app).dispose()


def _from(app, address: str):
    """A browser whose requests the proxy forwards as coming from `address`."""
    client = app.test_client()
    client.environ_base["HTTP_X_FORWARDED_FOR"] = address
    return client


def _try_login(client, token: str):
    page = client.get("/ops/login")
    return client.post("/ops/login", data={"token": token, "csrf_token": _csrf(page.get_data(as_text=True))})


def test_login_guesses_beyond_the_budget_get_429_while_another_client_logs_in(strict_app):
    guesser, operator = _from(strict_app, "203.0.113.9"), _from(strict_app, "198.51.100.20")
    for i in range(3):
        assert _try_login(guesser, f"guess-number-{i:04d}-xxxxxxx").status_code == 401
    refused = _try_login(guesser, "guess-number-0004-xxxxxxx")
    assert refused.status_code == 429
    assert 1 <= int(refused.headers["Retry-After"]) <= 6000  # one unit per 100 minutes
    assert "Too many wrong tokens" in refused.get_data(as_text=True)
    assert _try_login(guesser, API_TOKEN).status_code == 429  # not even compared while over budget
    assert guesser.get("/ops").status_code == 302
    # another client, and the operator's typos, are not the guesser's problem
    assert _try_login(operator, "a-typo-in-the-token-xxxxx").status_code == 401
    response = _try_login(operator, API_TOKEN)
    assert response.status_code == 302 and response.headers["Location"] == "/ops"
    assert operator.get("/ops").status_code == 200


def test_bearer_guesses_beyond_the_budget_get_429_json(strict_app):
    guesser, caller = _from(strict_app, "203.0.113.10"), _from(strict_app, "198.51.100.21")
    for i in range(3):
        response = guesser.get("/v1/dead", headers={"Authorization": f"Bearer guess-{i:04d}-xxxxxxxxxxx"})
        assert response.status_code == 401
    response = guesser.get("/v1/dead", headers={"Authorization": f"Bearer {API_TOKEN}"})
    assert response.status_code == 429
    body = response.get_json()
    assert body["error"]["status"] == 429 and body["error"]["retry_after"] == int(response.headers["Retry-After"])
    assert API_TOKEN not in response.get_data(as_text=True)
    assert caller.get("/v1/dead", headers={"Authorization": f"Bearer {API_TOKEN}"}).status_code == 200


def test_a_spoofed_forwarded_entry_does_not_buy_a_new_budget(strict_app):
    """Behind one proxy only the entry it appended counts: what the client wrote to the left of it changes nothing."""
    for i in range(3):
        client = _from(strict_app, f"10.0.0.{i}, 203.0.113.11")
        assert _try_login(client, f"guess-number-{i:04d}-xxxxxxx").status_code == 401
    assert _try_login(_from(strict_app, "10.0.0.99, 203.0.113.11"), "guess-number-0099-xxxxxxx").status_code == 429


def test_many_failures_make_one_summary_line_and_no_line_each(strict_app, caplog):
    caplog.set_level(logging.DEBUG)
    for n in range(5):
        guesser = _from(strict_app, f"203.0.113.{100 + n}")
        for i in range(6):  # 3 wrong, then 3 refused with 429
            _try_login(guesser, f"wrong-token-{n}-{i}-abcdefghij")
            guesser.get("/v1/dead", headers={"Authorization": f"Bearer wrong-bearer-{n}-{i}-abcdefgh"})
    assert not [r for r in caplog.records if "refused" in r.getMessage() or "203.0.113" in r.getMessage()]
    line = auth_throttle.of(strict_app).flush()
    lines = [r.getMessage() for r in caplog.records if "failed logins" in r.getMessage()]
    assert lines == [line]
    assert re.fullmatch(r"15 failed logins \(wrong tokens at /ops/login or /v1\) from 5 clients in the last \d+ s; "
                        r"45 more refused with 429 while over their budget", line), line
    assert "wrong-token" not in caplog.text and "wrong-bearer" not in caplog.text
