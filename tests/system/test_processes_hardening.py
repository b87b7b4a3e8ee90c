"""Processes against a database that is away, not migrated yet, or drops connections, and a claim whose reply was
lost. Real processes (`python worker.py`, `wa-outbox db upgrade`), real Postgres, the real simulator."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest

from tests.conftest import _with_dbname, create_scratch_database, drop_database
from tests.live import SENDER, producing, running_worker, wait_for, worker_settings
from tests.system.test_worker_process import TEXT, count, start_worker_process
from wa_outbox import db as wa_db, migrate
from wa_outbox.config import Settings
from wa_outbox.enqueue import enqueue
from wa_outbox.worker._outcomes import Claimed
from wa_outbox.worker._sender import Sender, claim_pacing
from wa_outbox.worker._transport import DryRunTransport

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "hunter2secret"


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"postgresql://app:{PASSWORD}@127.0.0.1:{port}/app"  # nothing listens there once the socket closes


class Output:
    """A process's combined output, read on a thread so the test can wait for lines without blocking."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.lines: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    def matching(self, fragment: str) -> list[str]:
        return [line for line in list(self.lines) if fragment in line]

    def text(self) -> str:
        return "".join(self.lines)


def stop(proc: subprocess.Popen, output: Output) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"SIGTERM did not end the worker:\n{output.text()}") from None


# --- the release phase against a database that is down ---------------------------------------------------------------

def test_db_upgrade_against_a_closed_port_prints_one_line_and_fails():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WHATSAPP_", "WA_OUTBOX_"))}
    env["DATABASE_URL"] = closed_port_url()
    proc = subprocess.run([sys.executable, "-m", "wa_outbox.cli", "db", "upgrade"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr + proc.stdout and PASSWORD not in proc.stderr + proc.stdout
    assert proc.stderr.strip().startswith("wa-outbox: cannot reach the database at postgresql://app:***@")
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_secret_in_a_malformed_variable_never_reaches_the_output():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WHATSAPP_", "WA_OUTBOX_"))}
    env.update(DATABASE_URL=f"mysql://app:{PASSWORD}@db.example/app", WA_OUTBOX_API_TOKENS="goodtoken0123456789,short")
    for extra in ({}, {"DATABASE_URL": closed_port_url()}):
        proc = subprocess.run([sys.executable, "worker.py"], cwd=ROOT, env={**env, **extra}, capture_output=True,
                              text=True, timeout=60)
        output = proc.stdout + proc.stderr
        assert proc.returncode != 0 and "Traceback" not in output
        assert PASSWORD not in output and "goodtoken0123456789" not in output, output
        assert ("DATABASE_URL" if not extra else "WA_OUTBOX_API_TOKENS") in output


# --- a worker started before its database ---------------------------------------------------------------------------

def test_worker_waits_for_an_unreachable_database_and_exits_zero_on_sigterm():
    proc = start_worker_process(closed_port_url(), "http://127.0.0.1:9")
    output = Output(proc)
    try:
        wait_for(lambda: len(output.matching("waiting for the database (try")) >= 3 or proc.poll() is not None,
                 timeout=60, what="three retries logged")
        assert proc.poll() is None, output.text()  # still running, retrying
    finally:
        returncode = stop(proc, output)
    assert returncode == 0, output.text()
    retries = output.matching("waiting for the database (try")
    assert all("cannot reach the database" in line and "next try in" in line for line in retries)
    assert PASSWORD not in output.text() and "Traceback" not in output.text()


@pytest.fixture
def unmigrated_url(server_url):
    name = create_scratch_database(server_url, prefix="wa_outbox_unmigrated")
    yield _with_dbname(server_url, name)
    drop_database(server_url, name)


def test_worker_started_before_the_migration_starts_working_once_migrated(unmigrated_url, sim):
    proc = start_worker_process(unmigrated_url, sim.base_url)
    output = Output(proc)
    try:
        wait_for(lambda: output.matching("not migrated yet") or proc.poll() is not None, timeout=60,
                 what="the worker saying the database is not migrated")
        assert proc.poll() is None, output.text()
        migrate.upgrade(unmigrated_url)  # the release phase finishes
        with psycopg.connect(unmigrated_url, autocommit=True) as conn:
            nid = enqueue(conn, to="+5511987654321", message=TEXT, phone_number_id=SENDER)
            wait_for(lambda: conn.execute("SELECT status FROM wa_outbox.notifications WHERE id = %s", (nid,))
                     .fetchone()[0] in ("sent", "delivered", "read"), timeout=60, what="the message sent")
    finally:
        returncode = stop(proc, output)
    assert returncode == 0, output.text()
    assert [m["biz_opaque_callback_data"] for m in sim.messages()] == [str(nid)]


# --- Postgres drops the worker's connections mid-run ------------------------------------------------------------------

def terminate_worker_backends(db) -> int:
    return len(db.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name IN ('wa-outbox-worker', 'wa-outbox-listener') AND pid <> pg_backend_pid()").fetchall())


def test_worker_survives_its_connections_being_terminated_mid_run(db, sender, sim, settings):
    sim.set_faults([{"mode": "latency", "ms": 100}])
    ids = [enqueue(db, to=f"+55119{i:08d}", message=TEXT) for i in range(60)]
    with running_worker(worker_settings(settings, sim.base_url)) as worker:
        terminated = 0
        for round_ in range(1, 6):  # cut its connections five times while it works
            wait_for(lambda round_=round_: count(db, "status IN ('sent', 'delivered', 'read')") >= round_ * 8,
                     timeout=60, what=f"progress before cut {round_}")
            terminated += terminate_worker_backends(db)
        wait_for(lambda: count(db, "status IN ('sent', 'delivered', 'read')") == len(ids), timeout=60,
                 what="every message sent")
        assert all(t.is_alive() for t in worker._threads), [t.name for t in worker._threads if not t.is_alive()]
    assert terminated >= 5
    assert sorted((m["biz_opaque_callback_data"] for m in sim.messages()), key=int) == [str(i) for i in ids]
    assert count(db, "status = 'unknown'") == 0


# --- a claim whose reply was lost --------------------------------------------------------------------------------

@pytest.fixture
def engine(database_url):
    engine = wa_db.create_engine(database_url, pool_size=2, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


def claim(engine, worker_id: str, limit: int) -> list[dict]:
    return wa_db.fetch(engine, "claim_notifications", {"limit": limit, "worker_id": worker_id,
                                                       "lease_seconds": 30, "default_mps": 1000,
                                                       **claim_pacing(Settings())})


def test_release_gives_back_only_the_claimed_rows_never_handed_to_a_send(db, sender, settings, engine):
    ids = [enqueue(db, to=f"+55119{i:08d}", message=TEXT) for i in range(6)]
    me = Sender(engine, DryRunTransport(), settings, "worker-me", settings.retry_policy())
    rows = claim(engine, "worker-me", 5)  # committed; as if its reply was lost, except for the two we send
    for row in rows[:2]:
        me._start(Claimed(**row))  # sent (dry run), outcome not yet recorded: still held
    wait_for(lambda: me.in_flight == 0, what="the two sends done")
    other = claim(engine, "worker-other", 5)  # another worker's claim is never touched
    assert [r["id"] for r in other] == ids[5:]

    released = me.release_unsent_claims()
    assert sorted(released) == sorted(r["id"] for r in rows[2:])
    states = {r[0]: r[1:] for r in db.execute(
        "SELECT id, status, attempts, locked_by, next_attempt_at <= now() FROM wa_outbox.notifications")}
    for nid in released:
        assert states[nid] == ("queued", 0, None, True)  # due now, attempt given back
    for row in rows[:2]:
        assert states[row["id"]][:3] == ("sending", 1, "worker-me")  # in flight: kept
    assert states[ids[5]][:3] == ("sending", 1, "worker-other")
    events = db.execute("SELECT notification_id, attempt, detail->>'worker' FROM wa_outbox.notification_events "
                        "WHERE event = 'released' ORDER BY notification_id").fetchall()
    assert events == [(nid, 0, "worker-me") for nid in sorted(released)]
    assert me.release_unsent_claims() == []  # a second run matches nothing

    done = threading.Event()
    done.set()
    me.record(done)  # the two outcomes recorded: no longer held, and no longer sending
    assert count(db, "status = 'sent'") == 2 and me.release_unsent_claims() == []
    me.drain(1)


class LostReplySender(Sender):
    """The first claim commits, then its reply is lost on the way back (as when the connection drops)."""
    lost: list[int] = []

    def _claim(self, limit):
        rows = super()._claim(limit)
        if not self.lost:
            self.lost.extend(r.id for r in rows)
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return rows


def test_producer_releases_a_claim_whose_reply_was_lost_and_sends_each_once(db, sender, settings, engine):
    ids = [enqueue(db, to=f"+55119{i:08d}", message=TEXT) for i in range(5)]
    # A rate whose bucket holds all five (the default pacing grants about one token per claim at 80/s).
    fast = worker_settings(settings, "http://127.0.0.1:9", poll_interval=0.05, rate_limit_mps=100000.0)
    producer = LostReplySender(engine, DryRunTransport(), fast, "worker-lost", fast.retry_policy())
    producer.lost = []
    with producing(producer):
        wait_for(lambda: count(db, "status = 'sent'") == len(ids), timeout=20, what="every message sent")
    assert sorted(producer.lost) == ids
    events = db.execute("SELECT notification_id, array_agg(event ORDER BY id) FROM wa_outbox.notification_events "
                        "GROUP BY 1 ORDER BY 1").fetchall()
    assert events == [(nid, ["queued", "sending", "released", "sending", "sent"]) for nid in ids]
    assert count(db, "attempts = 1") == len(ids)  # the lost claim's attempt was given back
