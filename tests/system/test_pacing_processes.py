"""Pacing per sender number across worker processes: four real `wa-outbox worker` processes sharing one
sender's schedule of send slots never put more than the configured rate in any one-second window and send each
message once (the in-process claimers of tests/db/test_pacing.py show the same for threads; bench/pacing.py measures
the rate reached)."""

from __future__ import annotations

from tests.db.test_pacing import count, queue, window_max
from tests.live import SENDER, wait_for
from tests.system.test_worker_process import start_worker_process


def test_four_worker_processes_never_exceed_the_rate_in_any_second_and_send_each_message_once(
        database_url, db, sender, sim, run):
    """20/s shared by 4 processes; the simulator enforces 20/s as Meta does (130429 beyond it)."""
    rate, n = 20, 200
    sim.configure(mps=rate, webhook_url=None)  # no status webhooks: less load on the machine
    assert run("ratelimit", "set", SENDER, "--mps", str(rate)).exit_code == 0
    workers = [start_worker_process(database_url, sim.base_url, WA_OUTBOX_RATE_LIMIT_MPS=str(rate),
                                    WA_OUTBOX_POLL_INTERVAL="1.0", LOG_LEVEL="WARNING") for _ in range(4)]
    try:
        # Running workers, not starting ones: four processes importing at once on a small machine are late on
        # their first slots by tens of ms (as is a machine starved of CPU; the schedule absorbs 15 ms).
        wait_for(lambda: db.execute("SELECT count(*) FROM wa_outbox.workers").fetchone()[0] == 4, timeout=60,
                 what="4 workers running")
        queue(db, n)
        wait_for(lambda: count(db, "status IN ('queued', 'sending')") == 0, timeout=120, interval=0.5,
                 what="the queue drained")
    finally:
        for w in workers:
            w.terminate()
        outputs = [w.communicate(timeout=30)[0] for w in workers]
    assert all(w.returncode == 0 for w in workers), outputs
    accepted = sorted(m["received_at"] for m in sim.messages())
    recipients = {m["to"] for m in sim.messages()}
    # Each message sent exactly once (none lost, none twice), all recorded sent.
    assert len(accepted) == n and len(recipients) == n and count(db, "status = 'sent'") == n
    # Never over the rate in any sliding second at the receiver. Claims reserve send slots 1/(0.985 * rate) apart and
    # each send goes at its slot; a worker that wakes more than 10 ms after a slot gives the row back rather than send
    # it late. What the schedule cannot control is the delay between a worker's send and the simulator's clock
    # reading: on a loaded machine it exceeds 15 ms now and then, and the simulator refuses that send with 130429 as
    # Meta would; the refused send pauses the sender and goes again later (counted above: every message sent once).
    # How many are refused, and the throughput reached, depend on the machine's load: bench/pacing.py measures both
    # (a timed floor here failed on a busy machine, not on a broken feature).
    assert window_max(accepted) <= rate
