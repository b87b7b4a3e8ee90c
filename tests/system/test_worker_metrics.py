"""Metrics from the workers: counted in memory, written with each heartbeat, summed by the web process's /metrics
over every worker (running, stopped, killed), never going backwards; /metrics without a database; the metrics
token."""

from __future__ import annotations

import dataclasses
import json

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.live import SENDER, running_worker, wait_for, worker_settings
from tests.processes import free_port
from wa_outbox import db as wa_db
from wa_outbox.metrics import WorkerMetrics
from wa_outbox.web import create_app
from wa_outbox.worker._heartbeat import MetricsFlusher


@pytest.fixture
def engine(database_url):
    engine = wa_db.create_engine(database_url, pool_size=2, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


@pytest.fixture(autouse=True)
def no_worker_metrics(request):
    if "database_url" in request.fixturenames:
        with psycopg.connect(request.getfixturevalue("database_url"), autocommit=True) as conn:
            conn.execute("DELETE FROM wa_outbox.worker_metrics")
    yield


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """Every sample of a Prometheus text exposition, by (name, sorted labels)."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scrape(client, **headers) -> dict[tuple[str, tuple], float]:
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.get_data(as_text=True)
    return samples(response.get_data(as_text=True))


def enqueue(db, to: str, body: str = "x") -> int:
    return db.execute("SELECT wa_outbox.enqueue(%s, %s::jsonb)",
                      (to, json.dumps({"type": "text", "text": {"body": body}}))).fetchone()[0]


def status_of(db, nid: int) -> str:
    return db.execute("SELECT status FROM wa_outbox.notifications WHERE id = %s", (nid,)).fetchone()[0]


def test_worker_sends_outcomes_latency_claims_and_dead_letters_reach_the_web_metrics(
        client, db, sender, sim, settings):
    sim.set_faults([{"mode": "error", "code": 131026, "match": {"to": "5511900000003"}},
                    {"mode": "error", "code": 130429, "count": 1, "match": {"to": "5511900000004"}}])
    ok, dead, throttled = (enqueue(db, f"+55119000000{n:02d}") for n in (1, 3, 4))
    with running_worker(worker_settings(settings, sim.base_url)) as worker:
        wait_for(lambda: status_of(db, ok) in ("sent", "delivered", "read") and status_of(db, dead) == "dead"
                 and status_of(db, throttled) in ("sent", "delivered", "read"), timeout=60, what="all settled")
        wait_for(lambda: worker.inbound.stats["statuses"] >= 1, what="a status webhook processed")
        worker.maintain()  # a heartbeat: the metrics are written
        live = scrape(client)
    assert live[("wa_outbox_sends_total", (("code", "none"), ("outcome", "sent")))] == 2
    assert live[("wa_outbox_sends_total", (("code", "131026"), ("outcome", "dead")))] == 1
    assert live[("wa_outbox_sends_total", (("code", "130429"), ("outcome", "throttled")))] == 1
    assert live[("wa_outbox_dead_letters_total", (("queue", "notifications"),))] == 1
    assert live[("wa_outbox_throttle_pauses_total", (("reason", "sender_throttled"),))] == 1
    # Four sends (one retried after its 130429), each of a claim; a row given back unsent (its slot slipped too often
    # on a loaded machine) is claimed once more: the metric counts every claim the database recorded.
    claims = db.execute("SELECT count(*) FROM wa_outbox.notification_events WHERE event = 'sending'").fetchone()[0]
    assert claims >= 4
    assert live[("wa_outbox_claims_total", ())] == claims
    assert live[("wa_outbox_send_duration_seconds_count", ())] == 4
    assert live[("wa_outbox_send_duration_seconds_bucket", (("le", "+Inf"),))] == 4
    assert live[("wa_outbox_inbound_events_total", (("kind", "status"), ("result", "done")))] >= 1
    assert live[("wa_outbox_database_up", ())] == 1
    # the worker stopped cleanly: its totals were folded into the retired rows, and nothing went backwards
    after = scrape(client)
    assert db.execute("SELECT DISTINCT worker_id FROM wa_outbox.worker_metrics").fetchall() == [("retired",)]
    for key, value in live.items():
        if key[0].startswith(("wa_outbox_sends", "wa_outbox_dead", "wa_outbox_claims", "wa_outbox_send_duration")):
            assert after[key] >= value, key
    assert after[("wa_outbox_claims_total", ())] == live[("wa_outbox_claims_total", ())]


def test_a_restarted_worker_adds_to_the_totals_never_resets_them(client, db, sender, sim, settings):
    fast = worker_settings(settings, sim.base_url)
    first = enqueue(db, "+5511900000011")
    with running_worker(fast):
        wait_for(lambda: status_of(db, first) != "queued" and status_of(db, first) != "sending", what="sent")
    assert scrape(client)[("wa_outbox_claims_total", ())] == 1
    second = enqueue(db, "+5511900000012")
    with running_worker(fast) as worker:
        wait_for(lambda: status_of(db, second) not in ("queued", "sending"), what="sent")
        worker.maintain()
        assert scrape(client)[("wa_outbox_claims_total", ())] == 2  # retired 1 + live 1
    assert scrape(client)[("wa_outbox_claims_total", ())] == 2


def test_flusher_sets_cumulative_values_and_a_killed_workers_rows_are_retired_after_a_day(engine, db, client):
    metrics = WorkerMetrics()
    flusher = MetricsFlusher(engine, "w1", metrics)
    metrics.count("wa_outbox_claims_total", 3)
    flusher.flush()
    flusher.flush()  # the same values again: set, not added
    assert scrape(client)[("wa_outbox_claims_total", ())] == 3
    # w1 was killed a day ago; another worker's maintenance folds its rows into 'retired'
    db.execute("UPDATE wa_outbox.worker_metrics SET updated_at = now() - interval '25 hours' WHERE worker_id = 'w1'")
    MetricsFlusher(engine, "w2", WorkerMetrics()).retire(stopping=False)
    assert {r[0] for r in db.execute("SELECT worker_id FROM wa_outbox.worker_metrics")} == {"retired"}
    assert scrape(client)[("wa_outbox_claims_total", ())] == 3
    # w1 was only frozen: it comes back and goes on counting; what was retired is not counted twice
    metrics.count("wa_outbox_claims_total", 2)
    flusher.flush()
    assert scrape(client)[("wa_outbox_claims_total", ())] == 5
    metrics.count("wa_outbox_claims_total", 1)
    flusher.flush()
    assert scrape(client)[("wa_outbox_claims_total", ())] == 6
    flusher.retire(stopping=True)
    assert scrape(client)[("wa_outbox_claims_total", ())] == 6


def test_metrics_answer_with_database_up_0_when_the_database_is_down(settings):
    down = dataclasses.replace(settings, database_url=f"postgresql://postgres@127.0.0.1:{free_port()}/nothing")
    app = create_app(down, metrics=False)
    response = app.test_client().get("/metrics")
    assert response.status_code == 200
    found = samples(response.get_data(as_text=True))
    assert found[("wa_outbox_database_up", ())] == 0
    assert not any(name == "wa_outbox_queue_rows" for name, _ in found)  # no stale numbers


def test_metrics_token_is_required_when_set(settings, database_url):
    token = "metrics-token-0123456789"
    app = create_app(dataclasses.replace(settings, metrics_token=token), metrics=False)
    client = app.test_client()
    for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"}, {"Authorization": token}):
        refused = client.get("/metrics", headers=headers)
        assert refused.status_code == 401
        assert refused.get_json()["error"]["status"] == 401
        assert "wa_outbox" not in refused.get_data(as_text=True).replace("WA_OUTBOX_METRICS_TOKEN", "")
    assert scrape(client, Authorization=f"Bearer {token}")[("wa_outbox_database_up", ())] == 1


def test_worker_serves_its_own_metrics_port_when_asked(db, sender, sim, settings):
    import requests
    port = free_port()
    nid = enqueue(db, "+5511900000021")
    with running_worker(worker_settings(settings, sim.base_url, worker_metrics_port=port)):
        wait_for(lambda: status_of(db, nid) not in ("queued", "sending"), what="sent")
        found = samples(requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text)
    assert found[("wa_outbox_claims_total", ())] == 1
    assert found[("wa_outbox_sends_total", (("code", "none"), ("outcome", "sent")))] == 1
    assert SENDER  # the default sender sent it


def test_under_gunicorn_each_series_appears_once_never_once_per_worker_process(database_url, db, engine):
    import signal
    import subprocess
    import sys

    import requests

    from tests.processes import ROOT, service_env, wait_until_up
    metrics = WorkerMetrics()
    metrics.count("wa_outbox_claims_total", 3)
    MetricsFlusher(engine, "w1", metrics).flush()
    port, token = free_port(), "metrics-token-0123456789"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "--config", "python:wa_outbox.gunicorn_conf", "wsgi:app"], cwd=ROOT,
        env=service_env(database_url, WA_OUTBOX_BIND=f"127.0.0.1:{port}", WEB_CONCURRENCY="3",
                        WA_OUTBOX_METRICS_TOKEN=token),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(f"{base}/healthz", proc)
        assert requests.get(f"{base}/metrics", timeout=10).status_code == 401
        for _ in range(6):  # scrapes answered by different gunicorn worker processes
            text = requests.get(f"{base}/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=10).text
            claims = [line for line in text.splitlines() if line.startswith("wa_outbox_claims_total")]
            assert claims == ["wa_outbox_claims_total 3.0"], text
            assert [line for line in text.splitlines() if line.startswith("wa_outbox_database_up")] == \
                ["wa_outbox_database_up 1.0"]
            assert len([line for line in text.splitlines() if line.startswith("wa_outbox_workers_alive")]) == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0, output
    assert token not in output


def test_openmetrics_as_prometheus_asks_for_it(client, engine):
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
    metrics = WorkerMetrics()
    metrics.observe_send(0.3)
    MetricsFlusher(engine, "w1", metrics).flush()
    response = client.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert response.headers["Content-Type"].startswith("application/openmetrics-text")
    families = {f.name: f for f in parse_openmetrics(response.get_data(as_text=True))}
    histogram = {s.labels.get("le"): s.value for s in families["wa_outbox_send_duration_seconds"].samples
                 if s.name.endswith("_bucket")}
    assert histogram["0.25"] == 0 and histogram["0.5"] == 1 and histogram["+Inf"] == 1
    assert families["wa_outbox_database_up"].samples[0].value == 1


def test_an_inbound_event_that_died_with_its_worker_counts_as_a_dead_letter(database_url, db, client, settings):
    from wa_outbox.worker import Worker
    db.execute("INSERT INTO wa_outbox.webhook_events (dedup_key, field, kind, payload, status, attempts, max_attempts, "
               "locked_by, locked_until) VALUES ('d:x', 'calls', 'change', '{}', 'processing', 3, 3, 'gone', "
               "now() - interval '1 minute')")
    worker = Worker(settings)
    try:
        worker.maintain()  # rescues it (its last attempt was lost: dead) and writes the metrics
    finally:
        worker.engine.dispose()
    assert db.execute("SELECT status FROM wa_outbox.webhook_events").fetchone()[0] == "dead"
    assert scrape(client)[("wa_outbox_dead_letters_total", (("queue", "webhook_events"),))] == 1
