"""Throughput per sender number across worker processes: four real `wa-outbox worker` processes sharing one
sender's schedule of send slots never put more than the configured rate in any one-second window, and still reach
it (the in-process claimers of tests/db/test_pacing.py show the same for threads)."""

from __future__ import annotations

from tests.db.test_pacing import count, queue, window_max
from tests.live import SENDER, wait_for
from tests.system.test_worker_process import start_worker_process
from wa_outbox.worker._classify import THROTTLE_PAUSE_SECONDS


def test_four_worker_processes_never_exceed_the_rate_in_any_second_and_reach_it(database_url, db, sender, sim, run):
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
    assert len(accepted) == n and count(db, "status = 'sent'") == n
    # The simulator's record of accepted sends: never over the rate in any sliding second, and (next to) nothing
    # refused: claims reserve send slots 1/(0.985 * rate) apart and each send goes at its slot, so 21 sends span
    # 1.015 s; a worker that wakes more than 10 ms after a slot gives the row back rather than send it late. What is
    # left is the delay between the worker's send and the simulator's clock reading (its own parsing and
    # validation): on this shared 2-core machine, under the load of the other tests, it exceeds 15 ms now and then
    # and the simulator refuses that send (0-2 per run measured; bench/pacing.py prints that delay).
    # Version 1's bucket drew 130429s by the dozen (27-33 sends granted in a second).
    assert window_max(accepted) <= rate
    refused = sim.stats()["outcomes"].get("error_130429", 0)
    assert refused <= 3
    # Near the rate, less the pauses those refusals drew (each pauses the sender THROTTLE_PAUSE_SECONDS) and the
    # slots left unused by rows given back for a late wake-up (how many depends on the machine's load, so they are
    # counted, not guessed: every claim beyond one per send is one): at least 0.9 of it; the benchmark
    # (bench/pacing.py) measures it over a long run.
    paused = refused * THROTTLE_PAUSE_SECONDS[130429]
    claims = db.execute("SELECT count(*) FROM wa_outbox.notification_events WHERE event = 'sending'").fetchone()[0]
    unused = max(0, claims - n - refused) / rate
    achieved = (n - 1) / (accepted[-1] - accepted[0] - paused - unused)
    assert achieved >= 0.9 * rate, f"{achieved:.2f}/s, {refused} refused, {claims - n - refused} given back"
