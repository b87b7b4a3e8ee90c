"""The ops page's endpoints section in a real browser (Chromium by Selenium, as tests/system/test_ops_browser.py):
the disabled banner, replaying failed deliveries with the page's own form, and enabling the endpoint."""

from __future__ import annotations

from tests.db.test_endpoints import add_event, make_delivery
from tests.db.test_ops_endpoints import EP, add_endpoint
from tests.system.test_ops_browser import (  # noqa: F401 - the browser fixtures, shared
    _log_in,
    _text,
    _wait,
    browser,
    chromium_paths,
    ops_url,
)


def test_replay_failed_deliveries_and_enable_a_disabled_endpoint(browser, ops_url, db):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select
    add_endpoint(db, state="disabled", reason="gone")
    failed = make_delivery(db, EP, add_event(db), "failed", [(500, 12.0)])
    _log_in(browser, ops_url)
    _wait(browser, lambda b: "Endpoints" in _text(b), "the endpoints section")
    assert "answered 410 Gone" in browser.find_element(By.CLASS_NAME, "banner").text

    row = browser.find_element(By.XPATH, f"//tr[@data-endpoint='{EP}']")
    assert "500" in row.text and "12 ms" in row.text
    Select(row.find_element(By.NAME, "what")).select_by_value("failed")
    row.find_element(By.XPATH, ".//button[text()='Replay']").click()
    _wait(browser, lambda b: f"Endpoint {EP}: 1 deliveries queued" in _text(b), "the replay's confirmation")
    assert db.execute("SELECT status FROM wa_outbox.deliveries WHERE id = %s", (failed,)).fetchone()[0] == "queued"

    browser.find_element(By.XPATH, "//div[@class='banner']//button[text()='Enable']").click()
    _wait(browser, lambda b: f"Endpoint {EP}: disabled → enabled." in _text(b), "the enable's confirmation")
    assert not browser.find_elements(By.CLASS_NAME, "banner")
    assert db.execute("SELECT state FROM wa_outbox.endpoints").fetchone()[0] == "enabled"
