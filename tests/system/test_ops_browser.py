"""/ops in a real browser: Debian's Chromium driven by Selenium, against the real app on a real socket.

The browser is installed by the first test that needs it (`apt-get install chromium chromium-driver`, when running as
root and they are missing); where none can be installed these tests are skipped, saying why.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.conftest import API_TOKEN
from tests.live import SENDER, running_worker, serve, wait_for, worker_settings

PACKAGES = ("chromium", "chromium-driver")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1280,1000")
TIMEOUT = 60  # seconds for any page to show what is awaited: the test machine is shared and busy


def _browser_paths() -> tuple[str | None, str | None]:
    return shutil.which("chromium"), shutil.which("chromedriver")


def _install_browser() -> str:
    """Install Debian's Chromium and its driver; returns what went wrong, or ''."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "not running as root"
    if not shutil.which("apt-get"):
        return "no apt-get on this system"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "--no-install-recommends", *PACKAGES]
    for step in ([install], [["apt-get", "-o", "DPkg::Lock::Timeout=600", "update"], install]):
        results = [subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800) for command in step]
        if all(r.returncode == 0 for r in results) and all(_browser_paths()):
            return ""
    return f"apt-get install {' '.join(PACKAGES)} failed: {results[-1].stderr.strip()[-300:]}"


@pytest.fixture(scope="session")
def chromium_paths() -> tuple[str, str]:
    """Chromium and chromedriver, installed once per session where missing; skips with the reason otherwise."""
    pytest.importorskip("selenium", reason="selenium is not installed (pip install -e '.[dev]')")
    chromium, driver = _browser_paths()
    if not (chromium and driver):
        problem = _install_browser()
        chromium, driver = _browser_paths()
        if not (chromium and driver):
            pytest.skip(f"no Chromium for the browser tests ({problem or 'chromium or chromedriver not on PATH'}); "
                        f"install Debian's {' and '.join(PACKAGES)}")
    return chromium, driver


@pytest.fixture(scope="module")
def ops_url(app):
    with serve(app) as url:
        yield url


@pytest.fixture
def browser(chromium_paths, tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    chromium, driver_path = chromium_paths
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")  # fresh: no cookies, no cache
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(TIMEOUT)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(browser, condition, what: str):
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait
    # A page being replaced under a check (a redirect, a reload) is not a failure: check again.
    return WebDriverWait(browser, TIMEOUT, poll_frequency=0.1,
                         ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)).until(
        condition, message=f"waiting for {what}")


def _text(browser) -> str:
    """The page's visible text; '' while a page is being replaced (a redirect, a form's answer)."""
    from selenium.common.exceptions import WebDriverException
    try:
        return browser.execute_script("return document.body ? document.body.innerText : ''") or ""
    except WebDriverException:
        return ""


def _log_in(browser, ops_url: str, token: str = API_TOKEN, then: str = "/ops") -> None:
    from selenium.webdriver.common.by import By
    browser.get(f"{ops_url}{then}")
    _wait(browser, lambda b: "/ops/login" in b.current_url, "the login form")
    browser.find_element(By.ID, "token").send_keys(token)
    browser.find_element(By.ID, "login").click()


def _dead_message(db, recipient: str = "5511987650000") -> int:
    row = db.execute(
        "INSERT INTO wa_outbox.notifications (phone_number_id, recipient, message, request_hash, status, attempts, "
        "last_error) VALUES (%s, %s, '{\"type\": \"text\", \"text\": {\"body\": \"hi\"}}', 'h', 'dead', 1, "
        "'{\"code\": 131026, \"message\": \"131026: Message undeliverable\"}') RETURNING id",
        (SENDER, recipient)).fetchone()
    db.execute("INSERT INTO wa_outbox.notification_events (notification_id, event, attempt, detail) "
               "VALUES (%s, 'dead', 1, '{\"code\": 131026}')", (row[0],))
    return row[0]


def _status(db, notification_id: int) -> str:
    return db.execute("SELECT status FROM wa_outbox.notifications WHERE id = %s", (notification_id,)).fetchone()[0]


def test_log_in_find_a_message_by_phone_number_and_see_its_timeline(browser, ops_url, app, settings, sim, sender,
                                                                     db):
    from selenium.webdriver.common.by import By

    from wa_outbox import outbox
    from wa_outbox.web import engine_of
    notification_id = outbox.accept_message(engine_of(app), to="+55 11 98765-4321",
                                            message={"type": "text", "text": {"body": "Your order shipped"}}).id
    with running_worker(worker_settings(settings, sim.base_url)):
        wait_for(lambda: _status(db, notification_id) == "read", timeout=TIMEOUT, what="the message to be read")

    _log_in(browser, ops_url)
    _wait(browser, lambda b: b.current_url.rstrip("/").endswith("/ops") and "Dead letters" in _text(b),
          "the ops page after logging in")
    search = browser.find_element(By.ID, "q")
    search.send_keys("+55 (11) 98765-4321")
    search.submit()
    _wait(browser, lambda b: f"/ops/messages/{notification_id}" in b.current_url, "the message page")
    timeline = browser.find_element(By.ID, "timeline").text
    for event in ("queued", "sending", "sent", "delivered", "read"):
        assert event in timeline.split(), f"{event} missing from the timeline:\n{timeline}"
    assert browser.find_element(By.ID, "recipient").text == "+5511987654321"  # as the CLI prints it
    assert "?q=" in browser.current_url  # the search is a link one can share


def test_retry_a_dead_message_and_see_it_queued(browser, ops_url, db):
    from selenium.webdriver.common.by import By
    dead = _dead_message(db)
    _log_in(browser, ops_url)
    _wait(browser, lambda b: "code 131026" in _text(b), "the dead-letter group on the ops page")
    row = browser.find_element(By.XPATH, f"//a[text()='{dead}']/ancestor::tr")
    row.find_element(By.XPATH, ".//button[text()='Retry']").click()
    _wait(browser, lambda b: f"Message {dead} requeued." in _text(b), "the confirmation")
    assert _status(db, dead) == "queued"
    browser.get(f"{ops_url}/ops?q={dead}")
    _wait(browser, lambda b: f"/ops/messages/{dead}" in b.current_url, "the message page")
    assert browser.find_element(By.ID, "message-status").text == "queued"
    assert "requeued" in browser.find_element(By.ID, "timeline").text.split()


def test_an_action_without_a_valid_session_or_csrf_token_is_refused(browser, ops_url, db):
    from selenium.webdriver.common.by import By
    dead = _dead_message(db)
    _log_in(browser, ops_url, token="not-a-token-0123456789")
    _wait(browser, lambda b: "not one of WA_OUTBOX_API_TOKENS" in _text(b), "the refused login")

    browser.find_element(By.ID, "token").send_keys(API_TOKEN)
    browser.find_element(By.ID, "login").click()
    _wait(browser, lambda b: "Dead letters" in _text(b), "the ops page")  # the session cookie is set by now
    browser.get(f"{ops_url}/ops/messages/{dead}")
    _wait(browser, lambda b: "Timeline" in _text(b), "the message page")

    # A form whose CSRF token is not the session's (as a form posted from another site would be).
    browser.execute_script("document.querySelectorAll('input[name=csrf_token]').forEach(i => i.value = 'forged')")
    browser.find_element(By.XPATH, "//button[text()='Retry']").click()
    _wait(browser, lambda b: "CSRF check failed" in _text(b), "the CSRF refusal")
    assert _status(db, dead) == "dead"

    # The session gone (expired, logged out elsewhere, or never there): the same button is refused.
    browser.get(f"{ops_url}/ops/messages/{dead}")
    _wait(browser, lambda b: "Timeline" in _text(b), "the message page")
    browser.delete_cookie("wa_outbox_ops")
    browser.find_element(By.XPATH, "//button[text()='Retry']").click()
    _wait(browser, lambda b: "Not logged in" in _text(b), "the refusal without a session")
    assert _status(db, dead) == "dead"
    browser.get(f"{ops_url}/ops")
    _wait(browser, lambda b: "/ops/login" in b.current_url, "the login form again")


def test_log_out_ends_the_session(browser, ops_url):
    from selenium.webdriver.common.by import By
    _log_in(browser, ops_url)
    _wait(browser, lambda b: "Dead letters" in _text(b), "the ops page")
    browser.find_element(By.ID, "logout").click()
    _wait(browser, lambda b: "/ops/login" in b.current_url, "the login form")
    browser.get(f"{ops_url}/ops")
    _wait(browser, lambda b: "/ops/login" in b.current_url, "the login form again")
