"""The worker's CPU priority (WA_OUTBOX_WORKER_NICE): the same as the web's by default, lower where asked.

Where the web and the worker share CPUs (one VM, `wa-outbox dev`) and the CPUs are saturated, a busy worker takes CPU
from the web: pushing each inbound message to two endpoints cut webhook ingest to 0.65-0.72 of the same without
(bench/deliveries.py), 0.85-0.91 at niceness 10. But a worker below the web sends later: with everything running
(bench/capacity.py) the queue's oldest due message stayed under 1 s up to 200 messages/s at niceness 0 and only to
140 at 10. Sends are what the product is for, so equal priority is the default; a deployment whose webhook bursts
matter more raises it. On a machine or dyno of its own the worker competes with nothing and nothing changes.
"""

from __future__ import annotations

import os


def lower_priority(niceness: int) -> None:
    """Raise this thread's niceness to at least `niceness`, never lower it (that needs privileges, and a worker
    started under `nice -n 15` stays there). On Linux a niceness is per thread and a new thread starts with its
    creator's: called first thing in a worker process, before any thread starts, it is the whole worker's."""
    if os.getpriority(os.PRIO_PROCESS, 0) < niceness:
        os.setpriority(os.PRIO_PROCESS, 0, niceness)
