"""The worker as a checkout runs it (`python worker.py`, the same run loop as the Procfile's `wa-outbox worker`),
killed the hard way and the polite way."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import APP_SECRET
from tests.live import SENDER, running_worker, wait_for, worker_settings
from wa_outbox.enqueue import enqueue

ROOT = Path(__file__).resolve().parents[2]
TEXT = {"type": "text", "text": {"body": "pagamento confirmado"}}


def start_worker_process(database_url: str, api_base_url: str, **env: str) -> subprocess.Popen:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("WHATSAPP_", "WA_OUTBOX_"))}
    environment.update(DATABASE_URL=database_url, WHATSAPP_ACCESS_TOKEN="test-access-token",
                       WHATSAPP_PHONE_NUMBER_ID=SENDER, WHATSAPP_API_BASE_URL=api_base_url,
                       WHATSAPP_APP_SECRET=APP_SECRET, WA_OUTBOX_POLL_INTERVAL="0.2",
                       WA_OUTBOX_CONNECT_TIMEOUT="1", WA_OUTBOX_SEND_TIMEOUT="3", WA_OUTBOX_LEASE_SECONDS="10",
                       WA_OUTBOX_WORKER_CONCURRENCY="8", LOG_LEVEL="INFO")
    environment.update(env)
    return subprocess.Popen([sys.executable, "worker.py"], cwd=ROOT, env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def count(db, where: str) -> int:
    return db.execute(f"SELECT count(*) FROM wa_outbox.notifications WHERE {where}").fetchone()[0]


def sending_events(db) -> int:
    return db.execute("SELECT count(*) FROM wa_outbox.notification_events WHERE event = 'sending'").fetchone()[0]


def victim_statements_running(db) -> int:
    """Statements of the (only) worker process still running in Postgres: one sent just before it was frozen."""
    return db.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' "
                      "AND application_name = 'wa-outbox-worker'").fetchone()[0]


def test_sigkill_mid_batch_then_another_worker_every_message_sent_once_none_lost(
        database_url, db, sender, sim, settings):
    sim.set_faults([{"mode": "latency", "ms": 400}])
    # Enough work for many batches of 8 (400 ms each), so the window "a batch in flight" recurs for many seconds.
    ids = [enqueue(db, to=f"+55119{i:08d}", message=TEXT) for i in range(120)]
    victim = start_worker_process(database_url, sim.base_url)

    def frozen_mid_batch() -> bool:
        """Freeze the victim (SIGSTOP) once it has sent at least two batches; keep it frozen only if a batch is in
        flight at that instant, so nothing can finish between seeing the batch and the SIGKILL."""
        if victim.poll() is not None or sending_events(db) < 16:
            return False
        victim.send_signal(signal.SIGSTOP)
        wait_for(lambda: not victim_statements_running(db), timeout=10, what="the frozen victim's last statement")
        if count(db, "status = 'sending'") >= 1:
            return True
        victim.send_signal(signal.SIGCONT)  # between two batches: let it go on, look again
        return False

    try:
        wait_for(frozen_mid_batch, timeout=120, interval=0.1, what="the victim frozen with a batch in flight")
    except AssertionError as exc:
        victim.kill()
        raise AssertionError(f"{exc}; victim exited with {victim.poll()}, output:\n{victim.communicate()[0]}") \
            from None
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=10)
    assert victim.returncode == -signal.SIGKILL
    in_flight = count(db, "status = 'sending'")
    assert in_flight >= 1  # killed mid-batch: rows are stranded under a dead worker's lease
    sim.set_faults([])  # the rescuing worker need not wait 400 ms per send

    # A row claimed but not yet on the wire when the worker died gets no status webhook: it is resent once the
    # unknown window passes (status webhooks are flowing). Rows Meta accepted are settled by their webhooks first.
    rescuer = worker_settings(settings, sim.base_url, lease_seconds=10, send_timeout=3, unknown_window_seconds=8)
    with running_worker(rescuer) as worker:
        def settled():
            worker.maintain()  # rescue as soon as the dead worker's leases expire
            return count(db, "status IN ('sent', 'delivered', 'read')") == len(ids)
        wait_for(settled, timeout=90, interval=0.5, what="every message settled")

    callbacks = [m["biz_opaque_callback_data"] for m in sim.messages()]
    assert sorted(callbacks, key=int) == [str(i) for i in ids]  # each received exactly once, none lost
    rescued = db.execute("SELECT count(DISTINCT notification_id) FROM wa_outbox.notification_events "
                         "WHERE event = 'unknown' AND detail->>'reason' = 'lease expired'").fetchone()[0]
    reconciled = db.execute("SELECT count(*) FROM wa_outbox.notification_events WHERE event = 'reconciled'"
                            ).fetchone()[0]
    resent = db.execute("SELECT count(*) FROM wa_outbox.notification_events WHERE event = 'requeued'").fetchone()[0]
    assert rescued == in_flight and reconciled + resent == in_flight  # by Meta's webhooks, or never sent: resent


def test_sigterm_finishes_in_flight_sends_and_exits_zero(database_url, db, sender, sim, settings):
    sim.set_faults([{"mode": "latency", "ms": 1500}])
    for i in range(30):
        enqueue(db, to=f"+55119{i:08d}", message=TEXT)
    # One claim of 8 at once: a rate whose bucket holds them (at the default 80/s, claims would take about one each,
    # and sends would finish and be replaced while the test looks).
    proc = start_worker_process(database_url, sim.base_url, WA_OUTBOX_SHUTDOWN_GRACE="10",
                                WA_OUTBOX_RATE_LIMIT_MPS="100000")
    wait_for(lambda: count(db, "status = 'sending'") == 8, what="8 sends in flight")
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0, output
    assert time.monotonic() - started < 10
    assert count(db, "status = 'sending'") == 0
    # In-flight sends finished and recorded. On a starved machine a claimed send whose slot slipped before its request
    # went is re-slotted, and one still waiting for its new slot at SIGTERM goes back unsent (nothing went out): the
    # guarantee is that each of the 8 is sent or queued again untouched, never lost, never left `sending`.
    sent = count(db, "status = 'sent'")
    assert 1 <= sent <= 8 and sent == len(sim.messages())
    assert count(db, "status = 'queued' AND attempts = 0") == 30 - sent  # the rest untouched, for the next worker
    assert db.execute("SELECT count(*) FROM wa_outbox.workers").fetchone()[0] == 0
    assert "stopped" in output and "test-access-token" not in output
    # the last line: its totals as JSON fields of their own, not a Python dict in the message
    [stopped] = [record for record in map(_json_or_none, output.splitlines())
                 if record and record.get("message", "").endswith(" stopped")]
    assert stopped["sent"] == sent and stopped["claimed"] >= 8 and stopped["in_flight"] == 0
    assert stopped["worker_id"] in stopped["message"] and "{" not in stopped["message"]


def _json_or_none(line: str) -> dict | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def test_worker_refuses_to_start_on_bad_configuration(database_url):
    proc = start_worker_process(database_url, "http://127.0.0.1:9", WA_OUTBOX_LEASE_SECONDS="5")
    output = proc.communicate(timeout=30)[0]
    assert proc.returncode != 0
    assert "WA_OUTBOX_LEASE_SECONDS=5 must exceed" in output and "Traceback" not in output


def niceness(pid: int | str, task: int | str | None = None) -> int:
    """A process's (or one of its threads') niceness, field 19 of its stat file."""
    path = f"/proc/{pid}/stat" if task is None else f"/proc/{pid}/task/{task}/stat"
    with open(path) as f:
        return int(f.read().rsplit(")", 1)[1].split()[16])


def worker_threads_niceness(proc: subprocess.Popen) -> set[int]:
    """The niceness of each thread of a worker process (a thread that ended since the listing is left out)."""
    found = set()
    for task in os.listdir(f"/proc/{proc.pid}/task"):
        try:
            found.add(niceness(proc.pid, task))
        except FileNotFoundError:
            continue
    return found


def test_the_worker_runs_at_the_niceness_asked_for_and_never_above_its_own(database_url, db, sim):
    if not Path("/proc/self/stat").exists():
        pytest.skip("reads each thread's niceness from /proc (Linux)")
    own = niceness("self")
    for asked, expected in ((None, own), ("10", max(own, 10)), ("0", own), ("15", max(own, 15))):
        # the deliveries' threads at the worker's own too (WA_OUTBOX_DELIVERY_NICE=0 never raises a niceness)
        env = {"WA_OUTBOX_DELIVERY_NICE": "0", **({} if asked is None else {"WA_OUTBOX_WORKER_NICE": asked})}
        proc = start_worker_process(database_url, sim.base_url, **env)
        try:
            # running, its threads started (after the niceness is set: they inherit the main thread's)
            wait_for(lambda running=proc: running.poll() is not None
                     or len(os.listdir(f"/proc/{running.pid}/task")) > 4, what="the worker running, with its threads")
            assert proc.poll() is None, proc.communicate()[0]
            threads = worker_threads_niceness(proc)
            assert threads == {expected}, (asked, threads)
        finally:
            proc.send_signal(signal.SIGTERM)
            output = proc.communicate(timeout=30)[0]
        assert proc.returncode == 0, output


def test_by_default_the_deliveries_threads_run_at_10_and_the_main_thread_at_the_workers_own(database_url, db, sim):
    if not Path("/proc/self/stat").exists():
        pytest.skip("reads each thread's niceness from /proc (Linux)")
    own = niceness("self")
    proc = start_worker_process(database_url, sim.base_url)
    try:
        # the deliveries' loop lowers itself as it starts, and its recorder with it
        wait_for(lambda: proc.poll() is not None or max(own, 10) in worker_threads_niceness(proc),
                 what="the deliveries' threads at niceness 10")
        assert proc.poll() is None, proc.communicate()[0]
        assert niceness(proc.pid, str(proc.pid)) == own  # the main thread: claims and sends
        assert worker_threads_niceness(proc) <= {own, max(own, 10)}
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0, output
