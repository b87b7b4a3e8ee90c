"""The shipped alerts and dashboard: promtool checks and unit-tests the rules, every metric they name exists on the
/metrics of a running system, and every worker dying pages within two minutes, evaluated on live /metrics values."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import post_webhook
from tests.live import running_worker, wait_for, worker_settings
from tests.system.test_worker_metrics import enqueue, no_worker_metrics, samples, status_of  # noqa: F401 - autouse
from tests.system.test_worker_process import start_worker_process

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
ALERTS_TEST = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "wa-outbox.json"
METRIC_NAME = re.compile(r"\b((?:wa_outbox|flask)_[a-z0-9_]+)\b")


def _install_promtool() -> str | None:
    """promtool, installing Debian's `prometheus` package (which ships it) when running as root with apt."""
    found = shutil.which("promtool")
    if found or os.geteuid() != 0 or not shutil.which("apt-get"):
        return found
    subprocess.run(["apt-get", "install", "-y", "-q", "prometheus"], capture_output=True, timeout=600,
                   env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    return shutil.which("promtool")


@pytest.fixture(scope="session")
def promtool() -> str | None:
    return _install_promtool()


def need(promtool: str | None) -> str:
    if not promtool:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus) and could not be installed here")
    return promtool


def alert_rules() -> dict[str, dict]:
    return {rule["alert"]: rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]}


def dashboard_expressions() -> list[str]:
    return [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"]]


def test_promtool_checks_the_rules_and_their_unit_tests_pass(promtool):
    tool = need(promtool)
    checked = subprocess.run([tool, "check", "rules", str(ALERTS)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run([tool, "test", "rules", ALERTS_TEST.name], cwd=ALERTS_TEST.parent,
                            capture_output=True, text=True)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # every alert has a case that fires and one that stays silent
    cases = [case for test in yaml.safe_load(ALERTS_TEST.read_text())["tests"] for case in test["alert_rule_test"]]
    for name in alert_rules():
        assert any(c["alertname"] == name and c["exp_alerts"] for c in cases), f"{name}: no firing case"
        assert any(c["alertname"] == name and not c["exp_alerts"] for c in cases), f"{name}: no silent case"


def test_the_issue_alerts_are_all_shipped():
    expressions = {name: rule["expr"] for name, rule in alert_rules().items()}
    wanted = ["wa_outbox_workers_alive", 'status="queued"', "wa_outbox_dead_letters_total",
              "wa_outbox_senders_paused", 'status="unknown"', 'queue="webhook_events"', 'reason="signature"',
              'url_rule="/webhooks/whatsapp"', "wa_outbox_database_up",
              "wa_outbox_endpoints_disabled_total", "wa_outbox_deliveries_lag_seconds",
              "wa_outbox_template_dead_letters_total", "wa_outbox_template_category_changes_pending",
              # issue 20: a portfolio's messaging limit used up with messages waiting
              "wa_outbox_portfolio_messages_held", "wa_outbox_portfolio_budget_remaining"]
    for fragment in wanted:
        assert any(fragment in expr for expr in expressions.values()), fragment
    assert "increase(wa_outbox_queue_rows" not in " ".join(expressions.values())  # never increase() of a gauge


def exposed_names(text: str) -> set[str]:
    names = set()
    for family in text_string_to_metric_families(text):
        names |= {family.name, f"{family.name}_total"} | {s.name for s in family.samples}
    return names


def test_every_metric_of_the_dashboard_and_alerts_is_on_metrics_of_a_running_system(client, db, sender, sim,
                                                                                      settings):
    sim.set_faults([{"mode": "error", "code": 131026, "match": {"to": "5511900000031"}}])
    ids = [enqueue(db, "+5511900000030"), enqueue(db, "+5511900000031")]
    post_webhook(client, {"object": "whatsapp_business_account", "entry": []}, secret="wrong secret")
    with running_worker(worker_settings(settings, sim.base_url)) as worker:
        wait_for(lambda: all(status_of(db, i) not in ("queued", "sending") for i in ids), what="both settled")
        wait_for(lambda: worker.inbound.stats["processed"] >= 1, what="a status webhook processed")
        worker.maintain()
        text = client.get("/metrics").get_data(as_text=True)
    exposed = exposed_names(text)
    referenced = {name for expr in [r["expr"] for r in alert_rules().values()] + dashboard_expressions()
                  for name in METRIC_NAME.findall(expr)}
    assert referenced, "no metric names found"
    assert referenced - exposed == set()
    # and the workers' series carry values, not just names
    found = samples(text)
    assert found[("wa_outbox_dead_letters_total", (("queue", "notifications"),))] == 1
    assert found[("wa_outbox_webhook_rejected_total", (("reason", "signature"),))] >= 1


def _fires_within(series: list[float], step: int, expr_threshold_zero: bool, for_seconds: int, promtool: str | None,
                  tmp_path: Path, deadline_seconds: int) -> None:
    """Evaluate WaOutboxNoWorkerAlive over `series` (wa_outbox_workers_alive scraped every `step` s, from the
    moment the workers died): with promtool when installed, else by the rule's own meaning (== 0 for `for`)."""
    if promtool:
        rule = alert_rules()["WaOutboxNoWorkerAlive"]
        (tmp_path / "alerts.yml").write_text(yaml.safe_dump({"groups": [{"name": "live", "rules": [rule]}]}))
        values = " ".join(f"{v:g}" for v in series)
        case = {"rule_files": ["alerts.yml"], "evaluation_interval": f"{step}s", "tests": [{
            "interval": f"{step}s",
            "input_series": [{"series": "wa_outbox_workers_alive", "values": values}],
            "alert_rule_test": [{"eval_time": f"{deadline_seconds}s", "alertname": "WaOutboxNoWorkerAlive",
                                 "exp_alerts": [{"exp_labels": rule["labels"],
                                                 "exp_annotations": rule["annotations"]}]}]}]}
        (tmp_path / "live_test.yml").write_text(yaml.safe_dump(case))
        result = subprocess.run([promtool, "test", "rules", "live_test.yml"], cwd=tmp_path, capture_output=True,
                                text=True)
        assert result.returncode == 0, result.stdout + result.stderr
        return
    assert expr_threshold_zero
    first_zero = next(i for i, v in enumerate(series) if v == 0) * step
    assert all(v == 0 for v in series[first_zero // step:])
    assert first_zero + for_seconds <= deadline_seconds


def _duration_seconds(text: str) -> int:
    return sum(int(n) * {"s": 1, "m": 60, "h": 3600}[u] for n, u in re.findall(r"(\d+)([smh])", text))


def test_every_worker_dying_pages_within_two_minutes(client, db, sender, sim, database_url, promtool, tmp_path):
    rule = alert_rules()["WaOutboxNoWorkerAlive"]
    assert rule["expr"].strip() == "wa_outbox_workers_alive == 0"
    for_seconds = _duration_seconds(rule["for"])

    def alive() -> float:
        return samples(client.get("/metrics").get_data(as_text=True))[("wa_outbox_workers_alive", ())]

    workers = [start_worker_process(database_url, sim.base_url) for _ in range(2)]
    try:
        wait_for(lambda: alive() == 2, timeout=60, interval=0.5, what="two workers alive on /metrics")
    finally:
        for proc in workers:  # every worker dies at once, as on a crash: no clean stop, no goodbye
            proc.send_signal(signal.SIGKILL)
            proc.communicate()
    died = time.monotonic()
    # Scrape /metrics as Prometheus would, every 5 s, until it says no worker is alive (at most ~30 s), and a few
    # scrapes more to see it stay so.
    step, series, zero_scrapes = 5, [], 0
    while zero_scrapes < 4:
        assert time.monotonic() - died < 90, f"workers_alive never reached 0: {series}"
        series.append(alive())
        zero_scrapes = zero_scrapes + 1 if series[-1] == 0 else 0
        time.sleep(max(0.0, died + step * len(series) - time.monotonic()))  # the scrape interval: time is the test
    # No heartbeat can come from a dead worker: from here on the value stays 0 until a worker starts again.
    series += [0.0] * (120 // step)
    _fires_within(series, step, True, for_seconds, promtool, tmp_path, deadline_seconds=120)


def test_the_number_health_alerts_are_shipped():
    """Issue 20: a sender's quality dropping, a sender flagged, restricted or disabled each alert."""
    expressions = " ".join(rule["expr"] for rule in alert_rules().values())
    for fragment in ("wa_outbox_senders_quality_dropped", "wa_outbox_senders_flagged", "wa_outbox_senders_restricted",
                     "wa_outbox_senders_banned"):
        assert fragment in expressions, fragment
