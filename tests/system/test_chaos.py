"""The chaos run, reduced (`bench/chaos.py --quick`): 1,000 messages through every enqueue path while workers are
SIGKILLed, the web restarted and Postgres stopped and crashed, then the audit. The same fire and audit as the full
run on a shorter clock (a higher rate, a shorter lease and unknown window: about a minute). It brings its own embedded
Postgres, simulator, gunicorn and workers (whatever DATABASE_URL says), needs no network beyond 127.0.0.1, and fails
on any violation the audit finds, printing its report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_quick_chaos_run_loses_nothing_and_sends_nothing_twice(tmp_path):
    results_path = tmp_path / "chaos.json"
    proc = subprocess.run([sys.executable, "bench/chaos.py", "--quick", "--json", str(results_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=1200)
    report = "\n".join(line for line in proc.stdout.splitlines() if line.startswith("chaos:"))
    print(report)
    assert proc.returncode == 0, f"{report}\n{proc.stderr[-3000:]}"
    results = json.loads(results_path.read_text())["results"]
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
    # And the audit's figures agree with its verdict.
    assert results["lost"] == 0 and results["sent_twice_knowable"] == 0 and results["stored_twice"] == 0
    assert results["dead"] == results["permanent"] > 0
    assert results["webhook_updates_lost"] == 0 and results["web_5xx_outside_outages"] == 0
    # Strangers flooded invented methods, random paths and queries beside it: /metrics did not grow.
    assert results["metrics_flood"]["flood_requests"] > 300
    assert results["metrics_flood"]["series_added_by_300_more"] == 0
    assert results["metrics_flood"]["invented_methods_on_metrics"] == 0
    # At most the limit in any sliding second at the simulator, give or take what the bucket's shape allows for
    # the delays from claim to arrival measured on this (busy) machine.
    assert results["max_per_sliding_second"] <= results["rate_bound_for_measured_delays"]
