"""A fresh deployment's /metrics shows every series the shipped alerts and dashboard use before any traffic, the
labelled counters at 0 for every label value the code defines (so rate() and the panels have a series from the
deploy on, not "No data" until the first webhook or send): a just-started gunicorn web and worker process."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.live import wait_for
from tests.processes import ROOT, free_port, service_env, wait_until_up
from tests.system.test_alerts import alert_rules, dashboard_expressions
from tests.system.test_worker_process import start_worker_process
from wa_outbox.metrics import WORKER_COUNTERS, InboundResult, Rejection, SendOutcome, WebhookResult, send_outcome
from wa_outbox.states import MessageStatus, WebhookEventKind, WebhookEventStatus
from wa_outbox.worker._inbound import inbound_result

SELECTOR = re.compile(r"\b((?:wa_outbox|flask)_[a-z0-9_]+)\b(?:\{([^}]*)\})?")
MATCHER = re.compile(r'(\w+)\s*(=|!=)\s*"([^"]*)"')
GAUGES = {"wa_outbox_workers_alive", "wa_outbox_worker_heartbeat_age_seconds", "wa_outbox_database_up",
          "wa_outbox_queue_rows", "wa_outbox_queue_oldest_age_seconds", "wa_outbox_senders_paused",
          "wa_outbox_endpoints", "wa_outbox_deliveries_lag_seconds"}
# One series per business portfolio with a messaging limit (issue 20): none exists before an operator sets one.
PER_PORTFOLIO = {"wa_outbox_portfolio_budget_remaining", "wa_outbox_portfolio_messages_held"}


def referenced() -> list[tuple[str, list[tuple[str, str, str]]]]:
    """(metric, [(label, op, value)]) for every selector of the shipped rules and dashboard."""
    found = []
    for expr in [rule["expr"] for rule in alert_rules().values()] + dashboard_expressions():
        for name, matchers in SELECTOR.findall(expr):
            found.append((name, MATCHER.findall(matchers)))
    return found


def samples_of(text: str) -> list[tuple[str, dict, float]]:
    return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]


def matching(samples, name: str, matchers) -> list[tuple[str, dict, float]]:
    return [(n, labels, v) for n, labels, v in samples if n == name and all(
        (labels.get(k) == value) == (op == "=") for k, op, value in matchers)]


# --- the known label values come from the code's own classification (pure) -----------------------------------------

def test_every_outcome_the_classifiers_give_is_a_known_label_value():
    words = {send_outcome(status, refund) for status in MessageStatus for refund in (False, True)}
    assert words == set(SendOutcome)
    results = {inbound_result({"status": status, "refund": refund})
               for status in (WebhookEventStatus.DONE, WebhookEventStatus.DEAD, WebhookEventStatus.QUEUED)
               for refund in (False, True)} | {InboundResult.LEASE_LOST}
    assert results == set(InboundResult)
    shown = {name: set(values) for name, (_, _, values) in WORKER_COUNTERS.items()}
    assert shown["wa_outbox_sends_total"] == {(o.value, "none") for o in SendOutcome}
    assert shown["wa_outbox_inbound_events_total"] == {(k.value, r.value) for k in WebhookEventKind
                                                       for r in InboundResult}


# --- a just-started web and worker, no traffic ------------------------------------------------------------------

@pytest.fixture
def fresh_deployment(database_url, tmp_path):
    """gunicorn (multiprocess mode) and a worker process on an empty database; yields (web URL, worker URL)."""
    web_port, worker_port, multiproc = free_port(), free_port(), tmp_path / "prometheus"
    multiproc.mkdir()
    web = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "--config", "python:wa_outbox.gunicorn_conf", "wsgi:app"], cwd=ROOT,
        env=service_env(database_url, WA_OUTBOX_BIND=f"127.0.0.1:{web_port}",
                        PROMETHEUS_MULTIPROC_DIR=str(multiproc)),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    nothing_listens = f"http://127.0.0.1:{free_port()}"  # no traffic: the worker never calls the Graph API
    worker = start_worker_process(database_url, nothing_listens, WA_OUTBOX_WORKER_METRICS_PORT=str(worker_port))
    try:
        wait_until_up(f"http://127.0.0.1:{web_port}/healthz", web)
        yield f"http://127.0.0.1:{web_port}", f"http://127.0.0.1:{worker_port}"
    finally:
        for proc in (worker, web):
            proc.send_signal(signal.SIGTERM)
        for proc in (worker, web):
            output = proc.communicate(timeout=60)[0]
            assert proc.returncode == 0, output


def _worker_metrics(url: str) -> str | None:
    try:
        return requests.get(f"{url}/metrics", timeout=5).text
    except requests.ConnectionError:  # not listening yet
        return None


def test_a_fresh_deployment_shows_every_series_of_the_alerts_and_dashboard_at_0(fresh_deployment):
    web_url, worker_url = fresh_deployment

    def web_metrics_with_the_worker_alive() -> str | None:
        text = requests.get(f"{web_url}/metrics", timeout=10).text
        return text if "wa_outbox_workers_alive 1.0" in text else None

    text = wait_for(web_metrics_with_the_worker_alive, timeout=60, interval=0.2, what="the worker's heartbeat")
    worker_text = wait_for(lambda: _worker_metrics(worker_url), timeout=60, interval=0.2, what="the worker's port")
    web, own = samples_of(text), samples_of(worker_text)
    for name, matchers in referenced():
        if name in PER_PORTFOLIO:
            continue
        found = matching(web, name, matchers)
        assert found, f"{name}{{{matchers}}}: no series before traffic"
        if name not in GAUGES:
            assert {v for _, _, v in found} == {0.0}, (name, found)
    # every label value the code defines, at 0 — on the web's /metrics and on the worker's own port
    known = {"wa_outbox_webhook_events_total": [{"result": r.value} for r in WebhookResult],
             "wa_outbox_webhook_rejected_total": [{"reason": r.value} for r in Rejection]}
    for name, (_, label_names, values) in WORKER_COUNTERS.items():
        known[name] = [dict(zip(label_names, v, strict=True)) for v in values]
    for name, label_sets in known.items():
        for labels in label_sets:
            assert (name, labels, 0.0) in web, (name, labels)
            if name in WORKER_COUNTERS:
                assert (name, labels, 0.0) in own, (name, labels)
    assert len(known["wa_outbox_sends_total"]) == len(SendOutcome)
    assert {"reason": "too_large"} in known["wa_outbox_webhook_rejected_total"]
