"""The chaos run's endpoints (bench/chaos.py): two receivers subscribed to the run's events, and their audit.

- `flaky`: every event type, unordered; its receiver answers 500, hangs past the delivery timeout or drops the
  connection at random (seeded, bench/receivers.py), so most events take retries;
- `ordered`: message.received and message.status only, ordered; its receiver fails now and then too, so an event
  held by its retries must hold its own conversation (phone_number_id, wa_id) and only that.
Both are real local HTTP servers in processes of their own; the workers deliver to them through every SIGKILL, web
restart and Postgres outage of the run. The endpoints are rows written here (as `wa-outbox endpoints add` would:
a `whsec_` secret encrypted with wa_outbox.secret_box under a fresh WA_OUTBOX_SECRET_KEY given to the processes,
WA_OUTBOX_ENDPOINTS_ALLOW_PRIVATE=true for http://127.0.0.1).

The audit, per endpoint, from the receivers' records against wa_outbox.events:
- lost: an event matching the endpoint's filter that its receiver never answered 2xx (by webhook-id = event id);
- a delivery the reference library (`standardwebhooks`) does not verify, whose webhook-id is not the body's id, whose
  type or data differ from the event's row, or of an event the filter does not match;
- duplicates (an event answered 2xx more than once: at least once allows them), counted and reported;
- the ordered endpoint: within each conversation, every arrival's event at least the one before it in the feed's
  order (txid, seq) (retries of one event may repeat; a later event never comes before an earlier one is
  delivered), and no two events of one conversation in flight at once; how often the feed's order put a higher seq
  first is counted too;
- the deliveries table: no delivery `failed` (the retry schedule ran out), one row per matching event, none other.
"""

from __future__ import annotations

import base64
import collections
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.receivers import data_digest  # noqa: E402
from wa_outbox.events import event_id  # noqa: E402
from wa_outbox.secret_box import SecretBox, fingerprint, generate_key  # noqa: E402

# The run's delivery clock: a hang outlasts the timeout; the lease (bench/chaos.py) must exceed the timeout + 5 s
# (config's rule); the schedule retries for about 30 s, far longer than any outage of the run, so a delivery that
# ends `failed` is a lost event, not bad luck (at the flaky receiver's rates, 30 failures in a row: < 1e-20).
DELIVERY_TIMEOUT = 2.0
HANG_SECONDS = DELIVERY_TIMEOUT + 1.0
SCHEDULE = ",".join(["0.2", "0.5", *["1"] * 28])
ENDPOINTS = (
    {"name": "flaky", "ordered": False, "event_types": None,
     "faults": {"--fail-500": 0.12, "--hang": 0.02, "--drop": 0.06}, "seed": 5},
    {"name": "ordered", "ordered": True, "event_types": ["message.received", "message.status"],
     "faults": {"--fail-500": 0.05, "--drop": 0.02}, "seed": 6},
)
_WRITES_EVENTS = re.compile(r"insert\s+into\s+wa_outbox\.events\b", re.IGNORECASE)


def engine_missing(root: Path = ROOT) -> str | None:
    """Why this build cannot deliver events (the run then skips its endpoints), or None when it can."""
    sql = "\n".join(p.read_text(encoding="utf-8") for p in sorted((root / "wa_outbox" / "sql").glob("*.sql")))
    if not _WRITES_EVENTS.search(sql):
        return "nothing writes wa_outbox.events in this build (the events engine: branch events-core)"
    if not (root / "wa_outbox" / "worker" / "_deliverer.py").exists():
        return "the worker has no delivery threads in this build (wa_outbox/worker/_deliverer.py: branch deliveries)"
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Endpoint:
    def __init__(self, spec: dict[str, Any], directory: Path, box: SecretBox) -> None:
        self.name, self.ordered, self.event_types = spec["name"], spec["ordered"], spec["event_types"]
        self.id = f"ep_chaos{spec['name']}{os.urandom(4).hex()}"
        self.secret = "whsec_" + base64.b64encode(os.urandom(24)).decode("ascii")
        self.secret_enc, self.port = box.encrypt(self.secret), free_port()
        self.url = f"http://127.0.0.1:{self.port}/events"
        self.log = directory / f"receiver-{self.name}.jsonl"
        faults = [str(x) for flag, rate in spec["faults"].items() for x in (flag, rate)]
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "receivers.py"), "--port", str(self.port), "--log", str(self.log),
             "--seed", str(spec["seed"]), "--hang-seconds", str(HANG_SECONDS), *faults],
            env={**os.environ, "RECEIVER_SECRET": self.secret}, stdout=subprocess.PIPE,
            stderr=(directory / f"receiver-{self.name}.err").open("w"), text=True)
        if self.process.stdout is None or self.process.stdout.readline().strip() != "listening":
            raise SystemExit(f"chaos: the {self.name} receiver did not start (see receiver-{self.name}.err)")

    def matches(self, type_: str) -> bool:
        return self.event_types is None or type_ in self.event_types

    def arrivals(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        lines = [json.loads(line) for line in self.log.read_text(encoding="utf-8").splitlines() if line.strip()]
        return sorted(lines, key=lambda a: a["n"])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class Endpoints:
    """Both endpoints: their rows, their receivers, the settling test and the audit."""

    def __init__(self, url: str, directory: Path) -> None:
        self.url, self.key = url, generate_key()
        box = SecretBox([self.key])
        self.endpoints = [Endpoint(spec, directory, box) for spec in ENDPOINTS]
        with psycopg.connect(url) as conn:
            for e in self.endpoints:
                conn.execute("INSERT INTO wa_outbox.endpoints (id, url, description, event_types, ordered, secret_enc,"
                             " secret_fingerprint) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                             (e.id, e.url, f"chaos: {e.name}", e.event_types, e.ordered, e.secret_enc,
                              fingerprint(e.secret)))

    def env(self) -> dict[str, str]:
        """What the web and the workers need to deliver to these endpoints on the run's clock."""
        return {"WA_OUTBOX_SECRET_KEY": self.key, "WA_OUTBOX_ENDPOINTS_ALLOW_PRIVATE": "true",
                "WA_OUTBOX_DELIVERY_TIMEOUT": f"{DELIVERY_TIMEOUT:g}", "WA_OUTBOX_DELIVERY_SCHEDULE": SCHEDULE}

    def pending(self) -> int:
        """Events matching an endpoint that are neither delivered nor failed there yet (dispatched or not)."""
        with psycopg.connect(self.url, connect_timeout=2) as conn:
            return conn.execute(
                "SELECT count(*) FROM wa_outbox.endpoints p JOIN wa_outbox.events e"
                "  ON p.event_types IS NULL OR e.type = ANY (p.event_types) "
                "WHERE p.id = ANY (%s) AND NOT EXISTS (SELECT 1 FROM wa_outbox.deliveries d WHERE d.endpoint_id = p.id"
                "  AND d.event_seq = e.seq AND d.status IN ('delivered', 'failed'))",
                ([e.id for e in self.endpoints],)).fetchone()[0]

    def stop(self) -> None:
        for e in self.endpoints:
            e.stop()

    def audit(self) -> tuple[list[str], dict[str, Any]]:
        self.stop()  # every line written before we read
        with psycopg.connect(self.url) as conn:
            events = {event_id(seq): (seq, type_, phone, wa_id, data, txid) for seq, type_, phone, wa_id, data, txid
                      in conn.execute("SELECT seq, type, phone_number_id, wa_id, data, txid::text::bigint "
                                      "FROM wa_outbox.events")}
            rows: dict[str, dict[str, Any]] = collections.defaultdict(dict)
            for endpoint_id, status, count, attempts in conn.execute(
                    "SELECT endpoint_id, status, count(*), sum(attempts) FROM wa_outbox.deliveries GROUP BY 1, 2"):
                rows[endpoint_id][status] = {"deliveries": count, "attempts": int(attempts or 0)}
            dispatched = {(endpoint_id, seq) for endpoint_id, seq in conn.execute(
                "SELECT endpoint_id, event_seq FROM wa_outbox.deliveries")}
            recorded = dict(conn.execute("SELECT endpoint_id, count(*) FROM wa_outbox.delivery_attempts GROUP BY 1")
                            .fetchall())
            state = {r[0]: r[1:] for r in conn.execute(
                "SELECT id, state, disabled_reason FROM wa_outbox.endpoints")}
        problems: list[str] = []
        figures: dict[str, Any] = {"events": len(events), "events_by_type": dict(collections.Counter(
            v[1] for v in events.values()))}
        for e in self.endpoints:
            f, p = audit_endpoint(e, events, e.arrivals())
            f["deliveries_by_status"] = rows.get(e.id, {})
            f["attempts_recorded"] = recorded.get(e.id, 0)
            f["state"] = list(state.get(e.id, ("gone", None)))
            expected = {(e.id, v[0]) for v in events.values() if e.matches(v[1])}
            f["not_dispatched"] = len(expected - {d for d in dispatched if d[0] == e.id})
            f["dispatched_outside_filter"] = len({d for d in dispatched if d[0] == e.id} - expected)
            failed = rows.get(e.id, {}).get("failed", {}).get("deliveries", 0)
            if failed:
                p.append(f"{failed} deliveries failed (their retry schedule ran out)")
            if f["dispatched_outside_filter"]:
                p.append(f"{f['dispatched_outside_filter']} deliveries of events outside the filter")
            if f["state"][0] != "enabled":
                p.append(f"the endpoint was disabled ({f['state'][1]})")
            problems += [f"endpoint {e.name}: {problem}" for problem in p]
            figures[e.name] = f
        return problems, figures


def audit_endpoint(e: Endpoint, events: dict[str, tuple], arrivals: list[dict[str, Any]]
                   ) -> tuple[dict[str, Any], list[str]]:
    """One endpoint's figures and violations, from its receiver's arrivals (in arrival order)."""
    problems: list[str] = []
    aborted = [a for a in arrivals if a["answer"] == "aborted"]  # cut off mid-body (a SIGKILL): never a delivery
    arrivals = [a for a in arrivals if a["answer"] != "aborted"]
    expected = {i: v for i, v in events.items() if e.matches(v[1])}
    ok = collections.Counter(a["id"] for a in arrivals if a["answer"] == "ok")
    tries = collections.Counter(a["id"] for a in arrivals)
    lost = sorted(set(expected) - set(ok), key=lambda i: expected[i][0])
    if lost:
        problems.append(f"lost: {len(lost)} of {len(expected)} matching events never delivered, e.g. {lost[:5]}")
    unexpected = sorted(set(tries) - set(expected))
    if unexpected:
        problems.append(f"{len(unexpected)} event ids delivered that do not match it, e.g. {unexpected[:5]}")
    unverified = [a for a in arrivals if not a["verified"]]
    if unverified:
        problems.append(f"{len(unverified)} deliveries standardwebhooks does not verify, e.g. "
                        f"{[(a['id'], a['error']) for a in unverified[:3]]}")
    mismatched = [a["id"] for a in arrivals if a["verified"] and a["id"] in expected and (
        a["body_id"] != a["id"] or a["type"] != expected[a["id"]][1]
        or a["data_sha"] != data_digest(expected[a["id"]][4]))]
    if mismatched:
        problems.append(f"{len(mismatched)} deliveries whose body is not their event's row, e.g. {mismatched[:5]}")
    duplicated = {i: c for i, c in ok.items() if c > 1}
    f: dict[str, Any] = {
        "id": e.id, "ordered": e.ordered, "event_types": e.event_types, "matching_events": len(expected),
        "arrivals": len(arrivals), "answers": dict(collections.Counter(a["answer"] for a in arrivals)),
        "aborted_mid_body": len(aborted),
        "delivered_events": len(set(ok) & set(expected)), "lost": len(lost), "unexpected": len(unexpected),
        "unverified": len(unverified), "mismatched": len(mismatched), "duplicate_events": len(duplicated),
        "duplicate_deliveries": sum(c - 1 for c in duplicated.values()),
        "arrivals_per_event": {str(k): v for k, v in sorted(collections.Counter(tries.values()).items())}}
    if e.ordered:
        # The order: the feed's, (txid, seq), which is the order the engine dispatches in and the feed shows. Two
        # events of one conversation written by concurrent transactions can have their seqs the other way round
        # (a seq is taken at INSERT, a txid at the transaction's first write): counted apart, not a violation.
        def position(i: str) -> tuple[int, int]:
            return expected[i][5], expected[i][0]
        regressions, overlaps, seq_inversions, examples = 0, 0, 0, []
        last: dict[tuple, dict[str, Any]] = {}
        for a in arrivals:
            if a["id"] not in expected:
                continue
            _, _, phone, wa_id, _, _ = expected[a["id"]]
            before = last.get((phone, wa_id))
            if before is not None:
                if position(a["id"]) < position(before["id"]):
                    regressions += 1
                    examples.append((phone, wa_id, before["id"], a["id"]))
                elif a["id"] != before["id"]:
                    seq_inversions += expected[a["id"]][0] < expected[before["id"]][0]
                    overlaps += a["t_in"] < before["t_out"]  # the next event came before the last was answered
            if before is None or position(a["id"]) >= position(before["id"]):
                last[(phone, wa_id)] = a
        f.update(conversations=len({(v[2], v[3]) for v in expected.values()}), order_violations=regressions,
                 in_flight_together=overlaps, seq_inverted_by_feed_order=seq_inversions)
        if regressions:
            problems.append(f"order: {regressions} arrivals came after a later event of their conversation, e.g. "
                            f"{examples[:3]}")
        if overlaps:
            problems.append(f"order: {overlaps} times a conversation's next event arrived before the last was answered")
    return f, problems


def wait_settled(endpoints: Endpoints, timeout: float, retrying: Any) -> bool:
    """Until every matching event is delivered (or failed) at both endpoints; False after timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if retrying(endpoints.pending, "the deliveries still pending") == 0:
            return True
        time.sleep(0.5)
    return False
