"""The chaos run, reduced (`bench/chaos.py --quick`): 1,000 messages through every enqueue path while workers are
SIGKILLed, the web restarted and Postgres stopped and crashed, then the audit. The same fire and audit as the full
run on a shorter clock (a higher rate, a shorter lease and unknown window: about a minute). It brings its own embedded
Postgres, simulator, gunicorn and workers (whatever DATABASE_URL says), needs no network beyond 127.0.0.1, and fails
on any violation the audit finds, printing its report. When the build delivers events (the events engine and the
workers' delivery threads), the same run also delivers them to a flaky endpoint and an ordered one and audits those:
one run for both tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.chaos_endpoints import engine_missing

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def chaos_results(tmp_path_factory) -> dict:
    results_path = tmp_path_factory.mktemp("chaos") / "chaos.json"
    proc = subprocess.run([sys.executable, "bench/chaos.py", "--quick", "--json", str(results_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=1200)
    report = "\n".join(line for line in proc.stdout.splitlines() if line.startswith("chaos:"))
    print(report)
    assert proc.returncode == 0, f"{report}\n{proc.stderr[-3000:]}"
    return json.loads(results_path.read_text())["results"]


def test_the_quick_chaos_run_loses_nothing_and_sends_nothing_twice(chaos_results):
    results = chaos_results
    assert results["violations"] == []
    # The fire really happened: workers killed, both Postgres outages, the late worker working, faults injected.
    assert results["kills"] >= 3
    assert len(results["postgres_down"]) == 2
    assert results["late_worker_sends"] > 0
    outcomes = results["sim_outcomes"]
    assert all(outcomes.get(kind, 0) > 0 for kind in ("http_error", "lost_response", "timeout", "error_131026",
                                                      "error_130429", "error_131056", "error_131000")), outcomes
    assert results["webhook_redeliveries"] > 0 and results["unknown_messages"] > 0
    assert all(counts == {"refused": 3} for counts in results["nul_texts"].values())
    # Customers' files were in the inbound stream (their lookups and downloads faulted): every one stored, with one
    # media.ready each (the audit's violations say byte-identical, and name any file that is not).
    assert results["media_files"] > 0
    assert results["media_stored"] == results["media_ready_events"] == results["media_files"]
    # And the audit's figures agree with its verdict.
    assert results["lost"] == 0 and results["sent_twice_knowable"] == 0 and results["stored_twice"] == 0
    assert results["dead"] == results["permanent"] > 0
    assert results["webhook_updates_lost"] == 0 and results["web_5xx_outside_outages"] == 0
    # Strangers flooded invented methods, random paths and queries beside it: /metrics did not grow.
    assert results["metrics_flood"]["flood_requests"] > 300
    assert results["metrics_flood"]["series_added_by_300_more"] == 0
    assert results["metrics_flood"]["invented_methods_on_metrics"] == 0
    # The promise: never more than the limit in any sliding second of the moments the requests went (the workers'
    # own record), whatever the machine's load; at the simulator, give or take what the bucket's shape allows for
    # the delays from claim to arrival measured on this (busy) machine.
    assert results["requests_with_their_moment"] > 0
    assert results["max_requests_per_sliding_second"] <= results["mps"]
    assert results["max_per_sliding_second"] <= results["rate_bound_for_measured_delays"]


def test_the_quick_chaos_run_delivers_every_event_to_a_flaky_and_an_ordered_endpoint(request):
    # The events engine is part of the product: a build without it is a regression, not a reason to skip.
    assert engine_missing(ROOT) is None, engine_missing(ROOT)
    chaos_results = request.getfixturevalue("chaos_results")
    deliveries = chaos_results["deliveries"]
    assert "skipped" not in deliveries, deliveries
    assert chaos_results["violations"] == []
    flaky, ordered = deliveries["flaky"], deliveries["ordered"]
    for endpoint in (flaky, ordered):
        # Every matching event (by webhook-id, against wa_outbox.events) answered 2xx at least once; every arrival
        # verified by the standardwebhooks reference library and carrying its event's row; nothing else delivered.
        assert endpoint["matching_events"] > 0 and endpoint["lost"] == 0, endpoint
        assert endpoint["delivered_events"] == endpoint["matching_events"]
        assert endpoint["unverified"] == endpoint["mismatched"] == endpoint["unexpected"] == 0
        assert endpoint["not_dispatched"] == endpoint["dispatched_outside_filter"] == 0
        assert "failed" not in endpoint["deliveries_by_status"], endpoint["deliveries_by_status"]
    # The faults really happened: the flaky receiver refused, hung and dropped; the ordered one refused.
    assert all(flaky["answers"].get(kind, 0) > 0 for kind in ("500", "hang", "drop")), flaky["answers"]
    assert ordered["answers"].get("500", 0) > 0, ordered["answers"]
    # The filter: the ordered endpoint takes message.received and message.status only, the flaky one every type.
    assert flaky["matching_events"] == deliveries["events"]
    assert ordered["matching_events"] == sum(count for type_, count in deliveries["events_by_type"].items()
                                             if type_ in ("message.received", "message.status"))
    # Each conversation's events arrived in their order, one at a time.
    assert ordered["conversations"] > 1
    assert ordered["order_violations"] == 0 and ordered["in_flight_together"] == 0
