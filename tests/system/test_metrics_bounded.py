"""No request adds a series to /metrics: the request metrics' labels are bounded by what the app defines (the methods
it routes, its route rules, the HTTP status registry), in-process and under gunicorn's multiprocess mode, so a flood of
invented methods, random paths and query strings leaves /metrics (and the multiprocess directory) as it was."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from pathlib import Path

import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.live import wait_for
from tests.processes import ROOT, free_port, service_env, wait_until_up
from wa_outbox.metrics import RequestLabels

KNOWN_METHODS = ("GET", "HEAD", "OPTIONS", "POST", "PUT", "DELETE", "PATCH")  # the last three: routed nowhere


def series(text: str) -> set[tuple[str, tuple]]:
    """The series a request can touch: the request metrics and the webhook counters (the rest is read from
    Postgres, where workers of other tests may still be writing)."""
    return {(s.name, tuple(sorted(s.labels.items()))) for f in text_string_to_metric_families(text)
            for s in f.samples if s.name.startswith(("flask_", "wa_outbox_webhook_"))}


def invented_method(rng: random.Random) -> str:
    return "M" + "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") for _ in range(7))


def random_path(rng: random.Random, under: str) -> str:
    return f"{under}/x-{rng.getrandbits(48):012x}"


def random_query(rng: random.Random) -> str:
    return f"?q{rng.getrandbits(16)}={rng.getrandbits(32):x}&utm_{rng.getrandbits(8)}=1"


def request_shapes(rng: random.Random, one_each: bool = False):
    """(method, path) for every shape of the flood: invented or known methods on a route, a random path, a random
    path under /ops, each with a random query string. `one_each`: one request of each shape (the warm-up)."""
    methods = [invented_method(rng)] + list(KNOWN_METHODS)
    targets = ["/healthz", "", "/ops"]
    if one_each:
        return [(m, (t if t == "/healthz" else random_path(rng, t)) + random_query(rng))
                for m in methods for t in targets]
    flood = []
    for _ in range(300):
        method = invented_method(rng) if rng.random() < 0.6 else rng.choice(KNOWN_METHODS)
        target = rng.choice(targets)
        flood.append((method, (target if target == "/healthz" else random_path(rng, target)) + random_query(rng)))
    return flood


def assert_bounded(found: set[tuple[str, tuple]], app_methods: set[str], rules: set[str]) -> None:
    for name, labels in found:
        labels = dict(labels)
        if name.startswith("flask_http_"):
            assert labels.get("method", "other") in app_methods | {"other"}, (name, labels)
            assert labels.get("url_rule", "unmatched") in rules | {"unmatched"}, (name, labels)


# --- the rule, pure ------------------------------------------------------------------------------------------------

def test_request_labels_keep_what_the_app_defines_and_fold_the_rest():
    bound = RequestLabels({"GET", "POST"}, {"/healthz", "/v1/messages/<int:id>"})
    assert bound({"method": "GET", "url_rule": "/healthz", "status": 200}) == \
        {"method": "GET", "url_rule": "/healthz", "status": "200"}
    assert bound({"method": "M123ZZ", "url_rule": "None", "status": 404}) == \
        {"method": "other", "url_rule": "unmatched", "status": "404"}
    assert bound({"method": "get", "url_rule": "/v1/messages/7", "status": 599}) == \
        {"method": "other", "url_rule": "unmatched", "status": "5xx"}
    assert bound({"method": "POST", "status": "teapot"}) == {"method": "POST", "status": "other"}
    assert bound({"method": "POST", "url_rule": "/v1/messages/<int:id>", "status": 201})["url_rule"] == \
        "/v1/messages/<int:id>"


# --- in-process ----------------------------------------------------------------------------------------------------

def test_a_flood_of_invented_methods_paths_and_queries_adds_no_series_in_process(app, client):
    rng = random.Random(17)
    for method, path in request_shapes(rng, one_each=True):
        client.open(path, method=method)
    client.get("/metrics")  # a scrape counts itself once answered
    before = series(client.get("/metrics").get_data(as_text=True))
    answers = {client.open(path, method=method).status_code for method, path in request_shapes(rng)}
    after = series(client.get("/metrics").get_data(as_text=True))
    assert answers <= {200, 404, 405}
    assert after - before == set()
    methods = {m for rule in app.url_map.iter_rules() for m in rule.methods}
    assert_bounded(after, methods, {rule.rule for rule in app.url_map.iter_rules()})


# --- gunicorn, multiprocess mode, as the Procfile runs it ------------------------------------------------------------

def _directory_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file())


def test_a_flood_adds_no_series_under_gunicorn_nor_bytes_to_the_multiprocess_directory(app, database_url, tmp_path):
    port, multiproc = free_port(), tmp_path / "prometheus"
    multiproc.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "--config", "python:wa_outbox.gunicorn_conf", "wsgi:app"], cwd=ROOT,
        env=service_env(database_url, WA_OUTBOX_BIND=f"127.0.0.1:{port}", PROMETHEUS_MULTIPROC_DIR=str(multiproc),
                        WEB_CONCURRENCY="2"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base, rng = f"http://127.0.0.1:{port}", random.Random(16)
    try:
        wait_until_up(f"{base}/healthz", proc)
        # both gunicorn workers booted (each writes its counters at 0 on start), so none adds its files mid-flood
        wait_for(lambda: len(list(multiproc.glob("counter_*.db"))) == 2, timeout=60, what="both workers' files")
        with requests.Session() as http:
            for method, path in request_shapes(rng, one_each=True):
                http.request(method, base + path, timeout=30)
            http.get(f"{base}/metrics", timeout=30)  # a scrape counts itself once answered
            text_before = http.get(f"{base}/metrics", timeout=30).text
            size_before = _directory_bytes(multiproc)
            answers = {http.request(method, base + path, timeout=30).status_code
                       for method, path in request_shapes(rng)}
            text_after = http.get(f"{base}/metrics", timeout=30).text
        size_after = _directory_bytes(multiproc)
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0, output
    assert answers <= {200, 404, 405}
    before, after = series(text_before), series(text_after)
    assert after - before == set()
    assert size_after == size_before, sorted((f.name, f.stat().st_size) for f in multiproc.iterdir())
    assert_bounded(after, {m for rule in app.url_map.iter_rules() for m in rule.methods},
                   {rule.rule for rule in app.url_map.iter_rules()})  # the same routes as gunicorn's app
    assert 'method="other"' in text_after and 'url_rule="unmatched"' in text_after
