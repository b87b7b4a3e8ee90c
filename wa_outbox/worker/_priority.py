"""CPU priorities: the worker's (WA_OUTBOX_WORKER_NICE, 0 by default) and its deliveries' (WA_OUTBOX_DELIVERY_NICE,
10 by default).

Where the web and the worker share CPUs (one VM, `wa-outbox dev`) and the CPUs are saturated, a busy worker takes CPU
from the web. Most of it was the pushes to endpoints: two endpoints cut webhook ingest to 0.64-0.72 of the same
without (bench/deliveries.py). Linux keeps a niceness per thread, so the deliveries' threads (their loop, recorder
and POSTs) run at 10 and everything else at the worker's niceness: the web, and the worker's own sends and inbound
processing, come first, and the deliveries take what they leave, catching up seconds after a burst. Lowering the whole
worker cost sends: with everything running (bench/capacity.py) the queue's oldest due message stayed under 1 s up to
200 messages/s at niceness 0 and only to 140 at 10. Sends are what the product is for, so the worker's own default is
the web's priority. On a machine or dyno of its own the worker competes with nothing, and its deliveries yield only to
its sends.

Niceness matters between the threads of one scheduling group: a process started in a session of its own (setsid, as
`wa-outbox dev` starts its children) is, with Linux's autogroups, a group of its own that shares the CPU equally with
the others whatever its threads' niceness.
"""

from __future__ import annotations

import os


def lower_priority(niceness: int) -> None:
    """Raise this thread's niceness to at least `niceness`, never lower it (that needs privileges, and a worker
    started under `nice -n 15` stays there). On Linux a niceness is per thread and a new thread starts with its
    creator's: called first thing in a worker process, before any thread starts, it is the whole worker's."""
    if os.getpriority(os.PRIO_PROCESS, 0) < niceness:
        os.setpriority(os.PRIO_PROCESS, 0, niceness)
