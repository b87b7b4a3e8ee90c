"""`wa-outbox simulator` as a process: it says where it listens, serves, applies its options, stops on SIGTERM."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import requests

RUN = "from wa_outbox.simulator.cli import simulator_command; simulator_command()"


def test_simulator_command_serves_and_stops_cleanly():
    env = {**os.environ, "WHATSAPP_ACCESS_TOKEN": "cli-token", "WHATSAPP_APP_SECRET": "cli-secret",
           "LOG_LEVEL": "WARNING"}
    fault = json.dumps({"mode": "error", "code": 131000, "count": 1})
    process = subprocess.Popen(
        [sys.executable, "-c", RUN, "--port", "0", "--fault", fault, "--mps", "50", "--status-delay-ms", "5"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = process.stdout.readline()
        found = re.search(r"listening on (http://127\.0\.0\.1:\d+/v23\.0) \(admin: (http://\S+/_admin)\)", line)
        assert found, line
        base_url, admin_url = found.groups()
        body = {"messaging_product": "whatsapp", "to": "+5511999990000", "type": "text", "text": {"body": "hi"}}
        url = f"{base_url}/100000000000001/messages"
        assert requests.post(url, json=body, headers={"Authorization": "Bearer dev-access-token"}).status_code == 401
        first = requests.post(url, json=body, headers={"Authorization": "Bearer cli-token"})
        assert first.json()["error"]["code"] == 131000
        assert requests.post(url, json=body, headers={"Authorization": "Bearer cli-token"}).status_code == 200
        config = requests.get(f"{admin_url}/config").json()["config"]
        assert (config["mps"], config["status_delays_ms"]) == (50, [5, 10, 15])
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=10)
    assert process.returncode == 0, err
    assert "stopped" in out


def test_a_bad_fault_rule_is_a_usage_error():
    result = subprocess.run([sys.executable, "-c", RUN, "--port", "0", "--fault", '{"mode": "explode"}'],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "explode" in result.stderr
