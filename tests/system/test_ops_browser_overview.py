"""The /ops overview in a real browser (Chromium by Selenium, as tests/system/test_ops_browser.py), with a real worker
sending to the simulator: the outcomes per sender, the workers' activity, auto-refresh (on by default, paused by
its box and kept paused), and the login page's hint under `wa-outbox dev`. Each step saves a full-page screenshot
under build/screenshots/ (for people to look at; the assertions are on the page itself)."""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path

from tests.live import running_worker, wait_for, worker_settings
from tests.system.test_ops_browser import (  # noqa: F401 - the browser fixtures, shared
    TIMEOUT,
    _log_in,
    _status,
    _text,
    _wait,
    browser,
    chromium_paths,
    ops_url,
)

SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"


def screenshot(driver, name: str) -> Path:
    """The whole page (not only the window) as build/screenshots/<name>.png."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
    path = SCREENSHOTS / f"{name}.png"
    path.write_bytes(base64.b64decode(shot["data"]))
    return path


def test_the_overview_shows_outcomes_per_sender_and_refreshes_itself_until_paused(browser, ops_url, app, settings,  # noqa: F811
                                                                                   sim, sender, db):
    from selenium.webdriver.common.by import By

    from wa_outbox import outbox
    from wa_outbox.web import engine_of
    engine = engine_of(app)
    sim.set_faults([{"mode": "error", "code": 131026, "match": {"to": "5511900000003"}}])
    ids = [outbox.accept_message(engine, to=to, message={"type": "text", "text": {"body": "Your order shipped"}}).id
           for to in ("+55 11 98765-4321", "+55 11 98765-4322", "+55 11 98765-4323", "+55 11 90000-0003")]
    with running_worker(worker_settings(settings, sim.base_url)) as worker:
        wait_for(lambda: [_status(db, i) for i in ids] == ["read", "read", "read", "dead"], timeout=TIMEOUT,
                 what="three messages read and one dead")
        worker.maintain()  # its heartbeat now, with what it did (else at its next round)
        wait_for(lambda: db.execute("SELECT (info ->> 'sent')::int >= 3 FROM wa_outbox.workers").fetchone()[0],
                 timeout=TIMEOUT, what="the heartbeat with the sends")
        _log_in(browser, ops_url)
        _wait(browser, lambda b: "Outcomes per sender" in _text(b) and "outbound messages" in _text(b),
              "the overview with the worker's activity")
        row = browser.find_element(By.XPATH, "//tr[@data-sender-outcomes='100000000000001']")
        cells = [c.text for c in row.find_elements(By.CSS_SELECTOR, "td.num")]
        assert cells[:5] == ["3", "3", "3", "0", "1"], cells  # sent, delivered, read, failed, dead
        assert cells[5:] == ["100.0 %", "100.0 %"], cells
        assert browser.find_element(By.ID, "delivery-rate").text == "100.0 %"
        queues = browser.find_element(By.ID, "queues").text
        assert "outbound" in queues and "inbound" in queues and "notifications" not in queues
        assert "+5511900000003" in browser.find_element(By.CLASS_NAME, "dead-group").text
        workers = browser.find_element(By.ID, "workers").text
        assert "outbound messages" in workers and "3 sent" in workers and "in_flight" not in workers
        screenshot(browser, "ops-overview")

        # Auto-refresh is on without anything to do: the page reloads by itself.
        box = browser.find_element(By.ID, "auto-refresh")
        assert box.is_selected()
        browser.execute_script("window.notReloadedYet = true")
        _wait(browser, lambda b: b.execute_script("return window.notReloadedYet !== true"), "a reload by itself")

    # Paused with its box: said on the page, and still paused after the operator reloads.
    _wait(browser, lambda b: b.find_element(By.ID, "auto-refresh").is_displayed(), "the reloaded page")
    browser.find_element(By.ID, "auto-refresh").click()
    _wait(browser, lambda b: b.find_element(By.ID, "refresh-status").text == "paused", "the pause")
    browser.refresh()
    _wait(browser, lambda b: b.find_element(By.ID, "refresh-status").text == "paused", "the pause kept")
    assert not browser.find_element(By.ID, "auto-refresh").is_selected()
    assert browser.execute_script("return document.documentElement.getAttribute('data-auto-refresh')") == "paused"
    screenshot(browser, "ops-overview-paused")

    browser.get(f"{ops_url}/ops/messages/{ids[0]}")
    _wait(browser, lambda b: "Timeline" in _text(b), "the message page")
    assert browser.find_element(By.ID, "recipient").text == "+5511987654321"
    screenshot(browser, "ops-message")


def test_the_login_page_says_which_token_under_wa_outbox_dev(browser, ops_url, app, monkeypatch):  # noqa: F811
    from selenium.webdriver.common.by import By

    from wa_outbox.config import DEV_API_TOKEN
    from wa_outbox.web.app_state import settings_of
    monkeypatch.setitem(app.extensions, "wa_outbox.settings",
                        dataclasses.replace(settings_of(app), dev=True,
                                            api_tokens=(*settings_of(app).api_tokens, DEV_API_TOKEN)))
    monkeypatch.delitem(app.extensions, "wa_outbox.ops_token_fingerprints", raising=False)  # of these tokens
    browser.get(f"{ops_url}/ops/login")
    _wait(browser, lambda b: "Development" in _text(b), "the development hint")
    assert DEV_API_TOKEN in browser.find_element(By.ID, "dev-hint").text
    screenshot(browser, "ops-login-dev")
    _log_in(browser, ops_url, token=DEV_API_TOKEN)
    _wait(browser, lambda b: "Dead letters" in _text(b), "the ops page after logging in with the hinted token")


def test_a_busy_hour_of_two_senders_reads_at_a_glance(browser, ops_url, db):  # noqa: F811
    """An hour of traffic written straight to the timeline (two senders, one registered with its alias and display
    number): each sender's row adds up to the charts, and the screenshot shows the page with bars in every minute."""
    from selenium.webdriver.common.by import By
    db.execute("INSERT INTO wa_outbox.meta_apps (app_id) VALUES ('111')")
    db.execute("INSERT INTO wa_outbox.business_accounts (waba_id, app_id) VALUES ('901', '111')")
    db.execute("INSERT INTO wa_outbox.senders (phone_number_id, waba_id, alias, display_phone_number, token_ref) "
               "VALUES ('200000000000002', '901', 'brand-b', '15550100', 'TOKEN_B')")
    # 50 minutes of messages, 3 a minute from one sender and 1 from the other; every 7th fails, every 11th dies
    db.execute("""
        WITH m AS (
            INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash, status)
            SELECT CASE WHEN i % 4 = 0 THEN '200000000000002' ELSE '100000000000001' END, (5511900000000 + i)::text,
                   '{"type": "text", "text": {"body": "hi"}}', '', 'read'
            FROM generate_series(1, 200) i
            RETURNING id
        ), n AS (SELECT id, row_number() OVER (ORDER BY id) AS i FROM m)
        INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, created_at)
        SELECT n.id, e.event, 1, now() - interval '50 minutes' + n.i * interval '15 s' + e.after
        FROM n CROSS JOIN LATERAL (VALUES ('sent', interval '0 s'), ('delivered', interval '2 s'),
                                          ('read', interval '40 s')) AS e(event, after)
        WHERE (n.i % 7 <> 0 OR e.event = 'sent') AND (n.i % 11 <> 0 OR e.event = 'sent')
          AND (n.i % 3 <> 0 OR e.event <> 'read')
        UNION ALL
        SELECT n.id, CASE WHEN n.i % 7 = 0 THEN 'failed' ELSE 'dead' END, 1,
               now() - interval '50 minutes' + n.i * interval '15 s' + interval '1 s'
        FROM n WHERE n.i % 7 = 0 OR n.i % 11 = 0""")
    _log_in(browser, ops_url)
    _wait(browser, lambda b: "brand-b" in _text(b), "the overview with both senders")
    rows = {r.get_attribute("data-sender-outcomes"): [c.text for c in r.find_elements(By.CSS_SELECTOR, "td.num")]
            for r in browser.find_elements(By.CSS_SELECTOR, "tr[data-sender-outcomes]")}
    assert set(rows) == {"100000000000001", "200000000000002"}
    assert "+15550100" in browser.find_element(By.XPATH, "//tr[@data-sender-outcomes='200000000000002']").text
    for i, name in enumerate(("sent", "delivered", "read", "failed", "dead")):
        total = sum(int(r[i]) for r in rows.values())
        label = browser.find_element(By.XPATH, f"//div[@class='label'][starts-with(normalize-space(), '{name} / min')]")
        assert f"{total} in the last hour" in label.text, (name, label.text)
    screenshot(browser, "ops-overview-busy-hour")
